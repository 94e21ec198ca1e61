"""The direct-HMM cross-attention block of Eq. 6 and the decoder layer built on it (transformer_dhmm).

See :mod:`hmm_nmt.models.transformer_dhmm` for the model; ``Linear`` and the per-source cache mixin are shared
with :mod:`hmm_nmt.models.first_order_alignment` and :mod:`hmm_nmt.models.dhmm_decoder`.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase
from torch import Tensor

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.blocked import relu_weighted_sum
from hmm_nmt.hmm.precision import upcast


def Linear(in_features, out_features, bias=True):
    m = nn.Linear(in_features, out_features, bias)
    nn.init.xavier_uniform_(m.weight)
    if bias:
        nn.init.constant_(m.bias, 0.0)
    return m


class _CachedSourceMixin:
    """Per-source projections are computed once per sentence and kept in the incremental state."""

    def _source_cache(self, incremental_state, compute):
        if incremental_state is None:
            return compute()
        saved = self.get_incremental_state(incremental_state, "src")
        if saved is None:
            saved = compute()
            self.set_incremental_state(incremental_state, "src", saved)
        return saved

    def _reorder_cache(self, incremental_state, new_order, key, source_only=False):
        saved = self.get_incremental_state(incremental_state, key)
        if saved is not None and source_only and all(v.size(0) == new_order.size(0) for v in saved.values()):
            # as fairseq's static encoder-decoder key/values: when the batch keeps its size, the new order
            # only permutes the beams of each sentence, which share the source, so the cache is unchanged
            return incremental_state
        if saved is not None:
            saved = {k: v.index_select(0, new_order) for k, v in saved.items()}
            self.set_incremental_state(incremental_state, key, saved)
        return incremental_state


@with_incremental_state
class DHMMCrossAttention(_CachedSourceMixin, nn.Module):
    """The direct-HMM cross-attention sub-layer (Eq. 6) with per-head alignment weights."""

    def __init__(self, embed_dim, num_heads, kdim, dropout=0.0):
        super().__init__()
        assert embed_dim % num_heads == 0, "embed_dim must be divisible by the number of heads"
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = Linear(embed_dim, embed_dim)
        self.k_proj = Linear(kdim, embed_dim)
        self.src_proj = Linear(kdim, embed_dim)  # W2
        self.tgt_proj = Linear(embed_dim, embed_dim)  # W3
        self.out_proj = Linear(embed_dim, embed_dim)  # W1
        self.dropout = dropout

    def forward(self, query: Tensor, key: Tensor, key_padding_mask: Optional[Tensor],
                incremental_state=None):
        """query (T, B, C), key (S, B, C) -> context (T, B, C), per-head log alpha (B, H, T, S)."""
        tgt_len, bsz, _ = query.shape

        def compute():
            k = self.k_proj(key).view(-1, bsz, self.num_heads, self.head_dim).permute(1, 2, 3, 0)
            v = self.src_proj(key).view(-1, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
            return {"k": k, "v": v.contiguous()}  # (B, H, S, D)

        src = self._source_cache(incremental_state, compute)
        q = (self.q_proj(query) * self.scaling).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        scores = q @ src["k"]  # (B, H, T, S)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], direct.MASKED)
        log_alpha = torch.log_softmax(upcast(scores), dim=-1)
        alpha = F.dropout(log_alpha.exp().type_as(query), p=self.dropout, training=self.training)
        # the (T, B, H, S, D) ReLU is formed a cache-sized block of target positions at a time (hmm_nmt.hmm.blocked)
        t = self.tgt_proj(query).view(tgt_len, bsz, self.num_heads, self.head_dim)
        ctx = relu_weighted_sum(alpha, src["v"], t).view(tgt_len, bsz, self.embed_dim)
        return self.out_proj(ctx), log_alpha

    def reorder_incremental_state(self, incremental_state, new_order):
        return self._reorder_cache(incremental_state, new_order, "src", source_only=True)


class DHMMDecoderLayer(TransformerDecoderLayerBase):
    """fairseq's decoder layer with the cross-attention block of Eq. 6 (no residual around it)."""

    def build_encoder_attention(self, embed_dim, cfg):
        return DHMMCrossAttention(embed_dim, cfg.decoder.attention_heads, cfg.encoder.embed_dim,
                                  dropout=cfg.attention_dropout)

    def forward(self, x, encoder_out, encoder_padding_mask, incremental_state=None,
                self_attn_mask=None, self_attn_padding_mask=None):
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=self_attn_padding_mask,
                              incremental_state=incremental_state, need_weights=False, attn_mask=self_attn_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        # W3 s_i inside the ReLU takes the place of the residual connection of this sub-layer
        if self.normalize_before:
            x = self.encoder_attn_layer_norm(x)
        x, log_alpha = self.encoder_attn(x, encoder_out, encoder_padding_mask, incremental_state)
        x = self.dropout_module(x)
        if not self.normalize_before:
            x = self.encoder_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout_module(self.activation_fn(self.fc1(x)))
        x = self.residual_connection(self.dropout_module(self.fc2(x)), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x, log_alpha
