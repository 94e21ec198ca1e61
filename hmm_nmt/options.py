"""Argument types of the plugin's size options, and defaults that never replace a value the user gave.

fairseq builds each model's options with argparse, so a value out of range is refused at parse time with
argparse's one-line error naming the flag (``fairseq-train: error: argument --max-jump: must be >= 1, got 0``),
before any data is read. The architecture functions fill in only options left unset: ``x or default`` would
turn an explicit 0 into the default.
"""
import argparse

from hmm_nmt_align.base.argtypes import int_at_least

#: sizes, chunk lengths, counts: 1 or more
positive_int = int_at_least(1)
#: sizes where 0 means "none" or "off" (a linear layer, no pruning, no warm-up)
nonnegative_int = int_at_least(0)


def probability(text):
    """A float in [0, 1): dropout rates, label smoothing."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number is needed, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def set_default(args, name, value):
    """``args.name = value`` unless the option was given (not None), so that 0 stays 0."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)
    return getattr(args, name)
