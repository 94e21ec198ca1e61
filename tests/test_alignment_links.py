"""Link decisions, soft symmetrization and <unk>-safe word mapping, on hand-worked cases (no model)."""
import random

import numpy as np
import pytest

from alignment.extract import LinkOptions, sentence_word_links
from alignment.links import decide, parse_decision, soft_combine
from alignment.subword import subword_to_word_links, word_index
from alignment.symmetrize import symmetrize

# forward posterior p_f(b_i = j), target rows i, source columns j (rows need not sum to 1: EOS mass)
FWD = np.array([[0.70, 0.20],
                [0.30, 0.60],
                [0.45, 0.45]])   # a tie: argmax takes the leftmost source
# reverse posterior p_r(a_j = i), source rows j, target columns i
REV = np.array([[0.8, 0.1, 0.1],
                [0.1, 0.5, 0.4]])


def test_decisions_on_one_direction():
    # row argmax: 0->0, 1->1, 2->0 (tie); column argmax: source 0 -> row 0 (.7), source 1 -> row 1 (.6)
    assert decide(FWD, "argmax") == [(0, 0), (0, 2), (1, 1)]
    assert decide(FWD, "mutual") == [(0, 0), (1, 1)]
    assert decide(FWD, "union") == [(0, 0), (0, 2), (1, 1)]
    # > T, strictly; many-to-many: target 2 links both sources at 0.44, none at 0.5
    assert decide(FWD, "threshold", 0.44) == [(0, 0), (0, 2), (1, 1), (1, 2)]
    assert decide(FWD, "threshold", 0.45) == [(0, 0), (1, 1)]
    assert decide(FWD, "threshold", 0.5) == [(0, 0), (1, 1)]
    assert decide(np.zeros((0, 3))) == [] and decide(np.zeros((2, 0)), "mutual") == []


def test_soft_symmetrization_by_hand():
    # rev^T = [[.8,.1],[.1,.5],[.1,.4]]
    prod = soft_combine(FWD, REV, "prod")
    np.testing.assert_allclose(prod, [[0.56, 0.02], [0.03, 0.30], [0.045, 0.18]])
    mean = soft_combine(FWD, REV, "mean")
    np.testing.assert_allclose(mean, [[0.75, 0.15], [0.20, 0.55], [0.275, 0.425]])
    # the reverse direction breaks the forward tie of target 2 towards source 1
    assert decide(prod, "argmax") == decide(mean, "argmax") == [(0, 0), (1, 1), (1, 2)]
    # source 1's best target under prod is row 1 (.30 > .18): mutual drops (1, 2), union keeps it
    assert decide(prod, "mutual") == [(0, 0), (1, 1)]
    assert decide(prod, "union") == [(0, 0), (1, 1), (1, 2)]
    # prod > .25 needs both directions (about .5 each); mean > .4 is carried by either
    assert decide(prod, "threshold", 0.25) == [(0, 0), (1, 1)]
    assert decide(mean, "threshold", 0.4) == [(0, 0), (1, 1), (1, 2)]
    with pytest.raises(ValueError, match="same sentence pair"):
        soft_combine(FWD, REV.T, "prod")
    with pytest.raises(ValueError, match="unknown soft"):
        soft_combine(FWD, REV, "max")


def test_sentence_word_links_with_eos_and_pieces():
    # the matrices as extraction gives them: EOS last row and column; source pieces "a@@ b c" = words 0 0 1
    fwd = np.zeros((4, 4))
    fwd[:3, :3] = [[0.1, 0.8, 0.05], [0.1, 0.1, 0.7], [0.6, 0.1, 0.1]]
    fwd[:3, 3] = 1 - fwd[:3, :3].sum(1)
    rev = np.zeros((4, 4))
    rev[:3, :3] = [[0.1, 0.2, 0.6], [0.9, 0.05, 0.03], [0.1, 0.8, 0.05]]
    src_owner, tgt_owner = [0, 0, 1], [0, 1, 2]
    # forward argmax: t0->s1 (word 0), t1->s2 (word 1), t2->s0 (word 0)
    assert sentence_word_links(fwd, src_owner, tgt_owner, LinkOptions()) == [(0, 0), (0, 2), (1, 1)]
    # reverse argmax (source rows): s0->t2, s1->t0, s2->t1: the same word links, so every heuristic agrees
    for sym in ("intersect", "grow-diag", "prod", "mean"):
        assert sentence_word_links(fwd, src_owner, tgt_owner, LinkOptions(symmetrize=sym), rev) == \
            [(0, 0), (0, 2), (1, 1)], sym
    # threshold on prod: only pieces where both are confident: (s1,t0) .8*.9, (s2,t1) .7*.8, (s0,t2) .6*.6
    assert sentence_word_links(fwd, src_owner, tgt_owner, LinkOptions("threshold", 0.4, symmetrize="prod"), rev) == \
        [(0, 0), (1, 1)]
    # a hard heuristic on word links equals alignment.symmetrize of the two directions
    rev2 = rev.copy()
    rev2[1, :3] = [0.05, 0.05, 0.9]  # s1 -> t2 now
    f = sentence_word_links(fwd, src_owner, tgt_owner, LinkOptions())
    r = sorted({(src_owner[j], tgt_owner[i]) for j, i in [(0, 2), (1, 2), (2, 1)]})
    got = sentence_word_links(fwd, src_owner, tgt_owner, LinkOptions(symmetrize="intersect"), rev2)
    assert got == symmetrize(f, r, "intersect") == [(0, 2), (1, 1)]


def test_parse_decision():
    assert parse_decision("argmax") == ("argmax", 0.0)
    assert parse_decision("threshold:0.3") == ("threshold", 0.3)
    for bad, msg in (("max", "unknown"), ("threshold", "number"), ("threshold:x", "number"),
                     ("threshold:1.5", r"\[0, 1\)"), ("mutual:1", "no value")):
        with pytest.raises(ValueError, match=msg):
            parse_decision(bad)


# ------------------------------------------------------------------------------------------- <unk> pieces
def test_unk_pieces_continue_a_word():
    # das Hausboot ist gelblich = das Haus@@ boot ist ge@@ lb@@ lich
    pieces = ["das", "<unk>", "boot", "ist", "ge@@", "lb@@", "lich"]  # Haus@@ is <unk>: its @@ is lost
    assert word_index(pieces, "bpe") == [0, 1, 2, 3, 4, 4, 4]  # 5 words for a 4-word sentence
    assert word_index(pieces, "bpe", unk="<unk>") == [0, 1, 1, 2, 3, 3, 3]  # the truth
    pieces = ["das", "Haus@@", "<unk>", "ist", "ge@@", "lb@@", "lich"]  # boot is <unk>: merged with ist
    assert word_index(pieces, "bpe", unk="<unk>") == [0, 1, 1, 1, 2, 2, 2]
    spm = ["▁das", "<unk>", "boot", "▁ist"]  # ▁Haus is <unk>: joins das (spm never adds a word for it)
    assert word_index(spm, "spm", unk="<unk>") == [0, 0, 0, 1]
    # the link of the <unk> piece stays inside the 4 words
    assert subword_to_word_links([(1, 0), (6, 1)], ["das", "<unk>", "boot", "ist", "ge@@", "lb@@", "lich"],
                                 ["x", "y"], "bpe", unk="<unk>") == [(1, 0), (3, 1)]


def _segment(rng, n_words, style):
    """Random segmentation: (pieces, true word of each piece)."""
    pieces, owner = [], []
    for w in range(n_words):
        k = rng.randint(1, 3)
        for p in range(k):
            if style == "bpe":
                pieces.append(f"w{w}p{p}" + ("@@" if p < k - 1 else ""))
            else:
                pieces.append(("▁" if p == 0 else "") + f"w{w}p{p}")
            owner.append(w)
    return pieces, owner


@pytest.mark.parametrize("style", ["bpe", "spm"])
def test_unk_never_moves_a_piece_past_its_word(style):
    """Brute force over random segmentations and random <unk> pieces: the guessed word of every piece is
    at most its true word, so the number of words never exceeds the sentence's."""
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randint(1, 6)
        pieces, owner = _segment(rng, n, style)
        unk = [p if rng.random() > 0.35 else "<unk>" for p in pieces]
        guess = word_index(unk, style, eos=None, unk="<unk>")
        assert all(g <= t for g, t in zip(guess, owner)), (pieces, unk, guess)
        assert guess == sorted(guess) and guess[0] == 0 and max(guess) < n
        if "<unk>" not in unk:
            assert guess == owner
