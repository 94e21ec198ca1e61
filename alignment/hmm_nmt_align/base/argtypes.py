"""argparse types of whole numbers: the plugin's size options (:mod:`hmm_nmt.options`) and the command lines that
answer ``--help`` without importing torch or fairseq (``hmm-nmt-align-corpus``) refuse a value the same way."""
import argparse

__all__ = ["int_at_least"]


def int_at_least(low: int):
    """An argparse type: an integer >= ``low``, else argparse's one-line error naming the flag."""
    def check(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"an integer is needed, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    check.__name__ = "positive_int" if low == 1 else "nonnegative_int"
    return check
