"""Negative log-likelihood of the direct HMM with label smoothing inside the sum over alignments.

Label smoothing cannot be applied to the output distribution after the dynamic programming (Wang et al.
2021, "Label smoothing and automatic differentiation"); it is applied to the lexicon at each step instead:

    ls(i, j) = (1 - eps) log p(e_i | j, ...) + eps * mean_v log p(v | j, ...)

replaces log p(e_i | j, ...) in the forward recursion, and the loss is -log of the resulting "likelihood".
With eps = 0 the loss is exactly the negative log-likelihood. ``nll_loss`` is always the exact NLL.
"""
from dataclasses import dataclass

import torch

from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from hmm_nmt.hmm import direct


@dataclass
class DHMMLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    pass


def dhmm_loss(model, net_output, target, eps):
    """(smoothed loss, exact nll, kept alignment mass or None), summed over the batch."""
    decoder = model.decoder
    x, extra = net_output
    tgt_mask = target.ne(decoder.padding_idx)
    row_mask = decoder.lexicon_rows(extra, tgt_mask)
    gold, mean = decoder.lexicon_scores(x, extra, target, row_mask)
    align = decoder.alignment_potentials(extra, row_mask)
    if eps > 0:
        ll = direct.log_likelihood((1.0 - eps) * gold + eps * mean, tgt_mask, **align)
        with torch.no_grad():
            nll = -direct.log_likelihood(gold, tgt_mask, **align).sum()
        loss = -ll.sum()
    else:
        loss = -direct.log_likelihood(gold, tgt_mask, **align).sum()
        nll = loss.detach()
    return loss, nll


@register_criterion("dhmm_label_smoothed_cross_entropy", dataclass=DHMMLabelSmoothedCrossEntropyConfig)
class DHMMLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    """``--criterion dhmm_label_smoothed_cross_entropy --label-smoothing EPS`` for ``transformer_dhmm``."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False):
        if ignore_prefix_size:
            raise ValueError("dhmm_label_smoothed_cross_entropy does not support --ignore-prefix-size")
        if report_accuracy:
            raise ValueError("dhmm_label_smoothed_cross_entropy does not support --report-accuracy")
        super().__init__(task, sentence_avg, label_smoothing)

    def forward(self, model, sample, reduce=True):
        if not hasattr(model.decoder, "lexicon_scores"):
            raise ValueError("dhmm_label_smoothed_cross_entropy needs a transformer_dhmm model "
                             f"(got {type(model).__name__}); use label_smoothed_cross_entropy instead")
        net_output = model(**sample["net_input"], features_only=True)
        loss, nll = dhmm_loss(model, net_output, sample["target"], self.eps)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output
