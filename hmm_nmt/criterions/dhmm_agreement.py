"""Alignment by agreement (Liang, Taskar & Klein 2006) for the direct HMM: both directions trained jointly.

Liang et al. train a source->target and a target->source alignment model together with the objective

    log p(F | E; θ1) + log p(E | F; θ2) + log Σ_a p(a | E, F; θ1) p(a | E, F; θ2),

rewarding the two directions for putting their alignment posteriors on the same links; they approximate the
last term inside EM by the product of the two models' link posteriors. Here both posteriors are exact and
differentiable (forward-backward over the direct HMM, :func:`hmm_nmt.hmm.direct.forward_backward`, which
autograd differentiates), so the agreement is a term of the loss:

    loss = dhmm(fwd; F -> E) + dhmm(rev; E -> F) + λ · agreement(P_f, P_r)

``--criterion dhmm_agreement`` with ``--arch transformer_dhmm_agreement`` / ``transformer_dhmm_first_order_agreement``
(:mod:`hmm_nmt.models.dhmm_agreement`, which holds ``model.fwd`` and ``model.rev``). Each dhmm term is exactly
the loss of ``dhmm_label_smoothed_cross_entropy`` (label smoothing inside the sum over alignments, summed over
the target tokens of its direction): the forward one on the batch, the reverse one on the reversed batch
(:func:`reverse_sample`: the target sentences as left-padded sources, the source sentences as right-padded
targets, collated as fairseq's ``LanguagePairDataset`` does for the swapped pair, in the batch's order).

The agreement term (``--agreement-weight λ``, default 1). P_f (B, I, J) = p(b_i = j | E, F) of the forward
model, P_r (B, J, I) = p(b_j = i | F, E) of the reverse one, both from the unsmoothed lexicon and from the same
encoder/decoder run as the likelihood (one run per direction per step). Only the real-word block counts: the
EOS rows and columns (where words without a counterpart align, Liang et al.'s NULL, which their agreement
excludes too) and the padding are masked out.

* ``--agreement sos`` (default): Σ_b Σ_{i,j} (P_f[i, j] - P_r[j, i])², summed over the batch. Per target word i
  the row term Σ_j (P_f[i, j] - P_r[j, i])² lies in [0, 2]: the whole is a sum over target tokens of bounded
  per-token values, on the same scale as the token-summed NLLs (fairseq divides all three by ``sample_size``,
  the forward target tokens), so λ = 1 weighs one unit of disagreement per word like one nat of likelihood.
* ``--agreement mul``: the negative log-probability that a link is confirmed by the other direction,
  -Σ_i log(Σ_j P_f[i, j] P_r[j, i] + δ) - Σ_j log(Σ_i P_r[j, i] P_f[i, j] + δ), δ = 1e-6 (smooth at 0). For a
  forward word i, Σ_j P_f[i, j] P_r[j, i] is the probability that the reverse model, drawing its own link for
  the source word j that i links to, links it back to i: Liang et al.'s product of posteriors, per link and in
  both directions (the symmetric form of their approximation), summed over words like the NLLs.

Both are 0-gradient when λ = 0 (the posteriors are then computed without gradient, for logging only: the
update is exactly that of the two directions' dhmm criteria). ``--lexicon-topk`` is refused (the agreement
needs the exact posteriors) and so is ``--dhmm-smoothing mixture``.

Logged: ``loss``, ``nll_loss`` (forward direction, per forward target token), ``rev_nll_loss`` (per reverse
target token, i.e. source token), ``agreement`` (per forward target token), ``ntokens``, ``sample_size``.
"""
import math
from dataclasses import dataclass, field

import torch
from fairseq.criterions import register_criterion
from fairseq.data.data_utils import collate_tokens
from fairseq.logging import metrics

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import (
    DHMMLabelSmoothedCrossEntropyConfig,
    DHMMLabelSmoothedCrossEntropyCriterion,
)
from hmm_nmt.hmm import direct

AGREEMENTS = ("sos", "mul")
MUL_DELTA = 1e-6


@dataclass
class DHMMAgreementConfig(DHMMLabelSmoothedCrossEntropyConfig):
    agreement_weight: float = field(
        default=1.0, metadata={"help": "λ: weight of the agreement term between the two directions' posteriors"})
    agreement: str = field(
        default="sos", metadata={"help": "agreement term: sum of squared differences of the posteriors (sos) or "
                                         "-log of the product of posteriors per link, both directions (mul)"})


def reverse_sample(sample, pad: int, eos: int):
    """The batch of the swapped pair (target sentences as sources), in the batch's order.

    As fairseq's ``LanguagePairDataset`` collates (default padding): left-padded source, right-padded
    target, ``prev_output_tokens`` = EOS + target[:-1]. The sentences keep their EOS (binarized data has it).
    """
    net = sample["net_input"]
    src_rows = [row[row.ne(pad)] for row in net["src_tokens"]]
    tgt_rows = [row[row.ne(pad)] for row in sample["target"]]
    src_tokens = collate_tokens(tgt_rows, pad, eos, left_pad=True)
    target = collate_tokens(src_rows, pad, eos, left_pad=False)
    prev = collate_tokens(src_rows, pad, eos, left_pad=False, move_eos_to_beginning=True)
    lengths = torch.tensor([r.numel() for r in tgt_rows], dtype=torch.long, device=src_tokens.device)
    return {"id": sample.get("id"), "nsentences": len(src_rows), "ntokens": sum(r.numel() for r in src_rows),
            "net_input": {"src_tokens": src_tokens, "src_lengths": lengths, "prev_output_tokens": prev},
            "target": target}


def loss_and_posteriors(decoder, net_output, target, eps: float, grad_posteriors: bool = True):
    """(smoothed loss, exact nll, posteriors (B, I, J)) of one direction from one decoder run.

    The loss is computed exactly as :func:`hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy.dhmm_loss`
    (lexicon smoothing, no pruning); the posteriors p(b_i = j | E, F) are the explicit forward-backward over
    the same (unsmoothed) lexicon scores and alignment potentials, differentiable when ``grad_posteriors``.
    """
    if decoder.lexicon_topk:
        raise ValueError("dhmm_agreement needs the exact posteriors: --lexicon-topk is not supported")
    x, extra = net_output
    tgt_mask = target.ne(decoder.padding_idx)
    row_mask = decoder.lexicon_rows(extra, tgt_mask)
    gold, mean = decoder.lexicon_scores(x, extra, target, row_mask)
    align = decoder.alignment_potentials(extra, row_mask)
    if eps > 0:
        loss = -direct.log_likelihood((1.0 - eps) * gold + eps * mean, tgt_mask, **align).sum()
        with torch.no_grad():
            nll = -direct.log_likelihood(gold, tgt_mask, **align).sum()
    else:
        loss = -direct.log_likelihood(gold, tgt_mask, **align).sum()
        nll = loss.detach()
    with torch.set_grad_enabled(grad_posteriors and torch.is_grad_enabled()):
        post = direct.forward_backward(gold, tgt_mask, **align)
    return loss, nll, post


def _words_first(post, rows, cols, pad: int, eos: int, n_rows: int, n_cols: int):
    """``post`` (B, R, C) over padded token rows/columns -> (B, n_rows, n_cols) with each sentence's tokens
    first in order (any padding side), and the mask of its real words (neither EOS nor padding)."""
    r_idx = torch.sort(rows.eq(pad).int(), dim=1, stable=True).indices[:, :n_rows]
    c_idx = torch.sort(cols.eq(pad).int(), dim=1, stable=True).indices[:, :n_cols]
    post = post.gather(1, r_idx[:, :, None].expand(-1, -1, post.size(2)))
    post = post.gather(2, c_idx[:, None, :].expand(-1, post.size(1), -1))
    r_real = rows.gather(1, r_idx)
    c_real = cols.gather(1, c_idx)
    r_real = r_real.ne(pad) & r_real.ne(eos)
    c_real = c_real.ne(pad) & c_real.ne(eos)
    return post, r_real[:, :, None] & c_real[:, None, :]


def agreement_term(post_f, post_r, src_tokens, target, pad: int, eos: int, kind: str = "sos"):
    """The agreement term (scalar, summed over the batch) of the module docstring.

    post_f (B, I, S): forward posteriors over ``target`` rows (B, I) and ``src_tokens`` columns (B, S);
    post_r (B, J, T): reverse posteriors over rows = the source sentences (as the reverse target, right-padded)
    and columns = the target sentences (as the reverse source, left-padded). Only each sentence's token order
    matters, not the padding side.
    """
    if kind not in AGREEMENTS:
        raise ValueError(f"--agreement must be one of {', '.join(AGREEMENTS)}, got {kind!r}")
    n_i = int(target.ne(pad).sum(1).max())
    n_j = int(src_tokens.ne(pad).sum(1).max())
    pf, mask = _words_first(post_f, target, src_tokens, pad, eos, n_i, n_j)
    # the reverse rows are the source sentences right-padded, its columns the target sentences left-padded
    rev_rows = collate_tokens([r[r.ne(pad)] for r in src_tokens], pad, eos, left_pad=False)
    rev_cols = collate_tokens([r[r.ne(pad)] for r in target], pad, eos, left_pad=True)
    if tuple(post_r.shape[1:]) != (rev_rows.size(1), rev_cols.size(1)):
        raise ValueError(f"reverse posteriors {tuple(post_r.shape)} do not match the batch's source lengths")
    pr, mask_r = _words_first(post_r, rev_rows, rev_cols, pad, eos, n_j, n_i)
    pr = pr.transpose(1, 2)
    mask = mask & mask_r.transpose(1, 2)
    if kind == "sos":
        return ((pf - pr) ** 2 * mask).sum()
    both = pf * pr * mask
    rows = mask.any(2)
    cols = mask.any(1)
    per_i = torch.log(both.sum(2) + MUL_DELTA) * rows
    per_j = torch.log(both.sum(1) + MUL_DELTA) * cols
    return -(per_i.sum() + per_j.sum())


@register_criterion("dhmm_agreement", dataclass=DHMMAgreementConfig)
class DHMMAgreementCriterion(DHMMLabelSmoothedCrossEntropyCriterion):
    """``--criterion dhmm_agreement [--agreement-weight λ] [--agreement sos|mul] --label-smoothing EPS``."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 dhmm_smoothing="lexicon", agreement_weight=1.0, agreement="sos"):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy, dhmm_smoothing)
        if dhmm_smoothing != "lexicon":
            raise ValueError("dhmm_agreement supports --dhmm-smoothing lexicon only")
        if agreement not in AGREEMENTS:
            raise ValueError(f"--agreement must be one of {', '.join(AGREEMENTS)}, got {agreement!r}")
        if agreement_weight < 0:
            raise ValueError(f"--agreement-weight must be >= 0, got {agreement_weight}")
        self.agreement_weight = agreement_weight
        self.agreement = agreement

    def forward(self, model, sample, reduce=True):
        if not (hasattr(model, "fwd") and hasattr(model, "rev")):
            raise ValueError("dhmm_agreement needs --arch transformer_dhmm_agreement or "
                             f"transformer_dhmm_first_order_agreement (got {type(model).__name__})")
        pad, eos = model.fwd.decoder.padding_idx, model.fwd.decoder.dictionary.eos()
        grad = self.agreement_weight > 0
        net = sample["net_input"]
        out_f = model.fwd(**net, features_only=True)
        loss_f, nll_f, post_f = loss_and_posteriors(model.fwd.decoder, out_f, sample["target"], self.eps, grad)
        rsample = reverse_sample(sample, pad, eos)
        out_r = model.rev(**rsample["net_input"], features_only=True)
        loss_r, nll_r, post_r = loss_and_posteriors(model.rev.decoder, out_r, rsample["target"], self.eps, grad)
        with torch.set_grad_enabled(grad and torch.is_grad_enabled()):
            agree = agreement_term(post_f, post_r, net["src_tokens"], sample["target"], pad, eos, self.agreement)
        loss = loss_f + loss_r
        if grad:
            loss = loss + self.agreement_weight * agree
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_f.data,
            "rev_nll_loss": nll_r.data,
            "rev_ntokens": rsample["ntokens"],
            "agreement": agree.detach().data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        rev_ntokens = sum(log.get("rev_ntokens", 0) for log in logging_outputs)
        rev_nll = sum(log.get("rev_nll_loss", 0) for log in logging_outputs)
        agree = sum(log.get("agreement", 0) for log in logging_outputs)
        metrics.log_scalar("rev_nll_loss", rev_nll / max(rev_ntokens, 1) / math.log(2), rev_ntokens, round=3)
        metrics.log_scalar("agreement", agree / max(ntokens, 1), ntokens, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
