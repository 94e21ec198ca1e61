"""Token-level cross-entropy for sequence tagging, with tag accuracy and seqeval chunk F1.

The model output (B, T, n_tags) goes through ``model.get_normalized_probs(..., log_probs=True)`` and is
scored against ``sample["target"]`` (B, T), padded with the tag dictionary's pad index (see
:mod:`hmm_nmt.tasks.sequence_tagging` for the contract). The prediction at each word is the arg-max over
the non-special tags (the maximum posterior mode, MPM, of the paper).

At validation (``model.training`` False) the criterion also counts, per batch, correct tags and, when
the tag set is BIO-like, the chunks of the gold and predicted sequences (extracted with seqeval's
``get_entities``) and the true positives; the counts are summed by fairseq's metrics and turned into
``accuracy``, ``chunk_precision``, ``chunk_recall`` and ``chunk_f1`` (micro, percent) at reduce time,
which is exactly seqeval's corpus-level ``f1_score`` over the whole valid set.
"""
import math

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from seqeval.metrics.sequence_labeling import get_entities


def predict_tags(lprobs, nspecial):
    """Arg-max over the non-special tags of (B, T, C) scores -> (B, T) tag indices."""
    return lprobs[..., nspecial:].argmax(-1) + nspecial


def chunk_counts(gold_seqs, pred_seqs):
    """(true positives, predicted chunks, gold chunks) over lists of tag-string sequences."""
    tp = n_pred = n_gold = 0
    for gold, pred in zip(gold_seqs, pred_seqs):
        g = set(get_entities(gold))
        p = set(get_entities(pred))
        tp += len(g & p)
        n_pred += len(p)
        n_gold += len(g)
    return tp, n_pred, n_gold


@register_criterion("tagging_cross_entropy")
class TaggingCrossEntropyCriterion(FairseqCriterion):
    def __init__(self, task):
        super().__init__(task)
        self.tag_dict = task.target_dictionary
        self.bio = bool(getattr(task, "bio", False))

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = sample["target"]
        if lprobs.dim() != 3 or lprobs.shape[:2] != target.shape:
            raise ValueError(
                f"tagger output must be (B, T, n_tags) aligned with the target {tuple(target.shape)}, "
                f"got {tuple(lprobs.shape)}"
            )
        mask = target.ne(self.padding_idx)
        loss = F.nll_loss(
            lprobs.reshape(-1, lprobs.size(-1)).float(), target.reshape(-1),
            ignore_index=self.padding_idx, reduction="sum" if reduce else "none",
        )
        ntokens = int(mask.sum())
        logging_output = {
            "loss": loss.data,
            "ntokens": ntokens,
            "nsentences": target.size(0),
            "sample_size": ntokens,
        }
        if not model.training:
            with torch.no_grad():
                pred = predict_tags(lprobs, self.tag_dict.nspecial)
                logging_output["n_correct"] = int((pred.eq(target) & mask).sum())
                if self.bio:
                    gold_seqs, pred_seqs = [], []
                    for g, p, m in zip(target.tolist(), pred.tolist(), mask.tolist()):
                        n = sum(m)
                        gold_seqs.append([self.tag_dict[i] for i in g[:n]])
                        pred_seqs.append([self.tag_dict[i] for i in p[:n]])
                    tp, n_pred, n_gold = chunk_counts(gold_seqs, pred_seqs)
                    logging_output.update(chunk_tp=tp, chunk_pred=n_pred, chunk_gold=n_gold)
        return loss, ntokens, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        def total(key):
            return sum(log.get(key, 0) for log in logging_outputs)

        loss_sum = total("loss")
        sample_size = total("sample_size")
        metrics.log_scalar("loss", loss_sum / max(sample_size, 1) / math.log(2), sample_size, round=3)
        if any("n_correct" in log for log in logging_outputs):
            metrics.log_scalar_sum("_n_correct", total("n_correct"))
            metrics.log_scalar_sum("_n_tags", total("ntokens"))
            metrics.log_derived(
                "accuracy",
                lambda m: round(100.0 * m["_n_correct"].sum / m["_n_tags"].sum, 3) if m["_n_tags"].sum > 0 else float("nan"),
            )
        if any("chunk_tp" in log for log in logging_outputs):
            for key in ("chunk_tp", "chunk_pred", "chunk_gold"):
                metrics.log_scalar_sum("_" + key, total(key))

            def prf(m):
                tp, n_pred, n_gold = (m["_chunk_tp"].sum, m["_chunk_pred"].sum, m["_chunk_gold"].sum)
                p = tp / n_pred if n_pred else 0.0
                r = tp / n_gold if n_gold else 0.0
                f = 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0
                return 100 * p, 100 * r, 100 * f

            metrics.log_derived("chunk_precision", lambda m: round(prf(m)[0], 3))
            metrics.log_derived("chunk_recall", lambda m: round(prf(m)[1], 3))
            metrics.log_derived("chunk_f1", lambda m: round(prf(m)[2], 3))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
