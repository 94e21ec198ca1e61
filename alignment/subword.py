"""Subword-to-word link mapping: the names of :mod:`wordalign.subword`, their home.

The module lives in :mod:`wordalign` (pure Python and numpy, below both the models and this package) so that
the model layer's hub can use it without importing ``alignment``; ``alignment.subword`` stays importable.
"""
from wordalign.subword import BPE_CONT, SPM_SPACE, STYLES, subword_to_word_links, word_index, words  # noqa: F401

__all__ = ["STYLES", "SPM_SPACE", "word_index", "words", "subword_to_word_links"]
