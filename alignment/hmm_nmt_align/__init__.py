"""Word-alignment toolkit: formats, AER, symmetrization (atools semantics), subword-to-word mapping,
link decisions, word-by-word segmentation, heat maps and statistical baselines.  Nothing here imports
fairseq except ``hmm_nmt_align.extract`` (the ``hmm-nmt-align`` CLI) with ``hmm_nmt_align.loading``,
``hmm_nmt_align.subset`` and ``hmm_nmt_align.raw_text``, and ``hmm_nmt.aligner.hub``.

This package is the tools layer, above the models: checkpoint-based alignment goes through the model layer's
:mod:`hmm_nmt.aligner` (never a model class), and the pure helpers (links, segment, subword, symmetrize, the
Pharaoh line) and the atomic writer live in :mod:`hmm_nmt_align.base`, below both.

The package is the folder ``alignment/hmm_nmt_align/`` (src layout); its name is not ``alignment``, a package
of that name already exists on the package index, and pip would overwrite one with the other.
"""
from .aer import AERCounts, corpus_scores, sentence_counts, sentence_scores
from .base.subword import subword_to_word_links
from .base.symmetrize import METHODS, symmetrize
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

__all__ = [
    "AERCounts", "Alignment", "AlignmentFormatError", "METHODS", "corpus_scores", "read_alignments",
    "read_giza_a3", "read_naacl", "read_pharaoh", "sentence_counts", "sentence_scores", "subword_to_word_links",
    "symmetrize", "write_naacl", "write_pharaoh",
]
