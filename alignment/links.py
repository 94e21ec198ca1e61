"""Link decisions and soft symmetrization: the names of :mod:`wordalign.links`, their home.

The module lives in :mod:`wordalign` (pure Python and numpy, below both the models and this package) so that
the model layer's hub can use it without importing ``alignment``; ``alignment.links`` stays importable.
"""
from wordalign.links import DECISIONS, POOLS, SOFT, decide, parse_decision, pool_words, soft_combine  # noqa: F401

__all__ = ["DECISIONS", "SOFT", "POOLS", "parse_decision", "decide", "soft_combine", "pool_words"]
