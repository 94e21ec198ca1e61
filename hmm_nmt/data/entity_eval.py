"""Entity-level scoring shared by ``hmm-nmt-tags score``, ``hmm-nmt-tag``, the tagging criterion and the
benchmark (pure Python; seqeval for the reference numbers).

* :func:`entity_scores` is the reference: seqeval's strict mode (span and type must match, the CoNLL
  ``conlleval`` convention on valid sequences) in the scheme the data is written in. seqeval has no IO class
  and its IOE1 class drops one-token ``E-`` entities, so those two schemes are scored after a lossless
  conversion to IOB2 (see :mod:`hmm_nmt.data.tag_schemes`).
* :func:`span_counts` counts (true positives, predicted, gold) entities per sentence, so that counts can be
  summed over batches. ``strict=True`` (default, the criterion's) extracts the entities as seqeval's strict
  mode does, so the summed counts give exactly :func:`entity_scores`; ``strict=False`` reads them with the
  lenient scheme-aware reader :func:`hmm_nmt.data.tag_schemes.spans` (an impossible continuation starts
  a new entity, as ``conlleval`` does). The two agree on valid sequences (tested); on an invalid predicted
  sequence (``O I-PER`` in IOB2, possible under arg-max decoding, never under Viterbi) strict mode drops
  the broken entity where ``conlleval`` keeps it.

Tags that are not entity tags (``<unk>`` for a tag never seen in training) are read as ``O``.
"""
from typing import Dict, List, Sequence, Tuple

from hmm_nmt.data import tag_schemes as ts

__all__ = ["entity_scores", "span_counts", "strict_spans", "prf", "is_entity_tagset", "clean_tags", "count_invalid"]


def is_entity_tagset(tags: Sequence[str]) -> bool:
    """True if every tag is ``O`` or ``P-TYPE`` (P in I, B, E, S) and at least one is not ``O``."""
    tags = list(tags)
    if not tags or all(t == "O" for t in tags):
        return False
    for t in tags:
        try:
            ts.split_tag(t)
        except ts.TagSchemeError:
            return False
    return True


def clean_tags(tags: Sequence[str]) -> List[str]:
    """``tags`` with every non-entity symbol (``<unk>``, padding) replaced by ``O``."""
    out = []
    for t in tags:
        try:
            ts.split_tag(t)
            out.append(t)
        except ts.TagSchemeError:
            out.append("O")
    return out


def _prefix_ok(tags, scheme):
    """Tags whose prefix has no place in ``scheme`` (``S-X`` in IOB2) read as ``O``."""
    allowed = ts._PREFIXES[scheme]
    return [t if t == "O" or t[0] in allowed else "O" for t in clean_tags(tags)]


def _seqeval_ready(seqs, scheme):
    """(sequences, seqeval scheme class) to score ``seqs`` written in ``scheme`` with seqeval strict."""
    from seqeval import scheme as seqeval_scheme

    seqs = [_prefix_ok(s, scheme) for s in seqs]
    if scheme in ("io", "ioe1"):  # no seqeval class (io) / seqeval's IOE1 drops one-token E- entities
        seqs = [ts.convert(s, scheme, "iob2")[0] for s in seqs]
        scheme = "iob2"
    cls = getattr(seqeval_scheme, {"iob1": "IOB1", "iob2": "IOB2", "ioe2": "IOE2", "bioes": "IOBES"}[scheme])
    return seqs, cls


def strict_spans(tags: Sequence[str], scheme: str):
    """The entities seqeval's strict mode reads in one sentence: a set of (type, start, end)."""
    from seqeval.scheme import Entities

    seqs, cls = _seqeval_ready([tags], ts.canonical(scheme))
    if not seqs[0]:
        return set()
    return {(e.tag, e.start, e.end) for e in Entities(seqs, cls, suffix=False).entities[0]}


def span_counts(gold_seqs, pred_seqs, scheme: str, strict: bool = True) -> Tuple[int, int, int]:
    """(true positives, predicted entities, gold entities) over lists of tag sequences in ``scheme``."""
    scheme = ts.canonical(scheme)
    tp = n_pred = n_gold = 0
    for gold, pred in zip(gold_seqs, pred_seqs):
        if strict:
            g, p = strict_spans(gold, scheme), strict_spans(pred, scheme)
        else:
            g = set(ts.spans(_prefix_ok(gold, scheme), scheme))
            p = set(ts.spans(_prefix_ok(pred, scheme), scheme))
        tp += len(g & p)
        n_pred += len(p)
        n_gold += len(g)
    return tp, n_pred, n_gold


def prf(tp: int, n_pred: int, n_gold: int) -> Tuple[float, float, float]:
    """Micro precision, recall, F1 in percent from summed counts."""
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    f = 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 0.0
    return 100 * p, 100 * r, 100 * f


def count_invalid(seqs, scheme: str) -> int:
    """How many of the sequences break ``scheme``'s rules."""
    return sum(not ts.is_valid(clean_tags(s), scheme) for s in seqs if s)


def entity_scores(gold_seqs, pred_seqs, scheme: str, report: bool = False) -> Dict[str, object]:
    """seqeval strict entity precision, recall and F1 (percent) of ``pred_seqs`` against ``gold_seqs``, both
    written in ``scheme``; also ``invalid`` (predicted sequences that break the scheme) and, with
    ``report``, seqeval's per-type table (``report``)."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    scheme = ts.canonical(scheme)
    invalid = count_invalid([_prefix_ok(s, scheme) for s in pred_seqs], scheme)
    g, cls = _seqeval_ready(gold_seqs, scheme)
    p, _ = _seqeval_ready(pred_seqs, scheme)
    kw = {"mode": "strict", "scheme": cls}
    out = {"precision": 100 * precision_score(g, p, **kw), "recall": 100 * recall_score(g, p, **kw),
           "f1": 100 * f1_score(g, p, **kw), "invalid": invalid, "scheme": scheme}
    if report:
        out["report"] = classification_report(g, p, digits=4, **kw)
    return out
