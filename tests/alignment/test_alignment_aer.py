"""AER, precision, recall, F: hand-checked values and identities."""
import math
import random

import pytest

from hmm_nmt_align.aer import AERCounts, corpus_scores, sentence_counts, sentence_scores
from hmm_nmt_align.io import Alignment

# sentence 1: S = {0-0, 1-1}, P = S + {2-2}; A = {0-0, 2-2, 2-1}
#   |A∩S| = 1 (0-0), |A∩P| = 2 (0-0, 2-2), |A| = 3, |S| = 2
#   AER = 1 - (1 + 2) / (3 + 2) = 0.4;  P = 2/3;  R = 1/2;  F = 2(2/3)(1/2) / (7/6) = 4/7
# sentence 2: S = {0-1}, P = S + {1-0}; A = {0-1}: everything 1 -> AER 0, P = R = F = 1
# corpus: |A∩S| = 2, |A∩P| = 3, |A| = 4, |S| = 3
#   AER = 1 - 5/7 = 2/7;  P = 3/4;  R = 2/3;  F = 2(3/4)(2/3) / (17/12) = 12/17
GOLD = [Alignment({(0, 0), (1, 1)}, {(2, 2)}), Alignment({(0, 1)}, {(1, 0)})]
HYP = [Alignment.from_links({(0, 0), (2, 2), (2, 1)}), Alignment.from_links({(0, 1)})]


def test_sentence_values_by_hand():
    s1, s2 = sentence_scores(GOLD, HYP)
    assert (s1["A&S"], s1["A&P"], s1["A"], s1["S"]) == (1, 2, 3, 2)
    assert s1["AER"] == pytest.approx(0.4)
    assert s1["P"] == pytest.approx(2 / 3)
    assert s1["R"] == pytest.approx(0.5)
    assert s1["F"] == pytest.approx(4 / 7)
    assert (s2["AER"], s2["P"], s2["R"], s2["F"]) == (0.0, 1.0, 1.0, 1.0)


def test_corpus_values_by_hand_are_pooled_not_averaged():
    c = corpus_scores(GOLD, HYP)
    assert c["AER"] == pytest.approx(2 / 7)
    assert c["P"] == pytest.approx(3 / 4)
    assert c["R"] == pytest.approx(2 / 3)
    assert c["F"] == pytest.approx(12 / 17)
    assert c["sentences"] == 2
    assert c["AER"] != pytest.approx((0.4 + 0.0) / 2)  # pooled counts, not the mean of sentence AERs


def test_possible_link_in_hypothesis_costs_nothing_in_precision_but_counts_in_A():
    gold = Alignment({(0, 0)}, {(1, 1)})
    # A = S: perfect.  A = P: precision still 1, recall 1, but AER = 1 - (1+2)/(2+1) = 0
    assert sentence_counts(gold, {(0, 0)}).aer == 0.0
    assert sentence_counts(gold, {(0, 0), (1, 1)}).aer == pytest.approx(0.0)
    # only the possible link: AER = 1 - (0 + 1) / (1 + 1) = 0.5, P = 1, R = 0
    c = sentence_counts(gold, {(1, 1)})
    assert (c.aer, c.precision, c.recall, c.f) == (pytest.approx(0.5), 1.0, 0.0, 0.0)


def test_without_possible_links_aer_is_one_minus_f():
    rng = random.Random(0)
    for _ in range(200):
        cells = [(i, j) for i in range(5) for j in range(5)]
        s = {c for c in cells if rng.random() < 0.3} or {(0, 0)}
        a = {c for c in cells if rng.random() < 0.3} or {(1, 1)}
        c = sentence_counts(Alignment(s), a)
        assert c.aer == pytest.approx(1 - c.f)


def test_sure_is_subset_of_possible_and_undefined_ratios():
    g = Alignment({(0, 0)}, {(1, 1)})
    assert g.possible == {(0, 0), (1, 1)}
    empty = AERCounts()
    assert math.isnan(empty.aer) and math.isnan(empty.precision) and math.isnan(empty.f)
    c = sentence_counts(Alignment({(0, 0)}), set())  # empty hypothesis: precision undefined, AER 1
    assert math.isnan(c.precision) and c.recall == 0.0 and c.aer == 1.0


def test_length_mismatch_raises():
    with pytest.raises(ValueError):
        corpus_scores(GOLD, HYP[:1])
