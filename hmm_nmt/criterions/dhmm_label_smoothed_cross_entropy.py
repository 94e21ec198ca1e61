"""Negative log-likelihood of the direct HMM with label smoothing inside the sum over alignments.

Label smoothing cannot be applied to the output distribution after the dynamic programming (Wang et al.
2021, "Label smoothing and automatic differentiation"); it is applied to the lexicon at each step instead:

    ls(i, j) = (1 - eps) log p(e_i | j, ...) + eps * mean_v log p(v | j, ...)

replaces log p(e_i | j, ...) in the forward recursion, and the loss is -log of the resulting "likelihood".
With eps = 0 the loss is exactly the negative log-likelihood. ``nll_loss`` is always the exact NLL.

``--dhmm-smoothing mixture`` instead smooths the decoder's output distribution p(v | e_<i, f) = sum_j
p(j | ...) p(v | j, ...) (Eq. 9; first order: the filtered prediction of j) exactly as fairseq's
``label_smoothed_cross_entropy`` smooths the transformer's:

    loss = (1 - eps - eps') * (-log p(E | F)) + eps' * sum_i sum_v -log p(v | e_<i, f),   eps' = eps / (V - 1)

so both models train the same criterion on their output distributions (the chain rule makes
sum_i log p(e_i | e_<i, f) = log p(E | F), which the DP computes).

``--alignment-guide-weight W`` (with the task's ``--load-alignments``: fairseq's ``DATA/SPLIT.align.SRC-TGT``,
piece links ``j-i`` per sentence) adds W times -log p(b_i in C_i for every linked target piece i | E, F), C_i the
source pieces linked to i (:func:`hmm_nmt.hmm.direct.link_log_posterior`): the model's own posterior of the
links, e.g. those both directions agreed on in a first pass. Target pieces without a link are free.
"""
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics
from torch import Tensor

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.lexicon import mixture_log_prob_sum
from hmm_nmt.options import probability


@dataclass
class DHMMLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    dhmm_smoothing: str = field(
        default="lexicon",
        metadata={"help": "where label smoothing applies: to the lexicon inside the sum over alignments "
                          "(lexicon, the paper's) or to the output mixture p(v | e_<i, f), exactly as "
                          "label_smoothed_cross_entropy does for the transformer (mixture)"})
    alignment_guide_weight: float = field(
        default=0.0,
        metadata={"help": "add this weight times -log p(links | E, F), the posterior of the training set's piece "
                          "links (needs --load-alignments and DATA/train.align.SRC-TGT); 0: off"})


SMOOTHING = ("lexicon", "mixture")


def link_mask(alignments: Tensor, bsz: int, tgt_len: int, src_len: int) -> Tensor:
    """(B, I, J) bool of fairseq's collated ``sample["alignments"]`` (N, 2): column 0 the source position in the
    padded ``src_tokens`` row, column 1 ``b * tgt_len + i`` (LanguagePairDataset.collater)."""
    allowed = torch.zeros(bsz, tgt_len, src_len, dtype=torch.bool, device=alignments.device)
    if alignments.numel():
        b, i = alignments[:, 1] // tgt_len, alignments[:, 1] % tgt_len
        allowed[b, i, alignments[:, 0]] = True
    return allowed


class DHMMLoss(NamedTuple):
    """What :func:`dhmm_loss` returns, whatever the options."""

    loss: Tensor  #: the training loss (label-smoothed), summed over the batch
    nll: Tensor  #: the exact negative log-likelihood, summed, detached
    mass: Tensor  #: predicted alignment probability of the kept positions summed over target tokens (the
    #: number of target tokens when nothing is pruned)


def dhmm_loss(model, net_output, target, eps, smoothing="lexicon", prev_output_tokens=None, links=None,
              guide_weight=0.0, stats=None) -> DHMMLoss:
    """The direct HMM's loss of a batch (:class:`DHMMLoss`).

    With ``--lexicon-topk`` the likelihood is restricted to the kept alignment positions (``bound``) or
    renormalised over them (``pruned``); ``mass`` says how much predicted alignment probability was kept.
    ``smoothing="mixture"`` (see the module docstring) needs ``prev_output_tokens`` for the first order.
    ``links`` (B, I, J) bool with ``guide_weight`` > 0 adds ``guide_weight`` times -log p(links | E, F)
    (the module docstring); its sum, detached, goes to ``stats["guide"]``.
    """
    decoder = model.decoder
    x, extra = net_output
    tgt_mask = target.ne(decoder.padding_idx)
    guided = links is not None and guide_weight > 0
    if guided and (smoothing == "mixture" and eps > 0 or decoder.lexicon_topk):
        raise ValueError("--alignment-guide-weight needs the exact sum over alignments: not with --lexicon-topk "
                         "or --dhmm-smoothing mixture")
    if smoothing == "mixture" and eps > 0:
        loss, nll = _mixture_smoothed_loss(decoder, x, extra, target, tgt_mask, eps, prev_output_tokens)
        return DHMMLoss(loss, nll, tgt_mask.sum().to(loss.dtype))
    if decoder.lexicon_topk and decoder.first_order is not None:
        ll, ll_gold, mass = decoder.pruned_first_order_loss(x, extra, target, eps)
        return DHMMLoss(-ll.sum(), -ll_gold.detach().sum(), mass.sum())
    row_mask = decoder.lexicon_rows(extra, tgt_mask)
    gold, mean = decoder.lexicon_scores(x, extra, target, row_mask)
    align = decoder.alignment_potentials(extra, row_mask)
    if guided:  # the exact likelihood carries a gradient here: the links' posterior needs it
        ll_gold = direct.log_likelihood(gold, tgt_mask, **align)
        nll = -ll_gold.detach().sum()
        ll = direct.log_likelihood((1.0 - eps) * gold + eps * mean, tgt_mask, **align) if eps > 0 else ll_gold
        guide = -direct.link_log_posterior(gold, tgt_mask, links & row_mask, log_z=ll_gold, **align).sum()
        loss = -ll.sum() + guide_weight * guide
        if stats is not None:
            stats["guide"] = guide.detach()
    elif eps > 0:
        ll = direct.log_likelihood((1.0 - eps) * gold + eps * mean, tgt_mask, **align)
        with torch.no_grad():
            nll = -direct.log_likelihood(gold, tgt_mask, **align).sum()
        loss = -ll.sum()
    else:
        loss = -direct.log_likelihood(gold, tgt_mask, **align).sum()
        nll = loss.detach()
    if "log_align" in align:  # predicted alignment mass on the kept positions (before any renormalisation)
        mass = (extra["log_align"].detach().exp() * row_mask).sum()
    else:
        mass = tgt_mask.sum().to(loss.dtype)
    return DHMMLoss(loss, nll, mass)


def _mixture_smoothed_loss(decoder, x, extra, target, tgt_mask, eps, prev_output_tokens):
    if decoder.lexicon_topk:
        raise ValueError("--dhmm-smoothing mixture does not support --lexicon-topk (use the default, lexicon)")
    if getattr(decoder, "lexicon_kind", "softmax") != "softmax":
        raise ValueError("--dhmm-smoothing mixture needs --lexicon softmax (the class lexicon smooths at the "
                         "class level: use the default, --dhmm-smoothing lexicon)")
    row_mask = decoder.lexicon_rows(extra, tgt_mask)
    # one pair of lexicon features (and one --lexicon-dropout mask) for the likelihood and the smoothing
    src_feat, tgt_feat = decoder.lexicon_features(x, extra["encoder_out"])
    gold, _ = decoder.lexicon_scores(x, extra, target, row_mask, features=(src_feat, tgt_feat))
    ll = direct.log_likelihood(gold, tgt_mask, **decoder.alignment_potentials(extra, row_mask)).sum()
    if decoder.first_order is None:
        log_align = extra["log_align"]
    else:
        if prev_output_tokens is None:
            raise ValueError("--dhmm-smoothing mixture of a first-order model needs prev_output_tokens")
        log_align = decoder.first_order_alignment(x, extra, prev_output_tokens, None)
    weight, bias = decoder.output_weight_bias()
    smooth = mixture_log_prob_sum(src_feat, tgt_feat, log_align, weight, bias, tgt_mask,
                                  decoder.lexicon_chunk_size, decoder.lexicon_dtype).sum()
    eps_i = eps / (weight.size(0) - 1)  # fairseq's label_smoothed_nll_loss
    loss = -(1.0 - eps - eps_i) * ll - eps_i * smooth
    return loss, -ll.detach()


@register_criterion("dhmm_label_smoothed_cross_entropy", dataclass=DHMMLabelSmoothedCrossEntropyConfig)
class DHMMLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """``--criterion dhmm_label_smoothed_cross_entropy --label-smoothing EPS`` for ``transformer_dhmm``."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 dhmm_smoothing="lexicon", alignment_guide_weight=0.0):
        if dhmm_smoothing not in SMOOTHING:
            raise ValueError(f"--dhmm-smoothing must be one of {', '.join(SMOOTHING)}, got {dhmm_smoothing!r}")
        if ignore_prefix_size:
            raise ValueError("dhmm_label_smoothed_cross_entropy does not support --ignore-prefix-size")
        if report_accuracy:
            raise ValueError("dhmm_label_smoothed_cross_entropy does not support --report-accuracy")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), got {label_smoothing}")
        if not alignment_guide_weight >= 0:
            raise ValueError(f"--alignment-guide-weight must be >= 0, got {alignment_guide_weight}")
        if alignment_guide_weight > 0 and not getattr(getattr(task, "cfg", None), "load_alignments", False):
            raise ValueError("--alignment-guide-weight needs the task's --load-alignments (and the piece links in "
                             "DATA/train.align.SRC-TGT)")
        super().__init__(task, sentence_avg, label_smoothing)
        self.smoothing = dhmm_smoothing
        self.guide_weight = alignment_guide_weight

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        # refused at parse time with the flag named (1.5 gave a negative loss, -0.1 a sharpened target)
        for action in parser._actions:
            if "--label-smoothing" in action.option_strings:
                action.type = probability

    def forward(self, model, sample, reduce=True):
        if not hasattr(model.decoder, "lexicon_scores"):
            raise ValueError("dhmm_label_smoothed_cross_entropy needs a transformer_dhmm model "
                             f"(got {type(model).__name__}); use label_smoothed_cross_entropy instead")
        net_output = model(**sample["net_input"], features_only=True)
        links, stats = None, {}
        if self.guide_weight > 0 and "alignments" in sample:  # the valid split has no links: plain loss there
            target = sample["target"]
            links = link_mask(sample["alignments"], target.size(0), target.size(1),
                              sample["net_input"]["src_tokens"].size(1))
        elif self.guide_weight > 0 and model.training and not self._train_links():
            raise ValueError("--alignment-guide-weight: the training set has no links (no DATA/train.align.SRC-TGT "
                             "next to its pairs)")
        # else a batch whose sentences all lack links (fairseq's collater then leaves the key out): plain loss
        loss, nll, mass = dhmm_loss(model, net_output, sample["target"], self.eps,
                                    smoothing=self.smoothing,
                                    prev_output_tokens=sample["net_input"]["prev_output_tokens"],
                                    links=links, guide_weight=self.guide_weight, stats=stats)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if model.decoder.lexicon_topk:
            logging_output["align_mass"] = mass.data
        if "guide" in stats:
            logging_output["guide"] = stats["guide"].data
        return loss, sample_size, logging_output

    def _train_links(self) -> bool:
        """Whether the loaded training set carries links (fairseq loads them silently, or not at all)."""
        dataset = getattr(self.task, "datasets", {}).get(getattr(self.task.cfg, "train_subset", "train"))
        return dataset is None or getattr(dataset, "align_dataset", None) is not None

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        if any("align_mass" in log for log in logging_outputs):
            ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
            mass = sum(log.get("align_mass", 0) for log in logging_outputs)
            # average predicted alignment probability kept by --lexicon-topk, per target token
            metrics.log_scalar("align_mass", mass / max(ntokens, 1), ntokens, round=4)
        if any("guide" in log for log in logging_outputs):
            ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
            guide = sum(log.get("guide", 0) for log in logging_outputs)
            # -log p(links | E, F) per target token, in bits as fairseq's losses
            metrics.log_scalar("guide", guide / max(ntokens, 1) / math.log(2), ntokens, round=3)
