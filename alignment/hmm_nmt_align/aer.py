"""Alignment error rate (Och & Ney 2000) with precision, recall and F-measure.

With gold sure links S, gold possible links P (S ⊆ P) and hypothesis links A:

    precision = |A ∩ P| / |A|          recall = |A ∩ S| / |S|
    AER       = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)
    F         = 2 · precision · recall / (precision + recall)

Corpus-level values are computed from the counts summed over all sentences (not the mean of
per-sentence values), as in the usual AER scripts.  A ratio whose denominator is zero (e.g. the
precision of an empty hypothesis) is ``nan`` in Python and ``null`` in JSON.
"""
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence

from .io import Alignment

__all__ = ["AERCounts", "sentence_counts", "corpus_scores", "sentence_scores", "aer"]


@dataclass(frozen=True)
class AERCounts:
    """The four counts every measure here is made of."""

    a_and_s: int = 0  # |A ∩ S|
    a_and_p: int = 0  # |A ∩ P|
    a: int = 0  # |A|
    s: int = 0  # |S|

    def __add__(self, other: "AERCounts") -> "AERCounts":
        return AERCounts(self.a_and_s + other.a_and_s, self.a_and_p + other.a_and_p, self.a + other.a, self.s + other.s)

    @property
    def precision(self) -> float:
        return self.a_and_p / self.a if self.a else math.nan

    @property
    def recall(self) -> float:
        return self.a_and_s / self.s if self.s else math.nan

    @property
    def aer(self) -> float:
        den = self.a + self.s
        return 1.0 - (self.a_and_s + self.a_and_p) / den if den else math.nan

    @property
    def f(self) -> float:
        p, r = self.precision, self.recall
        if math.isnan(p) or math.isnan(r):
            return math.nan
        return 2 * p * r / (p + r) if p + r > 0 else 0.0

    def scores(self) -> Dict[str, float]:
        return {"AER": self.aer, "P": self.precision, "R": self.recall, "F": self.f}


def _links(x) -> frozenset:
    return x.links if isinstance(x, Alignment) else frozenset(x)


def sentence_counts(gold: Alignment, hyp) -> AERCounts:
    """Counts for one sentence; ``hyp`` is an :class:`Alignment` (all its links count) or a link set."""
    a = _links(hyp)
    return AERCounts(len(a & gold.sure), len(a & gold.possible), len(a), len(gold.sure))


def _check(gold: Sequence, hyp: Sequence) -> None:
    if len(gold) != len(hyp):
        raise ValueError(f"{len(gold)} gold sentences but {len(hyp)} hypothesis sentences")


def corpus_scores(gold: Sequence[Alignment], hyp: Sequence) -> Dict[str, float]:
    """Corpus-level ``{'AER', 'P', 'R', 'F', 'sentences'}`` (fractions in [0, 1])."""
    _check(gold, hyp)
    total = AERCounts()
    for g, h in zip(gold, hyp):
        total = total + sentence_counts(g, h)
    out = total.scores()
    out["sentences"] = len(gold)
    return out


def sentence_scores(gold: Sequence[Alignment], hyp: Sequence) -> List[Dict[str, float]]:
    """Per-sentence ``{'AER', 'P', 'R', 'F', 'A', 'S', 'A&S', 'A&P'}``."""
    _check(gold, hyp)
    out = []
    for g, h in zip(gold, hyp):
        c = sentence_counts(g, h)
        d = c.scores()
        d.update({"A": c.a, "S": c.s, "A&S": c.a_and_s, "A&P": c.a_and_p})
        out.append(d)
    return out


def aer(gold: Iterable[Alignment], hyp: Iterable) -> float:
    """Corpus AER as a fraction."""
    gold, hyp = list(gold), list(hyp)
    return corpus_scores(gold, hyp)["AER"]
