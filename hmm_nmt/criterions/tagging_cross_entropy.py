"""Token-level cross-entropy for sequence tagging, with tag accuracy and entity (chunk) F1.

Loss: a model with a ``sequence_nll(src_tokens, src_lengths, target)`` method (``bilstm_crf_tagger``: the
CRF's -log p(y | x) per sentence; a model may say it has none this time with ``has_sequence_nll = False``)
is trained on the sum of those; any other on the token NLL below. Both
are normalised per tag (``sample_size`` = number of tags). A batch's ``net_input["src_chars"]`` (the tokens'
character ids, see :mod:`hmm_nmt.tasks.sequence_tagging`) goes to the model's ``forward`` with the rest of
``net_input`` and, as ``src_chars=``, to its ``sequence_nll`` and ``constrained_viterbi``.

The model output (B, T, n_tags) goes through ``model.get_normalized_probs(..., log_probs=True)`` and is
scored against ``sample["target"]`` (B, T), padded with the tag dictionary's pad index (see
:mod:`hmm_nmt.tasks.sequence_tagging` for the contract). The prediction at each word is the arg-max over
the non-special tags (the maximum posterior mode, MPM, of the paper) under ``--decoding argmax`` (default),
the best sequence the training tag scheme allows under ``--decoding viterbi`` (:func:`decode_tags`).

At validation (``model.training`` False) the criterion also counts, per batch, correct tags and, for
entity/chunk tags, the entities of the gold and predicted sequences read in the training tag scheme
(:func:`hmm_nmt.data.entity_eval.span_counts`; spans are the same in every scheme, so these are the
entities of the file's scheme too, except that IO training merges adjacent same-type gold entities) and
the true positives, and the predicted sequences that break the scheme; the counts are summed by fairseq's
metrics and turned into ``accuracy``, ``chunk_precision``, ``chunk_recall``, ``chunk_f1`` (micro, percent)
and ``invalid_sequences`` at reduce time: on valid predictions exactly seqeval's strict corpus-level
scores over the whole valid set.
"""
import math

import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion

from hmm_nmt.data.entity_eval import count_invalid, span_counts
from hmm_nmt.hmm.crf import constrained_viterbi

DECODINGS = ("argmax", "viterbi")


def predict_tags(lprobs, nspecial):
    """Arg-max over the non-special tags of (B, T, C) scores -> (B, T) tag indices."""
    return lprobs[..., nspecial:].argmax(-1) + nspecial


def decode_tags(model, net_input, lprobs, task, decoding="argmax"):
    """(B, T) predicted tag indices (padding: any value) of one batch.

    ``argmax``: :func:`predict_tags`. ``viterbi``: the best tag sequence the training scheme allows
    (``task.tag_constraints()``): the model's own ``constrained_viterbi(src_tokens, src_lengths,
    constraints[, src_chars=...])`` when it has one (the CRF of ``bilstm_crf_tagger``; the chain of an HNMC tagger whose
    states are the tags, architectures 1 and 3), else :func:`hmm_nmt.hmm.crf.constrained_viterbi` over the
    per-token log-probabilities ``lprobs``.
    """
    td = task.target_dictionary
    if decoding == "argmax":
        return predict_tags(lprobs, td.nspecial)
    if decoding != "viterbi":
        raise ValueError(f"unknown decoding {decoding!r} ({', '.join(DECODINGS)})")
    allowed, start, end = task.tag_constraints()
    mask = net_input["src_tokens"].ne(task.source_dictionary.pad())
    own = getattr(model, "constrained_viterbi", None)
    path = None
    if own is not None:
        path = own(net_input["src_tokens"], net_input.get("src_lengths"), (allowed, start, end),
                   **chars_kwargs(net_input))
    if path is None:
        path = constrained_viterbi(lprobs.float(), allowed, start, end, mask)[1]
    return path.masked_fill(~mask, td.pad())


def chars_kwargs(net_input):
    """``{"src_chars": ...}`` when the batch carries the tokens' character ids (the ``sequence_tagging``
    task with ``--char-embed-dim``), else ``{}``: passed on to the model's own scoring methods."""
    chars = net_input.get("src_chars")
    return {} if chars is None else {"src_chars": chars}


def chunk_counts(gold_seqs, pred_seqs, scheme="iob2"):
    """(true positives, predicted chunks, gold chunks) over lists of tag-string sequences in ``scheme``."""
    return span_counts(gold_seqs, pred_seqs, scheme)


@register_criterion("tagging_cross_entropy")
class TaggingCrossEntropyCriterion(FairseqCriterion):
    def __init__(self, task, decoding="argmax"):
        super().__init__(task)
        self.task = task
        self.tag_dict = task.target_dictionary
        self.bio = bool(getattr(task, "bio", False))
        self.scheme = getattr(task, "train_scheme", None) or ("iob2" if self.bio else None)
        self.decoding = decoding or "argmax"

    @staticmethod
    def add_args(parser):
        parser.add_argument("--decoding", choices=DECODINGS, default="argmax",
                            help="validation predictions: per-token arg-max, or the best sequence the tag "
                                 "scheme allows (Viterbi)")

    def forward(self, model, sample, reduce=True):
        target = sample["target"]
        mask = target.ne(self.padding_idx)
        seq_nll = getattr(model, "sequence_nll", None)
        lprobs = None
        if seq_nll is not None and getattr(model, "has_sequence_nll", True):
            net = sample["net_input"]
            per_sentence = seq_nll(net["src_tokens"], net.get("src_lengths"), target, **chars_kwargs(net))
            loss = per_sentence.sum() if reduce else per_sentence
        else:
            lprobs = self._lprobs(model, sample)
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
                if lprobs is None:
                    lprobs = self._lprobs(model, sample)
                pred = decode_tags(model, sample["net_input"], lprobs, self.task, self.decoding)
                logging_output["n_correct"] = int((pred.eq(target) & mask).sum())
                if self.bio:
                    gold_seqs, pred_seqs = [], []
                    for g, p, m in zip(target.tolist(), pred.tolist(), mask.tolist()):
                        n = sum(m)
                        gold_seqs.append([self.tag_dict[i] for i in g[:n]])
                        pred_seqs.append([self.tag_dict[i] for i in p[:n]])
                    tp, n_pred, n_gold = chunk_counts(gold_seqs, pred_seqs, self.scheme)
                    logging_output.update(chunk_tp=tp, chunk_pred=n_pred, chunk_gold=n_gold,
                                          invalid_sequences=count_invalid(pred_seqs, self.scheme))
        return loss, ntokens, logging_output

    def _lprobs(self, model, sample):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = sample["target"]
        if lprobs.dim() != 3 or lprobs.shape[:2] != target.shape:
            raise ValueError(
                f"tagger output must be (B, T, n_tags) aligned with the target {tuple(target.shape)}, "
                f"got {tuple(lprobs.shape)}"
            )
        return lprobs

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
            for key in ("chunk_tp", "chunk_pred", "chunk_gold", "invalid_sequences"):
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
            metrics.log_derived("invalid_sequences", lambda m: m["_invalid_sequences"].sum)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
