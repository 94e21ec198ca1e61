"""Word-alignment toolkit: formats, AER, symmetrization (atools semantics), subword-to-word mapping,
link decisions, word-by-word segmentation, heat maps and statistical baselines.  Nothing here imports
fairseq except ``alignment.extract`` (the ``hmm-nmt-align`` CLI) with ``alignment.loading``,
``alignment.subset`` and ``alignment.raw_text``, and ``alignment.hub``.

This package is the tools layer, above the models: checkpoint-based alignment goes through the model layer's
:mod:`hmm_nmt.aligner` (never a model class), and the pure helpers (links, segment, subword, symmetrize, the
Pharaoh line) live in :mod:`wordalign`, below both, re-exported here under their old module names.
"""
from .aer import AERCounts, corpus_scores, sentence_counts, sentence_scores
from .io import (
    Alignment,
    AlignmentFormatError,
    read_alignments,
    read_giza_a3,
    read_naacl,
    read_pharaoh,
    write_naacl,
    write_pharaoh,
)
from .subword import subword_to_word_links
from .symmetrize import METHODS, symmetrize

__all__ = [
    "AERCounts", "Alignment", "AlignmentFormatError", "METHODS", "corpus_scores", "read_alignments",
    "read_giza_a3", "read_naacl", "read_pharaoh", "sentence_counts", "sentence_scores", "subword_to_word_links",
    "symmetrize", "write_naacl", "write_pharaoh",
]
