"""Alignment matrices of a stock fairseq transformer: cross-attention averaged over heads and layers.

fairseq's ``TransformerModel`` cannot be given a method, so the attention path of forced alignment is this
function; :meth:`hmm_nmt.models.transformer_dhmm.TransformerDHMMModel.alignment_matrices` is the direct HMM's.
:mod:`hmm_nmt.aligner.matrices` dispatches on ``getattr(model, "alignment_matrices")`` and falls back to
:func:`attention_matrices` for a model that :func:`is_attention_model`. It sits in ``hmm_nmt.aligner`` (not
``hmm_nmt.models``) so that the aligner never imports ``hmm_nmt.models``: the models import the aligner's
hub, the aligner only calls the models' methods.
"""
from typing import List, Optional, Sequence

import torch
from torch import Tensor


def is_attention_model(model) -> bool:
    """A fairseq transformer whose decoder returns its cross-attention (``alignment_layer``)."""
    from fairseq.models.transformer import TransformerDecoderBase, TransformerModel

    return isinstance(model, TransformerModel) and isinstance(model.decoder, TransformerDecoderBase)


def default_layers(model) -> List[int]:
    """1-based decoder layers averaged by ``attention``: the last two (5 and 6 of 6), or the only one."""
    n = len(model.decoder.layers)
    return list(range(max(1, n - 1), n + 1))


@torch.no_grad()
def attention_matrices(model, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor,
                       layers: Optional[Sequence[int]] = None, encoder_out=None) -> Tensor:
    """(B, I, J) cross-attention of the reference pairs (teacher forcing), averaged over all heads of
    ``layers`` (1-based decoder layers; default :func:`default_layers`). ``encoder_out``: the encoder's
    output for these sources, when the caller already has it."""
    layers = list(layers) if layers is not None else default_layers(model)
    if encoder_out is None:
        encoder_out = model.encoder(src_tokens, src_lengths=src_lengths)
    per_layer = []
    for layer in layers:
        # fairseq averages the heads of ``alignment_layer`` (0-based); all layers have the same
        # number of heads, so the mean of the layer means is the mean over all their heads
        _, extra = model.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=True,
                                 alignment_layer=layer - 1)
        per_layer.append(extra["attn"][0].float())
    return torch.stack(per_layer).mean(0)
