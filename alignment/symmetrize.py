"""Symmetrization of two alignment directions (atools semantics): the names of :mod:`wordalign.symmetrize`, their home.

The module lives in :mod:`wordalign` (pure Python and numpy, below both the models and this package) so that
the model layer's hub can use it without importing ``alignment``; ``alignment.symmetrize`` stays importable.
"""
from wordalign.symmetrize import METHODS, grow_diag, grow_diag_final, grow_diag_final_and, intersect, symmetrize, union  # noqa: F401

__all__ = ["METHODS", "symmetrize", "intersect", "union", "grow_diag", "grow_diag_final", "grow_diag_final_and"]
