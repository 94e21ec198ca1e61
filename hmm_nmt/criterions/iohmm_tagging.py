"""``--criterion iohmm_tagging``: maximum likelihood (Eq. 6 of Bengio & Frasconi 1994) for ``iohmm_tagger``.

The loss is ``-sum_p log P(y^(p) | u^(p))``, the IOHMM's sequence likelihood computed by the forward
algorithm (its gradient is the GEM gradient of Eq. 13-14 at the current parameters), per tag as
``loss``; the per-position marginal cross-entropy of ``tagging_cross_entropy`` is logged beside it as
``marginal_loss``, and validation reports the same tag accuracy / chunk F1 (maximum posterior mode
``argmax_c P(y_t = c | u)``, Eq. 3).
"""
import math

from fairseq import metrics
from fairseq.criterions import register_criterion

from hmm_nmt.criterions.tagging_cross_entropy import TaggingCrossEntropyCriterion, chars_kwargs


@register_criterion("iohmm_tagging")
class IOHMMTaggingCriterion(TaggingCrossEntropyCriterion):
    def forward(self, model, sample, reduce=True):
        if not hasattr(model, "sequence_log_likelihood"):
            raise ValueError("--criterion iohmm_tagging needs an IOHMM tagger (--arch iohmm_tagger)")
        if not reduce:
            raise ValueError("iohmm_tagging only computes a summed loss")
        marginal, sample_size, logging_output = super().forward(model, sample, reduce=True)
        net = sample["net_input"]
        loss = -model.sequence_log_likelihood(net["src_tokens"], net["src_lengths"], sample["target"],
                                              **chars_kwargs(net)).sum()
        logging_output["marginal_loss"] = marginal.data
        logging_output["loss"] = loss.data
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        TaggingCrossEntropyCriterion.reduce_metrics(logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        marginal = sum(log.get("marginal_loss", 0) for log in logging_outputs)
        metrics.log_scalar("marginal_loss", marginal / max(sample_size, 1) / math.log(2), sample_size, round=3)
