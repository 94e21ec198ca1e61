"""Data formats: CoNLL column files, entity tag schemes (no fairseq import)."""
