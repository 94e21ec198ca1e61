"""Word-by-word subword segmentation: the names of :mod:`wordalign.segment`, their home.

The module lives in :mod:`wordalign` (pure Python and numpy, below both the models and this package) so that
the model layer's hub can use it without importing ``alignment``; ``alignment.segment`` stays importable.
"""
from wordalign.segment import Segmenter, load_segmenter  # noqa: F401

__all__ = ["Segmenter", "load_segmenter"]
