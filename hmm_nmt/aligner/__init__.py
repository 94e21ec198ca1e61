"""Forced word alignment with a loaded translation model, in the model layer (imports fairseq, no model class).

* :mod:`hmm_nmt.aligner.matrices`: matrices of reference pairs over a fairseq pair dataset, dispatched to the
  model's ``alignment_matrices`` method (transformer_dhmm) or to
  :func:`hmm_nmt.aligner.attention.attention_matrices` (a stock fairseq transformer, which cannot be given a
  method), and the word links read off them.
* :mod:`hmm_nmt.aligner.pairs`: word-tokenised pairs segmented and binarized in memory, and aligned.
* :mod:`hmm_nmt.aligner.hub`: the hub interface (``align``, ``translate(..., alignment=True)``) that
  ``TransformerDHMMModel.from_pretrained`` and ``hmm_nmt.aligner.hub.from_pretrained`` return.

Layers: :mod:`hmm_nmt_align.base` (pure helpers) < this package < ``hmm_nmt.models`` < :mod:`alignment` (checkpoint
loading, binarized subsets, raw-text files, the ``hmm-nmt-align`` CLI), which re-exports these names from
``hmm_nmt_align.extract`` and ``hmm_nmt.aligner.hub``. The aligner defines the protocol a model implements
(``ALIGNMENT_METHODS``, ``alignment_model_type()``, ``alignment_matrices(...)``) and never imports a model
module; ``TransformerDHMMModel.from_pretrained`` imports :mod:`hmm_nmt.aligner.hub` (lazily) to return it.
``import hmm_nmt`` (the plugin's registration) does not import this package; it is loaded when used.
"""
