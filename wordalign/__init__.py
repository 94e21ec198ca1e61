"""Word-alignment primitives in pure Python and numpy: no torch, no fairseq, no import of the project.

:mod:`wordalign.pharaoh` (one sentence's :class:`~wordalign.pharaoh.Alignment` and its Pharaoh line),
:mod:`wordalign.links` (link decisions on a matrix, soft symmetrization, a sentence's word links),
:mod:`wordalign.symmetrize` (the atools heuristics), :mod:`wordalign.subword` (piece-to-word maps) and
:mod:`wordalign.segment` (word-by-word segmentation).

Layers, bottom up: ``wordalign`` and ``hmm_nmt.hmm`` < ``hmm_nmt`` (models, criterions, tasks, and the model
layer's forced alignment and hub, :mod:`hmm_nmt.aligner`) < ``alignment`` (file formats, AER, the command-line
tools) < scripts. These modules sit at the bottom because both the hub of the model layer
(``TransformerDHMMModel.from_pretrained(...).align``) and the light command-line tools of ``alignment``
(``hmm-nmt-aer``, ``hmm-nmt-symmetrize``, which must not import torch or fairseq) need them, and importing
anything under ``hmm_nmt`` imports fairseq (the plugin registers itself). ``alignment.links``,
``alignment.segment``, ``alignment.subword`` and ``alignment.symmetrize`` re-export them.
"""
