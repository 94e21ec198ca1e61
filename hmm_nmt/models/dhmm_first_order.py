"""The first-order direct HMM's passes along the target (see :mod:`hmm_nmt.models.transformer_dhmm`).

The first-order alignment p(b_i = j | b_{i-1} = j') makes two computations of the decoder sequential in i: the
top-K pruned training objective, whose kept positions at step i depend on the forward vector of step i - 1
(:meth:`FirstOrderPasses.pruned_first_order_loss`), and the predicted alignment p(b_i = j | e_<i, f) that decoding
mixes the lexicon with, a forward filter over the target prefix (:meth:`FirstOrderPasses.first_order_alignment`).
A mixin of :class:`~hmm_nmt.models.dhmm_decoder.TransformerDHMMDecoder`: both read its lexicon.
"""
from typing import Dict

import torch
import torch.nn.functional as F
from torch import Tensor

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.lexicon import gold_logits, lexicon_logz, lexicon_scores
from hmm_nmt.hmm.precision import accumulation_dtype
from hmm_nmt.hmm.semiring import LOG_SAFE
from hmm_nmt.hmm.separable_lexicon import separable_scores


class FirstOrderPasses:
    """The first-order decoder's training pass under ``--lexicon-topk`` and its decoding filter."""

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
        weight, bias = self.output_weight_bias()
        logz = x.new_zeros(tgt_mask.shape + src_feat.shape[1:2],
                           dtype=accumulation_dtype(x.dtype))

        separable = {}

        def gold(i, keep):
            if self.lexicon_kind == "separable":  # all steps' scores at once, without gradients
                if not separable:
                    with torch.no_grad():
                        separable["gold"] = separable_scores(src_feat, tgt_feat, weight, bias, target)[0]
                return separable["gold"][:, i].to(logz.dtype).masked_fill(~keep, 0.0)
            if self.lexicon_kind == "class":  # normalised per row: no log-normalisers to keep
                with torch.no_grad():
                    b = keep.any(-1).nonzero().squeeze(1)
                    g, _ = self.class_group_scores(src_feat, tgt_feat, b, torch.full_like(b, i), target[b, i])
                return logz.new_zeros(keep.shape).index_put((b,), g.to(logz.dtype)).masked_fill(~keep, 0.0)
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
        if self.lexicon_kind != "softmax":
            g, m = self.lexicon_scores(x, extra, target, keep, features=(src_feat, tgt_feat))
            lex = g if eps == 0 else ((1.0 - eps) * g + eps * m).masked_fill(~keep, 0.0)
        else:
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

    def first_order_alignment(self, x, extra, prev_output_tokens, incremental_state=None):
        """Predicted alignment log p(b_i = j | e_<i, f) of the first-order model, by forward filtering.

        q_{i-1}(j') = p(b_{i-1} = j' | e_<i, f) is the normalised forward vector; the prediction for step i
        is sum_j' p(j | j') q_{i-1}(j'). In incremental decoding q and the previous step's lexicon
        normaliser are the decoder's state (reordered with the beam). The step is the chain module's filter
        step (:mod:`hmm_nmt.hmm.semiring`'s vector-matrix product), with ``--lexicon-topk`` pruning between steps.
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
                pred = LOG_SAFE.matvec(filt, log_trans[:, i])
                preds.append(self.prune_alignment(pred[:, None], src_pad)[0][:, 0])
            log_align = torch.stack(preds, dim=1)
            extra["keep_idx"] = self.prune_alignment(log_align, src_pad)[1]
            return log_align
        state = self.first_order.get_incremental_state(incremental_state, "state")
        if state is None:
            pred = log_init[:, 0]
        elif self.lexicon_kind == "separable":
            # linear lexicon: the gold logit of the last input word is W_e (src_j + tgt_{i-1}) + b_e
            src_feat = self.lexicon_source(extra["encoder_out"], incremental_state)
            last = prev_output_tokens[:, -1:].expand(-1, src_feat.size(1))
            gold = gold_logits(src_feat + state["tgt_feat"][:, None, :], *self.output_weight_bias(), last)
            filt = torch.log_softmax(state["pred"] + gold - state["logz"], dim=-1)
            pred = LOG_SAFE.matvec(filt, log_trans[:, 0])
        elif self.lexicon_kind == "class":
            src_feat = self.lexicon_source(extra["encoder_out"], incremental_state)
            rows = torch.arange(src_feat.size(0), device=src_feat.device)
            gold, _ = self.class_group_scores(src_feat, state["tgt_feat"][:, None, :], rows, torch.zeros_like(rows),
                                              prev_output_tokens[:, -1])
            filt = torch.log_softmax(state["pred"] + gold, dim=-1)
            pred = LOG_SAFE.matvec(filt, log_trans[:, 0])
        else:
            weight, bias = self.output_weight_bias()
            src_feat = self.lexicon_source(extra["encoder_out"], incremental_state)
            hidden = torch.relu(src_feat + state["tgt_feat"][:, None, :])  # (B, J, d)
            last = prev_output_tokens[:, -1:].expand(-1, hidden.size(1))
            gold = gold_logits(hidden, weight, bias, last)
            filt = torch.log_softmax(state["pred"] + gold - state["logz"], dim=-1)
            pred = LOG_SAFE.matvec(filt, log_trans[:, 0])
        log_align, extra["keep_idx"] = self.prune_alignment(pred[:, None, :], extra["src_pad"])
        return log_align
