"""Encoder and decoder of the transformer-based direct HMM (see :mod:`hmm_nmt.models.transformer_dhmm`).

The decoder computes the alignment distributions (zero order: the mixture of the last layer's heads, Eq. 8;
first order: :class:`~hmm_nmt.models.first_order_alignment.FirstOrderAlignment`, filtered over the target
prefix), the chunked lexicon scores, and the output mixture p(e | e_<i, f) that fairseq's search reads. The
first order's passes along the target (its top-K training pass, its decoding filter) are
:mod:`hmm_nmt.models.dhmm_first_order`'s.
"""
import math
from typing import Dict, List

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder
from torch import Tensor

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.class_lexicon import (
    ClassLayout,
    class_lexicon_scores,
    class_log_mixture,
    default_num_classes,
    frequency_classes,
)
from hmm_nmt.hmm.lexicon import lexicon_scores, log_mixture
from hmm_nmt.hmm.precision import lexicon_dtype, upcast
from hmm_nmt.hmm.separable_lexicon import separable_log_mixture, separable_scores, source_terms
from hmm_nmt.models.dhmm_first_order import FirstOrderPasses
from hmm_nmt.models.dhmm_layers import DHMMDecoderLayer, Linear, _CachedSourceMixin
from hmm_nmt.models.first_order_alignment import FirstOrderAlignment
from hmm_nmt.models.topk_schedule import advance, parse_topk_schedule, topk_at

TARGET_CONTEXTS = ("past", "both")
NO_DECODING = ("--target-context both sees the target words after i: the model scores and aligns given sentence "
               "pairs, it cannot decode (train with --target-context past to translate)")


class DHMMEncoder(TransformerEncoder):
    """fairseq's encoder, unchanged (a class of its own so that the direct HMM can change it).

    An empty source line is a source of EOS alone: J = 1 position, which every alignment distribution puts
    all its mass on (zero order: the heads' softmax over one key; first order: the one-state chain), so the
    lexicon of EOS's encoder state alone translates it, as the plain transformer's cross-attention does.
    """


class TransformerDHMMDecoder(FirstOrderPasses, _CachedSourceMixin, TransformerDecoder):
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
        self.lexicon_dtype_name = args.lexicon_dtype
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
        self.lexicon_kind = getattr(args, "lexicon", None) or "softmax"
        if self.lexicon_kind == "class":
            # the class map is a buffer: saved with the model and loaded over this one, never recomputed from
            # the dictionary of a later run (a changed dictionary must not silently change the classes)
            counts = [float(c) for c in dictionary.count]
            counts[dictionary.eos()] = max(counts)  # the dictionary does not count EOS, which ends every sentence
            wanted = getattr(args, "lexicon_classes", None) or default_num_classes(len(dictionary))
            self.register_buffer("lexicon_class_of", frequency_classes(counts, wanted))
            self.lex_class_proj = Linear(d_out, int(self.lexicon_class_of.max()) + 1)  # C x d (+ bias)
            self._class_layout = None
        self.dhmm_layers = args.dhmm_layers
        if self.dhmm_layers == "last":
            # fairseq's own cross-attention (with its residual) below the last layer; only the last layer's
            # Eq. 6 block gives the alignment distribution, so only it needs the moved ReLU
            for idx in range(len(self.layers) - 1):
                self.layers[idx] = TransformerDecoder.build_decoder_layer(self, args, no_encoder_attn)
        self.target_context = getattr(args, "target_context", None) or "past"
        if self.target_context == "both":  # the right-to-left twin of the lower layers (own parameters)
            self.future_layers = torch.nn.ModuleList(
                [TransformerDecoder.build_decoder_layer(self, args, no_encoder_attn) for _ in self.layers[:-1]])

    @property
    def lexicon_dtype(self) -> torch.dtype:
        """``--lexicon-dtype`` resolved on the device the decoder is on now (``auto`` depends on it)."""
        return lexicon_dtype(self.lexicon_dtype_name, self.lex_tgt_proj.weight.device)

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

    def advance_topk_schedule(self, num_updates) -> bool:
        """On a validation plateau: start the next step of ``--lexicon-topk-schedule`` after ``num_updates``
        (``topk_schedule.advance``). False when there is none, and patience may stop training."""
        moved = advance(self.topk_schedule, num_updates) if self.topk_schedule else None
        if moved is None:
            return False
        self.topk_schedule = moved
        return True

    def build_decoder_layer(self, args, no_encoder_attn=False):
        return DHMMDecoderLayer(TransformerConfig.from_namespace(args), no_encoder_attn=no_encoder_attn)

    # ------------------------------------------------------------------ features and alignment
    def _embed(self, tokens: Tensor, positions) -> Tensor:
        """Token (+ position) embeddings, time-major (T, B, C), as fairseq's decoder computes them."""
        x = self.embed_scale * self.embed_tokens(tokens.contiguous())
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x = x + positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        return self.dropout_module(x).transpose(0, 1)

    def future_states(self, prev_output_tokens: Tensor, enc: Tensor, src_pad: Tensor) -> Tensor:
        """``--target-context both``: for each position i the state of the words after it (T, B, C), zero at
        padding. The lower layers' twin reads the target right to left: position i of a target e_1 .. e_I EOS
        (n = I + 1 tokens, right-padded; ``prev_output_tokens`` is EOS e_1 .. e_I) is reversed position
        n - 1 - i of BOS EOS e_I .. e_2, whose causal prefix holds exactly the tokens after i."""
        pad = self.padding_idx
        bsz, steps = prev_output_tokens.shape
        n = prev_output_tokens.ne(pad).sum(1, keepdim=True)  # (B, 1)
        k = torch.arange(steps, device=prev_output_tokens.device)[None, :]
        tokens = prev_output_tokens.gather(1, (n - k + 1).clamp(0, steps - 1))
        tokens[:, 0] = self.dictionary.bos()
        if steps > 1:
            tokens[:, 1] = self.dictionary.eos()
        tokens = tokens.masked_fill(k >= n, pad)
        positions = self.embed_positions(tokens) if self.embed_positions is not None else None
        y = self._embed(tokens, positions)
        pad_mask = tokens.eq(pad) if tokens.eq(pad).any() else None
        for layer in self.future_layers:
            y, _, _ = layer(y, enc, src_pad, None, self_attn_mask=self.buffered_future_mask(y),
                            self_attn_padding_mask=pad_mask)
        back = (n - 1 - k).clamp(min=0)  # reversed position of position i
        y = y.transpose(0, 1).gather(1, back[..., None].expand(bsz, steps, y.size(-1)))
        return y.masked_fill((k >= n)[..., None], 0.0).transpose(0, 1)

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **unused):
        bsz, _ = prev_output_tokens.size()
        enc = encoder_out["encoder_out"][0]  # (J, B, C)
        src_pad = (encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) > 0
                   else enc.new_zeros(bsz, enc.size(0), dtype=torch.bool))
        both = self.target_context == "both"
        if both and incremental_state is not None:
            raise ValueError(NO_DECODING)

        positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state) \
            if self.embed_positions is not None else None
        tokens = prev_output_tokens
        if incremental_state is not None:
            tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:] if positions is not None else None
        x = self._embed(tokens, positions)

        self_attn_padding_mask = tokens.eq(self.padding_idx) if tokens.eq(self.padding_idx).any() else None
        inner_states: List[Tensor] = [x]
        log_alpha = None
        for idx, layer in enumerate(self.layers):
            self_attn_mask = self.buffered_future_mask(x) if incremental_state is None else None
            padding_mask = self_attn_padding_mask
            if both and idx == len(self.layers) - 1:
                # the last layer's input sees e_<i and e_>i; its self-attention may not mix positions (position
                # k < i would carry e_i in), so each attends itself only (and padding needs no mask then)
                x = x + self.future_states(prev_output_tokens, enc, src_pad)
                inner_states[-1] = x
                self_attn_mask = torch.full((x.size(0), x.size(0)), float("-inf"), dtype=x.dtype,
                                            device=x.device).fill_diagonal_(0.0)
                padding_mask = None
            if isinstance(layer, DHMMDecoderLayer):
                x, log_alpha = layer(x, enc, src_pad, incremental_state, self_attn_mask=self_attn_mask,
                                     self_attn_padding_mask=padding_mask)
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

    def separable_source(self, src_feat: Tensor, incremental_state):
        """``--lexicon separable`` decoding: ((a, exp(a - m), m) of each distinct source row, owner (B,)).

        The beams of a sentence are copies of one source: the B x J x V source terms are kept once per
        run of equal rows (found by exact equality; fairseq puts a sentence's beams side by side) and every
        hypothesis points at its row, so each step reads them once per sentence, not once per beam, and
        ``owner`` stays sorted (no reordering in the matmuls). Reordering moves only ``owner``.
        """
        saved = self.get_incremental_state(incremental_state, "separable")
        if saved is None:
            uniq, owner = torch.unique_consecutive(src_feat.reshape(src_feat.size(0), -1), dim=0, return_inverse=True)
            a, ea, ma = source_terms(uniq.view(-1, *src_feat.shape[1:]), *self.output_weight_bias())
            saved = {"a": a, "ea": ea, "ma": ma, "owner": owner}
            self.set_incremental_state(incremental_state, "separable", saved)
        return (saved["a"], saved["ea"], saved["ma"]), saved["owner"]

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
        saved = self.get_incremental_state(incremental_state, "separable")
        if saved is not None:
            owner = saved["owner"].index_select(0, new_order)
            if owner.size(0) != saved["owner"].size(0):  # finished sentences left: drop their source rows
                used, owner = torch.unique(owner, return_inverse=True)
                saved = {k: saved[k].index_select(0, used) for k in ("a", "ea", "ma")}
            self.set_incremental_state(incremental_state, "separable", dict(saved, owner=owner))
        return self._reorder_cache(incremental_state, new_order, "src", source_only=True)

    def output_weight_bias(self):
        """(weight, bias) of the lexicon's output layer, the V x d matrix shared with the embeddings when tied."""
        proj = self.output_projection
        return proj.weight, proj.bias

    def class_layout(self) -> ClassLayout:
        """``--lexicon class``: the member table of the class-map buffer (rebuilt when the buffer changes)."""
        class_of = self.lexicon_class_of
        key = (class_of.data_ptr(), class_of._version, class_of.device)
        if self._class_layout is None or self._class_layout[0] != key:
            self._class_layout = (key, ClassLayout(class_of))
        return self._class_layout[1]

    def class_group_scores(self, src_feat: Tensor, tgt_feat: Tensor, b: Tensor, i: Tensor, words: Tensor):
        """``--lexicon class``: (log p(words_g | j), smoothing mean) (G, J) of the groups (b_g, i_g), every j."""
        hidden = torch.relu(src_feat[b] + tgt_feat[b, i][:, None, :])  # (G, J, d)
        weight, bias = self.output_weight_bias()
        return class_lexicon_scores(hidden, words, self.lex_class_proj.weight, self.lex_class_proj.bias, weight,
                                    bias, self.class_layout(), self.lexicon_chunk_size)

    def lexicon_scores(self, x: Tensor, extra: Dict, target: Tensor, row_mask: Tensor, features=None):
        """(log p(e_i | j), mean_v log p(v | j)) as (B, I, J) tensors for the rows where ``row_mask``.

        Rows outside ``row_mask`` (target or source padding, pruned positions) get 0; the DP never uses
        them because their alignment log-probability is -inf or their target position is masked.
        ``features``: (src_feat, tgt_feat) of :meth:`lexicon_features` when the caller already has them.
        ``--lexicon class``: every j of a target position with a row is scored (the class's word rows are
        gathered once per target position), and the mean is the class-level smoothing mean of
        :func:`~hmm_nmt.hmm.class_lexicon.class_lexicon_scores`. ``--lexicon separable``: every (i, j) is
        scored (:func:`~hmm_nmt.hmm.separable_lexicon.separable_scores`), the mean over V exact.
        """
        src_feat, tgt_feat = features if features is not None else self.lexicon_features(x, extra["encoder_out"])
        if self.lexicon_kind == "separable":  # every (i, j) costs one matmul entry: score all, keep the rows
            gold, mean = separable_scores(src_feat, tgt_feat, *self.output_weight_bias(), target)
            return gold.masked_fill(~row_mask, 0.0), mean.masked_fill(~row_mask, 0.0)
        if self.lexicon_kind == "class":
            b, i = row_mask.any(-1).nonzero(as_tuple=True)
            gold, mean = self.class_group_scores(src_feat, tgt_feat, b, i, target[b, i])
            shape = row_mask.shape
            out_gold = gold.new_zeros(shape).index_put((b, i), gold).masked_fill(~row_mask, 0.0)
            out_mean = mean.new_zeros(shape).index_put((b, i), mean).masked_fill(~row_mask, 0.0)
            return out_gold, out_mean
        b, i, j = row_mask.nonzero(as_tuple=True)
        hidden = torch.relu(src_feat[b, j] + tgt_feat[b, i])
        weight, bias = self.output_weight_bias()
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

    # ------------------------------------------------------------------ output
    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                full_context_alignment=False, alignment_layer=None, alignment_heads=None,
                src_lengths=None, return_all_hiddens=False):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if self.first_order is not None and not features_only:
            extra["log_align"] = self.first_order_alignment(x, extra, prev_output_tokens, incremental_state)
        elif not features_only:
            extra["log_align"], extra["keep_idx"] = self.prune_alignment(extra["log_align"], extra["src_pad"])
        if "log_align" in extra:
            extra["attn"] = [extra["log_align"].exp()]
        if features_only:
            return x, extra
        src_feat, tgt_feat = self.lexicon_features(x, extra["encoder_out"], incremental_state)
        weight, bias = self.output_weight_bias()
        keep_state = self.first_order is not None and incremental_state is not None
        if self.lexicon_kind == "separable":
            source, owner = self.separable_source(src_feat, incremental_state) if incremental_state is not None \
                else (None, None)
            log_probs, logz = separable_log_mixture(src_feat, tgt_feat, extra["log_align"], weight, bias,
                                                    keep_idx=extra.get("keep_idx"), chunk_rows=self.lexicon_chunk_size,
                                                    source=source, return_logz=True, owner=owner)
            if keep_state:
                self.first_order.set_incremental_state(incremental_state, "state", {
                    "pred": extra["log_align"][:, -1], "logz": logz[:, -1], "tgt_feat": tgt_feat[:, -1]})
            return log_probs, self._with_probe(log_probs, extra)
        if self.lexicon_kind == "class":
            log_probs = class_log_mixture(src_feat, tgt_feat, extra["log_align"], self.lex_class_proj.weight,
                                          self.lex_class_proj.bias, weight, bias, self.class_layout(),
                                          self.lexicon_chunk_size, keep_idx=extra.get("keep_idx"))
            if self.first_order is not None and incremental_state is not None:
                # the class lexicon scores the next step's input word per row: no normalisers to keep
                self.first_order.set_incremental_state(incremental_state, "state", {
                    "pred": extra["log_align"][:, -1], "tgt_feat": tgt_feat[:, -1]})
            return log_probs, self._with_probe(log_probs, extra)
        # the lexicon normalisers are part of the first-order filtering state, not needed otherwise
        log_probs = log_mixture(src_feat, tgt_feat, extra["log_align"], weight, bias, self.lexicon_chunk_size,
                                self.lexicon_dtype, return_logz=keep_state, keep_idx=extra.get("keep_idx"))
        if keep_state:
            log_probs, logz = log_probs
            if extra.get("keep_idx") is not None:
                logz = logz.new_zeros(extra["log_align"].shape).scatter(-1, extra["keep_idx"], logz)
            self.first_order.set_incremental_state(incremental_state, "state", {
                "pred": extra["log_align"][:, -1], "logz": logz[:, -1], "tgt_feat": tgt_feat[:, -1]})
        return log_probs, self._with_probe(log_probs, extra)

    def _with_probe(self, log_probs, extra):
        # a copy of log p(EOS) at every position: fairseq's beam search divides net_output[0] in place by its
        # temperature before get_normalized_probs, so an unchanged copy shows the division was by 1
        extra["eos_log_prob"] = upcast(log_probs.detach()[..., self.dictionary.eos()]).clone()
        return extra

    def get_normalized_probs_scriptable(self, net_output, log_probs, sample=None):
        # net_output[0] already holds log p(e | e_<i, f): normalising it again is needed only when fairseq's
        # temperature has divided it. x / T == x for finite nonzero x only when T is 1 (to rounding), so an
        # unchanged EOS column with no zero or infinite entry skips the (rows, V) log-softmax of every step
        out = upcast(net_output[0])
        extra = net_output[1] if len(net_output) > 1 else None
        probe = extra.get("eos_log_prob") if isinstance(extra, dict) else None
        if probe is not None and probe.shape == out.shape[:-1] and probe.dtype == out.dtype:
            now = out.detach()[..., self.dictionary.eos()]
            if bool(torch.isfinite(probe).all()) and bool((probe != 0).all()) and torch.equal(now, probe):
                return out.float() if log_probs else out.float().exp()  # float32 as utils.log_softmax gives
        return utils.log_softmax(out, dim=-1) if log_probs else utils.softmax(out, dim=-1)
