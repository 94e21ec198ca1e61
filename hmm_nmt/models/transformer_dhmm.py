"""Transformer-based direct HMM (Wang, Yang, Gao, Ney, ACL-SRW 2021) as a fairseq model.

Notation: source states h_j (encoder output, encoder unchanged), target states s_i^(l) (decoder layer l),
vocabulary V, L decoder layers.

* The cross-attention sub-layer of the last decoder layer (``--dhmm-layers last``, the default) or of every
  decoder layer (``--dhmm-layers all``, the paper's form; docs/quality.md compares them) becomes (Eq. 6)

      c_i^(l+1) = sum_j alpha^(l+1)(j|i) W1 ReLU(W2 h_j + W3 s_i^(l)),   alpha = softmax_j(A[s_i, h_j]):

  the weighted sum moves outside the ReLU, and the projected target state W3 s_i inside it replaces the
  residual connection of that sub-layer. With H heads, alpha is computed per head (scaled dot product) and
  head h weights its slice of ReLU(...) before W1 (= the output projection) mixes the heads.
* Lexicon (Eq. 7): p(e | j, e_<i, f) = softmax(W4 ReLU(W5 h_j + W6 s_i^(L))), W4 the output projection
  (shared with the embeddings under ``--share-decoder-input-output-embed`` / ``--share-all-embeddings``).
* Alignment, zero order (Eq. 8): p(j | e_<i, f) = alpha^(L)(j|i) averaged over the H heads of the last
  layer: a mixture of distributions, so still one distribution over the non-pad source positions (EOS
  included; it is where words without a source counterpart can align).
* Alignment, first order (Eq. 11-12): see :class:`FirstOrderAlignment`.
* Output (Eq. 9): p(e | e_<i, f) = sum_j p(j | ...) p(e | j, ...). The decoder returns these log-probs as its
  "logits" (log_softmax leaves them unchanged), so beam search, sampling, scoring and ``--print-alignment``
  (argmax of the alignment distribution, returned as ``attn``) go through fairseq unchanged.

Training does not go through the mixture: the criterion ``dhmm_label_smoothed_cross_entropy`` calls the model
with ``features_only=True`` and computes the sentence likelihood by dynamic programming (hmm_nmt.hmm.direct)
from chunked lexicon scores (hmm_nmt.hmm.lexicon) and the alignment distributions returned here.
"""
import math
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq import utils
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder, TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture, transformer_iwslt_de_en
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.precision import accumulation_dtype, upcast
from hmm_nmt.hmm.lexicon import LEXICON_DTYPES, gold_logits, lexicon_logz, lexicon_scores, log_mixture
from hmm_nmt.models.topk_schedule import parse_topk_schedule, topk_at


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
            return {"k": k, "v": self.src_proj(key).transpose(0, 1)}

        src = self._source_cache(incremental_state, compute)
        q = (self.q_proj(query) * self.scaling).view(tgt_len, bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        scores = q @ src["k"]  # (B, H, T, S)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], direct.MASKED)
        log_alpha = torch.log_softmax(upcast(scores), dim=-1)
        alpha = F.dropout(log_alpha.exp().type_as(query), p=self.dropout, training=self.training)
        s = self.tgt_proj(query).transpose(0, 1)  # (B, T, C)
        u = torch.relu(src["v"][:, None, :, :] + s[:, :, None, :])  # (B, T, S, C)
        u = u.view(bsz, tgt_len, -1, self.num_heads, self.head_dim)
        ctx = torch.einsum("bhts,btshd->tbhd", alpha, u).reshape(tgt_len, bsz, self.embed_dim)
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


@with_incremental_state
class FirstOrderAlignment(_CachedSourceMixin, nn.Module):
    """First-order alignment model log p(j | j', e_<i, f) (Eq. 11-12), with a start predecessor.

    Eq. 12 scores j against the pair [h_j ; h_j'] from s_i^(L-1). With a plain dot-product energy
    q_i . (U h_j + U' h_j') the j'-only part is constant over j and cancels in the softmax over j, so such
    a model cannot depend on the predecessor at all (a likely cause of the "forgetting" the paper reports).
    We use an energy in which j' survives the softmax:

        E(i, j', j) = [ q_i . k_j + (q_i * p_j') . r_j ] / sqrt(d) + b(bucket(j - j'))

    with q_i = Wq s_i^(L-1), k_j = Wk h_j, p_j' = Wp h_j', r_j = Wr h_j: the trilinear term couples query,
    predecessor and candidate, and b is a learned jump-width bias over the clipped jump j - j'
    (-m..m, Vogel et al. 1996 style). Jumps use positions counted from the first non-pad source token, so
    left and right padding give the same model. The first target position uses a learned start
    predecessor: p_start in place of p_j' and a separate bias b0 over the clipped absolute position of j.
    Only (B, I, J, J) log-probabilities are formed; the largest other intermediate is (B, I, J, d).
    """

    def __init__(self, query_dim, key_dim, dim, max_jump=16):
        super().__init__()
        self.dim, self.max_jump = dim, max_jump
        self.q_proj = Linear(query_dim, dim)
        self.k_proj = Linear(key_dim, dim)
        self.p_proj = Linear(key_dim, dim)
        self.r_proj = Linear(key_dim, dim, bias=False)
        self.p_start = nn.Parameter(torch.randn(dim) * dim ** -0.5)
        self.jump_bias = nn.Embedding(2 * max_jump + 1, 1)
        self.start_bias = nn.Embedding(max_jump + 1, 1)
        nn.init.zeros_(self.jump_bias.weight)
        nn.init.zeros_(self.start_bias.weight)

    def source_features(self, h: Tensor, src_pad: Tensor) -> Dict[str, Tensor]:
        """h (B, J, C) -> projections and the start/jump biases, independent of the target position."""
        pos = torch.cumsum((~src_pad).long(), dim=1) - 1  # position among real tokens
        jump = (pos[:, None, :] - pos[:, :, None]).clamp(-self.max_jump, self.max_jump) + self.max_jump
        return {
            "k": self.k_proj(h), "p": self.p_proj(h), "r": self.r_proj(h),
            "jump": self.jump_bias(jump).squeeze(-1),  # (B, J', J)
            "start": self.start_bias(pos.clamp(0, self.max_jump)).squeeze(-1),  # (B, J)
            "mask": src_pad,
        }

    def forward(self, s: Tensor, src: Dict[str, Tensor]):
        """s (B, I, D) = s^(L-1) -> log_init (B, I, J), log_trans (B, I, J', J)."""
        scale = self.dim ** -0.5
        q = self.q_proj(s) * scale  # (B, I, d)
        base = q @ src["k"].transpose(1, 2)  # (B, I, J)
        r_t = src["r"].transpose(1, 2)  # (B, d, J)
        tri = (q[:, :, None, :] * src["p"][:, None, :, :]) @ r_t[:, None]  # (B, I, J', J)
        energy = tri + base[:, :, None, :] + src["jump"][:, None]
        start = (q * self.p_start) @ r_t + base + src["start"][:, None, :]  # (B, I, J)
        mask = src["mask"]
        log_trans = torch.log_softmax(upcast(energy).masked_fill(mask[:, None, None, :], direct.MASKED), -1)
        log_init = torch.log_softmax(upcast(start).masked_fill(mask[:, None, :], direct.MASKED), -1)
        return log_init, log_trans

    def reorder_incremental_state(self, incremental_state, new_order):
        self._reorder_cache(incremental_state, new_order, "src", source_only=True)
        return self._reorder_cache(incremental_state, new_order, "state")


class DHMMEncoder(TransformerEncoder):
    """fairseq's encoder, unchanged, except that it refuses empty source sentences.

    The alignment distribution needs source words to align to; a source of EOS alone (an empty input
    line) is a data error, reported instead of silently translated from nothing.
    """

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens=False, token_embeddings=None):
        words = src_tokens.ne(self.padding_idx) & src_tokens.ne(self.dictionary.eos())
        empty = (~words.any(dim=1)).nonzero().flatten()
        if len(empty) > 0:
            raise ValueError(f"transformer_dhmm: empty source sentence (row {empty.tolist()} of the batch): "
                             "the direct HMM needs at least one source word to align to")
        return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)


class TransformerDHMMDecoder(_CachedSourceMixin, TransformerDecoder):
    """Decoder whose output is the direct-HMM mixture; see the module docstring."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn, output_projection)
        if self.adaptive_softmax is not None:
            raise ValueError("transformer_dhmm does not support --adaptive-softmax-cutoff")
        d_out, d_src = self.output_embed_dim, args.encoder_embed_dim
        self.lex_src_proj = Linear(d_src, d_out)  # W5
        self.lex_tgt_proj = Linear(d_out, d_out, bias=False)  # W6
        self.alignment_order = args.alignment_order
        self.lexicon_chunk_size = args.lexicon_chunk_size
        self.lexicon_dtype = LEXICON_DTYPES[args.lexicon_dtype]
        self.topk = args.lexicon_topk
        self.topk_warmup = args.lexicon_topk_warmup
        self.topk_schedule = parse_topk_schedule(args.lexicon_topk_schedule, getattr(args, "max_update", 0))
        self.topk_objective = args.lexicon_topk_objective
        self.num_updates = 0
        self.first_order = (
            FirstOrderAlignment(args.decoder_embed_dim, d_src, args.decoder_embed_dim, args.max_jump)
            if self.alignment_order == 1 else None
        )
        self.lexicon_dropout = args.lexicon_dropout
        self.dhmm_layers = args.dhmm_layers
        if self.dhmm_layers == "last":
            # fairseq's own cross-attention (with its residual) below the last layer; only the last layer's
            # Eq. 6 block gives the alignment distribution, so only it needs the moved ReLU
            for idx in range(len(self.layers) - 1):
                self.layers[idx] = TransformerDecoder.build_decoder_layer(self, args, no_encoder_attn)

    @property
    def lexicon_topk(self) -> int:
        """K in effect: in training, the K of ``--lexicon-topk-schedule`` at this update, or 0 (exact) within the
        first ``--lexicon-topk-warmup`` updates; otherwise (validation, decoding) ``--lexicon-topk``."""
        if self.training:
            if self.topk_schedule:
                return topk_at(self.topk_schedule, self.num_updates)
            if self.num_updates < self.topk_warmup:
                return 0
        return self.topk

    def set_num_updates(self, num_updates):
        # called by BaseFairseqModel.set_num_updates on every module, once per update
        self.num_updates = num_updates

    def build_decoder_layer(self, args, no_encoder_attn=False):
        return DHMMDecoderLayer(TransformerConfig.from_namespace(args), no_encoder_attn=no_encoder_attn)

    # ------------------------------------------------------------------ features and alignment
    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **unused):
        bsz, _ = prev_output_tokens.size()
        enc = encoder_out["encoder_out"][0]  # (J, B, C)
        src_pad = (encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) > 0
                   else enc.new_zeros(bsz, enc.size(0), dtype=torch.bool))

        positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state) \
            if self.embed_positions is not None else None
        tokens = prev_output_tokens
        if incremental_state is not None:
            tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:] if positions is not None else None
        x = self.embed_scale * self.embed_tokens(tokens.contiguous())
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x = x + positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x).transpose(0, 1)

        self_attn_padding_mask = tokens.eq(self.padding_idx) if tokens.eq(self.padding_idx).any() else None
        inner_states: List[Tensor] = [x]
        log_alpha = None
        for layer in self.layers:
            self_attn_mask = self.buffered_future_mask(x) if incremental_state is None else None
            if isinstance(layer, DHMMDecoderLayer):
                x, log_alpha = layer(x, enc, src_pad, incremental_state, self_attn_mask=self_attn_mask,
                                     self_attn_padding_mask=self_attn_padding_mask)
            else:  # --dhmm-layers last: a stock layer
                x, _, _ = layer(x, enc, src_pad, incremental_state, self_attn_mask=self_attn_mask,
                                self_attn_padding_mask=self_attn_padding_mask)
            inner_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)

        h = enc.transpose(0, 1)
        extra = {"inner_states": inner_states, "encoder_out": h, "src_pad": src_pad}
        if self.first_order is None:
            # mixture of the heads' distributions (Eq. 8)
            extra["log_align"] = torch.logsumexp(log_alpha, dim=1) - math.log(log_alpha.size(1))
        else:
            src = self.first_order._source_cache(incremental_state, lambda: self.first_order.source_features(h, src_pad))
            log_init, log_trans = self.first_order(inner_states[-2].transpose(0, 1), src)
            extra["log_init"], extra["log_trans"] = log_init, log_trans
        return x, extra

    # ------------------------------------------------------------------ lexicon
    def lexicon_source(self, h: Tensor, incremental_state=None) -> Tensor:
        """W5 h_j + b5 (B, J, d); in incremental decoding computed once per sentence and cached."""
        return self._source_cache(incremental_state, lambda: {"lex": self.lex_src_proj(h)})["lex"]

    def lexicon_features(self, x: Tensor, h: Tensor, incremental_state=None):
        """(W5 h_j + b5 (B, J, d), W6 s_i (B, I, d)); the lexicon hidden is ReLU of their sum.

        ``--lexicon-dropout`` drops units of both terms in training (per source and per target position, so
        every consumer of one forward pass, the two-pass first-order pruning included, sees the same mask).
        """
        src, tgt = self.lexicon_source(h, incremental_state), self.lex_tgt_proj(x)
        if self.lexicon_dropout > 0 and self.training:
            src = F.dropout(src, self.lexicon_dropout, training=True)
            tgt = F.dropout(tgt, self.lexicon_dropout, training=True)
        return src, tgt

    def reorder_incremental_state(self, incremental_state, new_order):
        return self._reorder_cache(incremental_state, new_order, "src", source_only=True)

    def _output_weight_bias(self):
        proj = self.output_projection
        return proj.weight, proj.bias

    def lexicon_scores(self, x: Tensor, extra: Dict, target: Tensor, row_mask: Tensor, features=None):
        """(log p(e_i | j), mean_v log p(v | j)) as (B, I, J) tensors for the rows where ``row_mask``.

        Rows outside ``row_mask`` (target or source padding, pruned positions) get 0; the DP never uses
        them because their alignment log-probability is -inf or their target position is masked.
        ``features``: (src_feat, tgt_feat) of :meth:`lexicon_features` when the caller already has them.
        """
        src_feat, tgt_feat = features if features is not None else self.lexicon_features(x, extra["encoder_out"])
        b, i, j = row_mask.nonzero(as_tuple=True)
        hidden = torch.relu(src_feat[b, j] + tgt_feat[b, i])
        weight, bias = self._output_weight_bias()
        gold, mean = lexicon_scores(hidden, weight, bias, target[b, i], self.lexicon_chunk_size, self.lexicon_dtype)
        out_gold = gold.new_zeros(row_mask.shape)
        out_mean = gold.new_zeros(row_mask.shape)
        out_gold = out_gold.index_put((b, i, j), gold)
        out_mean = out_mean.index_put((b, i, j), mean)
        return out_gold, out_mean

    def lexicon_rows(self, extra: Dict, tgt_mask: Tensor) -> Tensor:
        """(B, I, J) mask of the (i, j) pairs whose lexicon score the likelihood needs.

        With ``--lexicon-topk K`` (zero order) only the K most probable source positions of each target
        position are kept; the first-order pruning is sequential, see :meth:`pruned_first_order_loss`.
        """
        mask = tgt_mask[:, :, None] & ~extra["src_pad"][:, None, :]
        if self.lexicon_topk and self.first_order is None:
            mask = mask & direct.topk_mask(extra["log_align"].detach(), mask, self.lexicon_topk)
        return mask

    def alignment_potentials(self, extra: Dict, row_mask: Tensor) -> Dict[str, Tensor]:
        """The alignment arguments of :func:`hmm_nmt.hmm.direct.log_likelihood` for this model's order."""
        if self.first_order is None:
            log_align = extra["log_align"]
            if self.lexicon_topk and row_mask is not None:  # restricted sum: a lower bound of the likelihood
                log_align = log_align.masked_fill(~row_mask, direct.MASKED)
                if self.topk_objective == "pruned":  # the pruned model decoding uses: renormalised over them
                    log_align = log_align.log_softmax(-1)
            return {"log_align": log_align}
        return {"log_init": extra["log_init"][:, 0], "log_trans": extra["log_trans"]}

    def pruned_first_order_loss(self, x: Tensor, extra: Dict, target: Tensor, eps: float):
        """First order with ``--lexicon-topk K``: (smoothed ll, exact-lexicon ll, kept mass), each (B,).

        Two passes: the kept positions are chosen step by step without gradients, which needs only the
        log-normalisers of the kept rows (:func:`direct.first_order_topk_paths`); then all kept rows are
        scored in one lexicon call that reuses those normalisers, and the forward over the kept positions
        is differentiated. One batched call instead of one per target step: the per-call (V, d) work
        (weight conversion, gradient buffers, their accumulation) is paid once.
        """
        tgt_mask = target.ne(self.padding_idx)
        src_feat, tgt_feat = self.lexicon_features(x, extra["encoder_out"])
        weight, bias = self._output_weight_bias()
        logz = x.new_zeros(tgt_mask.shape + src_feat.shape[1:2],
                           dtype=accumulation_dtype(x.dtype))

        def gold(i, keep):
            b, j = keep.nonzero(as_tuple=True)
            hidden = torch.relu(src_feat[b, j] + tgt_feat[b, i])
            z = lexicon_logz(hidden, weight, bias, self.lexicon_chunk_size, self.lexicon_dtype)
            logz[b, i, j] = z.to(logz.dtype)
            return logz.new_zeros(keep.shape).index_put((b, j), gold_logits(hidden, weight, bias, target[b, i]) - z)

        log_init, log_trans = extra["log_init"][:, 0], extra["log_trans"]
        keep, ll_gold, mass = direct.first_order_topk_paths(log_init, log_trans, gold, tgt_mask, ~extra["src_pad"],
                                                            self.lexicon_topk)
        if self.topk_objective == "pruned":  # the pruned model's likelihood = the path sum - sum_i log m_i
            ll_gold = ll_gold - mass.clamp(min=1e-30).log().masked_fill(~tgt_mask, 0.0).sum(-1)
        b, i, j = keep.nonzero(as_tuple=True)
        hidden = torch.relu(src_feat[b, j] + tgt_feat[b, i])
        g, m = lexicon_scores(hidden, weight, bias, target[b, i], self.lexicon_chunk_size, self.lexicon_dtype,
                              logz=logz[b, i, j])
        scores = g if eps == 0 else (1.0 - eps) * g + eps * m
        lex = scores.new_zeros(keep.shape).index_put((b, i, j), scores)
        if self.topk_objective == "pruned":
            ll = direct.first_order_pruned_filter_log_likelihood(log_init, log_trans, lex, keep, tgt_mask)
        else:
            ll = direct.first_order_pruned_log_likelihood(log_init, log_trans, lex, keep, tgt_mask)
        return ll, ll_gold, mass.sum(-1)

    def prune_alignment(self, log_align: Tensor, src_pad: Tensor):
        """Decoding with ``--lexicon-topk K``: keep the K best positions, renormalised over them.

        Returns (log_align with MASKED outside the kept positions, kept indices (B, I, K)), or
        (log_align, None) without pruning or when K covers every source position.
        """
        if not self.lexicon_topk or self.lexicon_topk >= log_align.size(-1):
            return log_align, None
        idx = log_align.topk(self.lexicon_topk, dim=-1).indices
        kept = log_align.gather(-1, idx).log_softmax(-1)
        pruned = torch.full_like(log_align, direct.MASKED).scatter(-1, idx, kept)
        return pruned.masked_fill(src_pad[:, None, :], direct.MASKED), idx

    # ------------------------------------------------------------------ first-order filtering
    def _first_order_alignment(self, x, extra, prev_output_tokens, incremental_state):
        """Predicted alignment log p(b_i = j | e_<i, f) of the first-order model, by forward filtering.

        q_{i-1}(j') = p(b_{i-1} = j' | e_<i, f) is the normalised forward vector; the prediction for step i
        is sum_j' p(j | j') q_{i-1}(j'). In incremental decoding q and the previous step's lexicon
        normaliser are the decoder's state (reordered with the beam).
        """
        log_init, log_trans = extra["log_init"], extra["log_trans"]
        if incremental_state is None:
            bsz, tgt_len = prev_output_tokens.shape
            # e_{i-1} for step i is the input token at step i; score it under step i-1's lexicon
            tgt = prev_output_tokens[:, 1:]
            mask = torch.zeros(log_init.shape[0], tgt_len, log_init.shape[-1], dtype=torch.bool, device=x.device)
            mask[:, :-1] = ~extra["src_pad"][:, None, :]
            lex_prev, _ = self.lexicon_scores(x, extra, F.pad(tgt, (0, 1), value=self.padding_idx), mask)
            src_pad = extra["src_pad"]
            preds = [self.prune_alignment(log_init[:, :1], src_pad)[0][:, 0]]
            for i in range(1, tgt_len):
                filt = torch.log_softmax(preds[-1] + lex_prev[:, i - 1], dim=-1)
                pred = direct._masked_lse(filt[:, :, None] + log_trans[:, i], dim=1)
                preds.append(self.prune_alignment(pred[:, None], src_pad)[0][:, 0])
            log_align = torch.stack(preds, dim=1)
            extra["keep_idx"] = self.prune_alignment(log_align, src_pad)[1]
            return log_align
        state = self.first_order.get_incremental_state(incremental_state, "state")
        if state is None:
            pred = log_init[:, 0]
        else:
            weight, bias = self._output_weight_bias()
            src_feat = self.lexicon_source(extra["encoder_out"], incremental_state)
            hidden = torch.relu(src_feat + state["tgt_feat"][:, None, :])  # (B, J, d)
            last = prev_output_tokens[:, -1:].expand(-1, hidden.size(1))
            gold = gold_logits(hidden, weight, bias, last)
            filt = torch.log_softmax(state["pred"] + gold - state["logz"], dim=-1)
            pred = direct._masked_lse(filt[:, :, None] + log_trans[:, 0], dim=1)
        log_align, extra["keep_idx"] = self.prune_alignment(pred[:, None, :], extra["src_pad"])
        return log_align

    # ------------------------------------------------------------------ output
    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                full_context_alignment=False, alignment_layer=None, alignment_heads=None,
                src_lengths=None, return_all_hiddens=False):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if self.first_order is not None and not features_only:
            extra["log_align"] = self._first_order_alignment(x, extra, prev_output_tokens, incremental_state)
        elif not features_only:
            extra["log_align"], extra["keep_idx"] = self.prune_alignment(extra["log_align"], extra["src_pad"])
        if "log_align" in extra:
            extra["attn"] = [extra["log_align"].exp()]
        if features_only:
            return x, extra
        src_feat, tgt_feat = self.lexicon_features(x, extra["encoder_out"], incremental_state)
        weight, bias = self._output_weight_bias()
        # the lexicon normalisers are part of the first-order filtering state, not needed otherwise
        keep_state = self.first_order is not None and incremental_state is not None
        log_probs = log_mixture(src_feat, tgt_feat, extra["log_align"], weight, bias, self.lexicon_chunk_size,
                                self.lexicon_dtype, return_logz=keep_state, keep_idx=extra.get("keep_idx"))
        if keep_state:
            log_probs, logz = log_probs
            if extra.get("keep_idx") is not None:
                logz = logz.new_zeros(extra["log_align"].shape).scatter(-1, extra["keep_idx"], logz)
            self.first_order.set_incremental_state(incremental_state, "state", {
                "pred": extra["log_align"][:, -1], "logz": logz[:, -1], "tgt_feat": tgt_feat[:, -1]})
        return log_probs, extra

    def get_normalized_probs_scriptable(self, net_output, log_probs, sample=None):
        # net_output[0] already holds log p(e | e_<i, f); log_softmax is the identity on it but keeps
        # fairseq's temperature (which divides net_output[0]) meaningful
        out = upcast(net_output[0])
        return utils.log_softmax(out, dim=-1) if log_probs else utils.softmax(out, dim=-1)


@register_model("transformer_dhmm")
class TransformerDHMMModel(TransformerModel):
    """Transformer-based direct HMM; ``--alignment-order 0`` (Eq. 5) or ``1`` (Eq. 11)."""

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub interface plus word alignment: ``hub.align(src, tgt)`` and
        ``hub.translate(..., alignment=True)`` (:mod:`alignment.hub`)."""
        from alignment.hub import from_pretrained  # lazy: alignment imports this package

        return from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, archive_map=cls.hub_models(),
                               **kwargs)

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument("--alignment-order", type=int, choices=[0, 1], metavar="{0,1}",
                            help="0: p(j | e_<i, f) (zero order); 1: p(j | j', e_<i, f) (first order)")
        parser.add_argument("--lexicon-chunk-size", type=int, metavar="N",
                            help="(i, j) rows per lexicon chunk: bounds memory to N x vocabulary logits")
        parser.add_argument("--lexicon-dtype", choices=sorted(LEXICON_DTYPES), metavar="{fp32,bf16}",
                            help="precision of the lexicon matmul (accumulation and DP stay fp32)")
        parser.add_argument("--lexicon-topk", type=int, metavar="K",
                            help="score the lexicon only at the K most probable source positions per target "
                                 "position (0: exact). Training: see --lexicon-topk-objective; decoding "
                                 "renormalises the alignment over the K positions")
        parser.add_argument("--lexicon-topk-objective", choices=["bound", "pruned"],
                            help="training criterion with --lexicon-topk: the sum over the kept alignment "
                                 "positions, a lower bound of the exact likelihood (bound, default), or the exact "
                                 "likelihood of the pruned model that decoding uses, the alignment renormalised "
                                 "over the kept positions at every step (pruned)")
        parser.add_argument("--lexicon-topk-warmup", type=int, metavar="N",
                            help="train the exact likelihood for the first N updates, then with --lexicon-topk "
                                 "(validation and decoding always use K)")
        parser.add_argument("--lexicon-topk-schedule", metavar="K@U,...",
                            help="training K by update: K@U trains with K from update U on (U: a count, or a "
                                 "percentage of --max-update such as 80%%); e.g. 4@0,0@80%% prunes to 4 positions, "
                                 "then trains exactly for the last 20%% of the updates. Validation and decoding use "
                                 "--lexicon-topk (0: exact)")
        # an explicit default (fairseq's model options are otherwise left unset): saved args of checkpoints
        # from before this option lack it, and _dhmm_defaults gives those the layout they were trained with
        parser.add_argument("--dhmm-layers", choices=["all", "last"], default=DEFAULT_DHMM_LAYERS,
                            help="decoder layers whose cross-attention is the direct-HMM block of Eq. 6 (the "
                                 "weighted sum outside the ReLU, no residual): only the last one, which gives the "
                                 "alignment, the others keeping fairseq's cross-attention (last, default; "
                                 "docs/quality.md), or every layer as in the paper (all)")
        parser.add_argument("--lexicon-dropout", type=float, metavar="P",
                            help="dropout on the lexicon's inputs W5 h_j and W6 s_i in training (default 0)")
        parser.add_argument("--max-jump", type=int, metavar="M",
                            help="first order: jump widths |j - j'| are clipped at M for the jump bias")

    @classmethod
    def build_model(cls, args, task):
        dhmm_base_architecture(args)
        if args.alignment_order not in (0, 1):
            raise ValueError(f"--alignment-order must be 0 or 1, got {args.alignment_order}")
        if args.lexicon_topk < 0:
            raise ValueError(f"--lexicon-topk must be >= 0 (0 = exact), got {args.lexicon_topk}")
        if args.lexicon_topk_warmup < 0:
            raise ValueError(f"--lexicon-topk-warmup must be >= 0 updates, got {args.lexicon_topk_warmup}")
        if args.lexicon_topk_schedule and args.lexicon_topk_warmup:
            raise ValueError("--lexicon-topk-warmup N is the schedule 0@0,K@N: give one of the two, not both")
        parse_topk_schedule(args.lexicon_topk_schedule, getattr(args, "max_update", 0))  # fail before training
        if not 0.0 <= args.lexicon_dropout < 1.0:
            raise ValueError(f"--lexicon-dropout must be in [0, 1), got {args.lexicon_dropout}")
        if args.lexicon_chunk_size < 1:
            raise ValueError(f"--lexicon-chunk-size must be positive, got {args.lexicon_chunk_size}")
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return DHMMEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return TransformerDHMMDecoder(args, tgt_dict, embed_tokens,
                                      no_encoder_attn=getattr(args, "no_cross_attention", False))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens=True,
                features_only=False, alignment_layer=None, alignment_heads=None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only)

    @torch.no_grad()
    def alignment_posteriors(self, src_tokens, src_lengths, prev_output_tokens, target, method="autograd",
                             features=None):
        """p(b_i = j | E, F) (B, I, J) for reference pairs, lexicon included ("posterior alignment").

        ``method="autograd"`` differentiates log p(E | F) w.r.t. the lexicon scores, ``"explicit"`` runs the
        forward-backward recursions; both give the same posteriors (tested). ``features``: the decoder's
        ``(x, extra)`` with ``features_only=True`` for these inputs, when the caller already has them.
        """
        if features is None:
            features = self(src_tokens, src_lengths, prev_output_tokens, features_only=True)
        x, extra = features
        tgt_mask = target.ne(self.decoder.padding_idx)
        row_mask = self.decoder.lexicon_rows(extra, tgt_mask)
        gold, _ = self.decoder.lexicon_scores(x, extra, target, row_mask)
        align = self.decoder.alignment_potentials(extra, row_mask)
        if method == "autograd":
            return direct.posteriors(gold, tgt_mask, **align)
        if method == "explicit":
            return direct.forward_backward(gold, tgt_mask, **align)
        raise ValueError(f"unknown posterior method {method!r} (autograd or explicit)")


# docs/quality.md: the paper's form (all) under-fits at equal updates; it stays selectable
DEFAULT_DHMM_LAYERS = "last"


def _dhmm_defaults(args):
    args.alignment_order = getattr(args, "alignment_order", None)
    if args.alignment_order is None:
        args.alignment_order = 0
    args.lexicon_chunk_size = getattr(args, "lexicon_chunk_size", None) or 1024
    args.lexicon_dtype = getattr(args, "lexicon_dtype", None) or "fp32"
    args.max_jump = getattr(args, "max_jump", None) or 16
    args.lexicon_topk = getattr(args, "lexicon_topk", None) or 0
    args.lexicon_topk_warmup = getattr(args, "lexicon_topk_warmup", None) or 0
    args.lexicon_topk_schedule = getattr(args, "lexicon_topk_schedule", None) or ""
    args.lexicon_topk_objective = getattr(args, "lexicon_topk_objective", None) or "bound"
    if not hasattr(args, "dhmm_layers"):
        # a checkpoint trained before --dhmm-layers existed: Eq. 6 was in every layer
        args.dhmm_layers = "all"
    elif args.dhmm_layers is None:
        args.dhmm_layers = DEFAULT_DHMM_LAYERS
    args.lexicon_dropout = getattr(args, "lexicon_dropout", None) or 0.0


def dhmm_base_architecture(args):
    _dhmm_defaults(args)
    base_architecture(args)


@register_model_architecture("transformer_dhmm", "transformer_dhmm")
def transformer_dhmm(args):
    dhmm_base_architecture(args)


@register_model_architecture("transformer_dhmm", "transformer_dhmm_iwslt_de_en")
def transformer_dhmm_iwslt_de_en(args):
    _dhmm_defaults(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("transformer_dhmm", "transformer_dhmm_first_order")
def transformer_dhmm_first_order(args):
    if getattr(args, "alignment_order", None) is None:
        args.alignment_order = 1
    dhmm_base_architecture(args)
