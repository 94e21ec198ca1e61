"""Criterion ``vlhmm_tagging``: exact joint negative log-likelihood -log p(w, y) of ``vlhmm_tagger``.

The logged ``loss`` is that joint NLL per token (bits), in training and validation alike; at validation the
tags predicted from p(y_t | w) (the model's output) also give ``accuracy``, as in ``tagging_cross_entropy``.
"""
import torch
from fairseq.criterions import register_criterion

from hmm_nmt.criterions.tagging_cross_entropy import TaggingCrossEntropyCriterion, predict_tags


@register_criterion("vlhmm_tagging")
class VLHMMTaggingCriterion(TaggingCrossEntropyCriterion):
    def forward(self, model, sample, reduce=True):
        if not hasattr(model, "joint_log_likelihood"):
            raise ValueError("--criterion vlhmm_tagging needs --arch vlhmm_tagger")
        src = sample["net_input"]["src_tokens"]
        target = sample["target"]
        mask = target.ne(self.padding_idx)
        loss = -model.joint_log_likelihood(src, target, mask).sum()
        ntokens = int(mask.sum())
        logging_output = {"loss": loss.data, "ntokens": ntokens, "nsentences": target.size(0),
                          "sample_size": ntokens}
        if not model.training:
            with torch.no_grad():
                lprobs = model(**sample["net_input"])
                pred = predict_tags(lprobs, self.tag_dict.nspecial)
                logging_output["n_correct"] = int((pred.eq(target) & mask).sum())
        return loss, ntokens, logging_output
