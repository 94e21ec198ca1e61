"""The bottom of the project: pure Python and numpy, no torch, no fairseq, no import of the project above.

:mod:`~hmm_nmt_align.base.atomic` (atomic file output, standard library only),
:mod:`~hmm_nmt_align.base.pharaoh` (one sentence's :class:`~hmm_nmt_align.base.pharaoh.Alignment` and its
Pharaoh line), :mod:`~hmm_nmt_align.base.links` (link decisions on a matrix, soft symmetrization, a sentence's
word links), :mod:`~hmm_nmt_align.base.symmetrize` (the atools heuristics), :mod:`~hmm_nmt_align.base.subword`
(piece-to-word maps), :mod:`~hmm_nmt_align.base.segment` (word-by-word segmentation) and
:mod:`~hmm_nmt_align.base.argtypes` (argparse types of whole numbers).

Layers, bottom up: ``hmm_nmt_align.base`` < ``hmm_nmt`` (the plugin; its hub,
``TransformerDHMMModel.from_pretrained(...).align``, uses these modules) < the tools of ``hmm_nmt_align``
(file formats, AER, the command lines; ``hmm-nmt-aer`` and ``hmm-nmt-symmetrize`` never import torch or
fairseq) < ``benchmarks``. They live in the tools' package rather than under ``hmm_nmt`` because importing
anything under ``hmm_nmt`` runs ``hmm_nmt/__init__.py``, which imports fairseq to register the plugin.
"""
