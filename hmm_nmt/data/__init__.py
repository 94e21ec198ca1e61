"""Data formats: CoNLL column files, entity tag schemes, the taggers' character alphabet (no fairseq import)."""
