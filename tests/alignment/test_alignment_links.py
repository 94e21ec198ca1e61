"""Link decisions, soft symmetrization and <unk>-safe word mapping, on hand-worked cases (no model)."""
import random

import numpy as np
import pytest

from hmm_nmt_align.base.links import decide, parse_decision, soft_combine
from hmm_nmt_align.base.subword import subword_to_word_links, word_index
from hmm_nmt_align.base.symmetrize import symmetrize
from hmm_nmt_align.extract import LinkOptions, argmax_links, sentence_word_links

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
    # a hard heuristic on word links equals hmm_nmt_align.base.symmetrize of the two directions
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


# ------------------------------------------------------------------------------------ pooling to words
# "il a écrit" / "he has wri@@ t@@ ten": source words he, has, written (3 pieces); target pieces
# il, écr@@, it (target words il, écrit); rows need not sum to 1 (the rest is the EOS column's mass)
POOL_SRC, POOL_TGT = [0, 1, 2, 2, 2], [0, 1, 1]
POOL_M = np.array([[0.80, 0.05, 0.05, 0.05, 0.00],
                   [0.10, 0.10, 0.30, 0.20, 0.20],   # écr@@: 0.3 + 0.2 + 0.2 = 0.7 inside "written"
                   [0.05, 0.05, 0.50, 0.20, 0.10]])  # it: 0.8 inside "written"


def _with_eos(m, rng=None):
    """The matrix as extraction gives it: an EOS column (the row's remaining mass) and an EOS row."""
    n_tgt, n_src = m.shape
    out = np.zeros((n_tgt + 1, n_src + 1))
    out[:n_tgt, :n_src] = m
    out[:n_tgt, n_src] = 1 - m.sum(1)
    out[n_tgt] = rng.dirichlet(np.ones(n_src + 1)) if rng is not None else 1.0 / (n_src + 1)
    return out


def test_pool_words_by_hand():
    from hmm_nmt_align.base.links import pool_words

    w = pool_words(POOL_M, POOL_SRC, POOL_TGT)
    # target word 0 (one piece): its row summed per source word; word 1 (two pieces): the mean of
    # (0.1, 0.1, 0.7) and (0.05, 0.05, 0.8)
    np.testing.assert_allclose(w, [[0.80, 0.05, 0.10], [0.075, 0.075, 0.75]])
    # threshold:0.5 on the pieces misses écr@@ -> written (no piece above 0.5; "it" has 0.5, not > 0.5)
    pieces = sentence_word_links(_with_eos(POOL_M), POOL_SRC, POOL_TGT, LinkOptions("threshold", 0.5))
    assert pieces == [(0, 0)]
    words = sentence_word_links(_with_eos(POOL_M), POOL_SRC, POOL_TGT, LinkOptions("threshold", 0.5, pool="words"))
    assert words == [(0, 0), (2, 1)]
    # a single target piece: 0.3 + 0.2 + 0.2 passes 0.5 only when pooled
    one = POOL_M[1:2]
    assert sentence_word_links(_with_eos(one), POOL_SRC, [0], LinkOptions("threshold", 0.5)) == []
    assert sentence_word_links(_with_eos(one), POOL_SRC, [0], LinkOptions("threshold", 0.5, pool="words")) == [(2, 0)]
    # the mean over target pieces, not the sum: a word of two pieces each 0.4 inside a word stays at 0.4
    two = np.array([[0.4, 0.1], [0.4, 0.1]])
    np.testing.assert_allclose(pool_words(two, [0, 1], [0, 0]), [[0.4, 0.1]])
    # owners must cover the matrix; empty sentences give empty matrices
    with pytest.raises(ValueError, match="source owner has 4 entries"):
        pool_words(POOL_M, POOL_SRC[:4], POOL_TGT)
    assert pool_words(np.zeros((0, 0)), [], []).shape == (0, 0)


def test_pooled_rows_keep_the_real_source_mass():
    """Each pooled row sums to the mean, over the target word's pieces, of their mass on the real source
    (at most 1: the EOS column's mass is left out), for random posteriors and segmentations."""
    from hmm_nmt_align.base.links import pool_words

    rng = np.random.default_rng(3)
    for _ in range(200):
        src_owner, tgt_owner = _owners(rng), _owners(rng)
        full = rng.dirichlet(np.ones(len(src_owner) + 1), size=len(tgt_owner))  # last column: the EOS
        m = full[:, :-1]
        w = pool_words(m, src_owner, tgt_owner)
        assert w.shape == (max(tgt_owner) + 1, max(src_owner) + 1)
        expect = [m[np.asarray(tgt_owner) == iw].sum(1).mean() for iw in range(w.shape[0])]
        np.testing.assert_allclose(w.sum(1), expect)
        assert (w.sum(1) <= 1 + 1e-12).all() and (w >= 0).all()


def _owners(rng, max_words=5):
    """A random piece->word map: 1-5 words of 1-3 pieces each."""
    return [w for w in range(int(rng.integers(1, max_words + 1))) for _ in range(int(rng.integers(1, 4)))]


ALL_SYMS = (None, "prod", "mean", "intersect", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
ALL_DECISIONS = (("argmax", 0.0), ("mutual", 0.0), ("union", 0.0), ("threshold", 0.2), ("threshold", 0.45))


def _random_pair(rng):
    src_owner, tgt_owner = _owners(rng), _owners(rng)
    n_src, n_tgt = len(src_owner), len(tgt_owner)
    fwd = rng.dirichlet(np.ones(n_src + 1), size=n_tgt + 1)  # EOS row and column included
    rev = rng.dirichlet(np.ones(n_tgt + 1), size=n_src + 1)
    return fwd, rev, src_owner, tgt_owner


def _pieces_reference(fwd, rev, src_owner, tgt_owner, decision, t, sym, null_eos=False):
    """Today's piece-level links, spelt out: decide on the pieces, a word pair linked when any piece pair is."""
    def to_words(links):
        return sorted({(src_owner[j], tgt_owner[i]) for j, i in links})

    def one(m):
        if decision == "argmax":
            return argmax_links(m, True, True, null_eos)
        return decide(m[:-1, :-1], decision, t)

    n_src, n_tgt = len(src_owner), len(tgt_owner)
    if sym is None:
        return to_words(one(fwd))
    if sym in ("prod", "mean"):
        return to_words(decide(soft_combine(fwd[:n_tgt, :n_src], rev[:n_src, :n_tgt], sym), decision, t))
    return symmetrize(to_words(one(fwd)), to_words([(j, i) for i, j in one(rev)]), sym)


def test_pool_pieces_is_todays_behaviour():
    """pool="pieces" (the default) gives exactly the piece-level links of before, on random matrices and
    segmentations, for every decision, symmetrization and null_eos."""
    rng = np.random.default_rng(11)
    for _ in range(150):
        fwd, rev, so, to = _random_pair(rng)
        for decision, t in ALL_DECISIONS:
            for sym in ALL_SYMS:
                for null_eos in ((False, True) if decision == "argmax" and sym not in ("prod", "mean") else (False,)):
                    r = None if sym is None else rev
                    want = _pieces_reference(fwd, rev, so, to, decision, t, sym, null_eos)
                    assert sentence_word_links(fwd, so, to, LinkOptions(decision, t, null_eos, sym), r) == want
                    assert sentence_word_links(fwd, so, to, LinkOptions(decision, t, null_eos, sym, "pieces"),
                                               r) == want


def test_pool_words_with_one_piece_per_word_changes_nothing():
    """Identity owners (every piece a word): the pooled word matrix is the piece matrix, so pool="words"
    gives the pieces' links for every decision and symmetrization."""
    rng = np.random.default_rng(5)
    for _ in range(150):
        n_src, n_tgt = (int(x) for x in rng.integers(1, 8, size=2))
        so, to = list(range(n_src)), list(range(n_tgt))
        fwd = rng.dirichlet(np.ones(n_src + 1), size=n_tgt + 1)
        rev = rng.dirichlet(np.ones(n_tgt + 1), size=n_src + 1)
        if rng.random() < 0.3:  # ties: argmax takes the leftmost either way
            fwd[:n_tgt, :n_src] = np.round(fwd[:n_tgt, :n_src], 1)
        for decision, t in ALL_DECISIONS:
            for sym in ALL_SYMS:
                r = None if sym is None else rev
                assert sentence_word_links(fwd, so, to, LinkOptions(decision, t, False, sym, "words"), r) == \
                    sentence_word_links(fwd, so, to, LinkOptions(decision, t, False, sym), r), (decision, sym)


def test_pool_words_decides_on_words_in_both_directions():
    """With two directions the reverse matrix is pooled with the roles swapped, then merged at word level."""
    from hmm_nmt_align.base.links import pool_words

    rng = np.random.default_rng(2)
    for _ in range(100):
        fwd, rev, so, to = _random_pair(rng)
        wf = pool_words(fwd[:len(to), :len(so)], so, to)
        wr = pool_words(rev[:len(so), :len(to)], to, so)
        for decision, t in ALL_DECISIONS:
            got = lambda sym: sentence_word_links(fwd, so, to, LinkOptions(decision, t, False, sym, "words"),  # noqa: E731
                                                  None if sym is None else rev)
            assert got(None) == decide(wf, decision, t)
            assert got("mean") == decide(0.5 * (wf + wr.T), decision, t)
            assert got("prod") == decide(wf * wr.T, decision, t)
            assert got("grow-diag") == symmetrize(decide(wf, decision, t),
                                                  [(j, i) for i, j in decide(wr, decision, t)], "grow-diag")


def test_pool_options_are_checked():
    with pytest.raises(ValueError, match="null_eos does not apply to pool='words'"):
        LinkOptions(null_eos=True, pool="words")
    with pytest.raises(ValueError, match="unknown pool 'chars'"):
        LinkOptions(pool="chars")
    opts = LinkOptions(pool="words")
    opts.null_eos = True  # set after construction: still refused when used
    with pytest.raises(ValueError, match="null_eos does not apply"):
        sentence_word_links(_with_eos(POOL_M), POOL_SRC, POOL_TGT, opts)


def test_cli_pool_flag_reaches_link_options(tmp_path, capsys):
    from hmm_nmt_align.extract import _check_args, build_parser, main

    base = ["--path", str(tmp_path / "m.pt"), "--data", str(tmp_path), "--method", "posterior"]
    _, opts = _check_args(build_parser().parse_args(base))
    assert opts.pool == "pieces"
    _, opts = _check_args(build_parser().parse_args(base + ["--pool", "words", "--links", "threshold:0.4"]))
    assert (opts.pool, opts.decision, opts.threshold) == ("words", "threshold", 0.4)
    assert main(base + ["--pool", "words", "--null-eos", "-o", str(tmp_path / "x.align")]) == 2
    err = capsys.readouterr().err
    assert "hmm-nmt-align: error: --null-eos does not apply to --pool words" in err
    assert not (tmp_path / "x.align").exists()
    with pytest.raises(SystemExit):
        build_parser().parse_args(base + ["--pool", "chars"])
    assert "--pool" in build_parser().format_help() and "pieces (default)" in build_parser().format_help()


def test_hub_options_take_pool():
    from hmm_nmt.aligner.hub import AlignmentHubInterface

    opts = AlignmentHubInterface._options(None, "threshold:0.3", None, None, False, "words")
    assert (opts.pool, opts.decision, opts.threshold) == ("words", "threshold", 0.3)
    assert AlignmentHubInterface._options(None, "argmax", None, None).pool == "pieces"
    with pytest.raises(ValueError, match="null_eos does not apply"):
        AlignmentHubInterface._options(None, "argmax", None, None, True, "words")


# ------------------------------------------------------------- the variant table (benchmarks.align_variants)
def test_align_variants_scores_both_pools_and_reads_old_rows():
    from benchmarks.align_variants import variants

    grid = list(variants(["posterior"], [0.3]))
    per_pool = 2 * 4 + 5 + 2 * 4
    assert len(grid) == 2 * per_pool
    assert [v[5] for v in grid] == ["pieces"] * per_pool + ["words"] * per_pool
    assert [v[:5] for v in grid[:per_pool]] == [v[:5] for v in grid[per_pool:]]
    # --rows: a row of an older file (no pool) is read off the pieces; a pool given is kept
    old = {"method": "posterior", "direction": "both", "symmetrize": "mean", "links": "threshold:0.4",
           "choice": "soft", "dev_AER": 12.5}
    assert list(variants(None, [], [old, dict(old, pool="words", choice="best")])) == [
        ("posterior", "both", "mean", "threshold", 0.4, "pieces", "soft", 12.5),
        ("posterior", "both", "mean", "threshold", 0.4, "words", "best", 12.5)]


def test_choose_picks_over_both_pools_and_keeps_fixed_rows_on_pieces():
    from benchmarks.align_variants import choose

    def row(direction, sym, links, pool, aer):
        return {"method": "posterior", "direction": direction, "symmetrize": sym, "links": links, "pool": pool,
                "AER": aer, "P": 0.0, "R": 0.0}

    rows = [row("fwd", "-", "argmax", "pieces", 30.0), row("fwd", "-", "argmax", "words", 29.0),
            row("both", "grow-diag-final-and", "argmax", "pieces", 25.0),
            row("both", "grow-diag-final-and", "argmax", "words", 26.0),
            row("both", "mean", "threshold:0.4", "pieces", 24.0), row("both", "mean", "threshold:0.4", "words", 20.0)]
    got = {(c["choice"], c["pool"]): c for c in choose(rows)}
    assert got[("best", "words")]["symmetrize"] == "mean" and got[("best", "words")]["dev_AER"] == 20.0
    assert got[("one direction", "words")]["dev_AER"] == 29.0
    assert got[("atools", "pieces")]["dev_AER"] == 25.0 and got[("soft", "words")]["dev_AER"] == 20.0
    fixed = [c for c in choose(rows) if c["choice"] == "fixed"]
    assert {(c["direction"], c["symmetrize"], c["pool"]) for c in fixed} == {
        ("fwd", "-", "pieces"), ("both", "grow-diag-final-and", "pieces")}
    # an older file's rows (no pool) are pieces rows
    old = [{k: v for k, v in r.items() if k != "pool"} for r in rows if r["pool"] == "pieces"]
    assert {c["pool"] for c in choose(old)} == {"pieces"} and len(choose(old)) == 4 + 2


def test_hansards_table_shows_word_pooled_variants(tmp_path, capsys):
    import importlib.util
    import json
    import os

    spec = importlib.util.spec_from_file_location(
        "hansards_table", os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hansards", "table.py"))
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    (tmp_path / "align").mkdir()
    rows = [{"method": "posterior", "direction": "both", "symmetrize": "mean", "links": "threshold:0.4",
             "pool": "words", "AER": 18.0, "P": 80.0, "R": 85.0, "choice": "best", "dev_AER": 17.0},
            {"method": "posterior", "direction": "both", "symmetrize": "mean", "links": "threshold:0.4",
             "pool": "pieces", "AER": 19.0, "P": 80.0, "R": 82.0, "choice": "soft", "dev_AER": 17.5},
            {"method": "posterior", "direction": "fwd", "symmetrize": "-", "links": "argmax",  # an older row
             "AER": 30.0, "P": 70.0, "R": 70.0, "choice": "fixed", "dev_AER": 31.0}]
    (tmp_path / "align" / "dhmm1.test.json").write_text(json.dumps(rows))
    assert table.main(["--work", str(tmp_path), "--models", "dhmm1"]) == 0
    out = capsys.readouterr().out
    assert "| posterior | both `mean`, `threshold:0.4`, word-pooled | best | 17.00 | 18.00 |" in out
    assert "| posterior | both `mean`, `threshold:0.4` | soft | 17.50 | 19.00 |" in out
    assert "| posterior | en->fr, `argmax` | fixed | 31.00 | 30.00 |" in out


def test_hansards_table_names_the_trial_chosen_adaptation(tmp_path, capsys):
    import importlib.util
    import json
    import os

    spec = importlib.util.spec_from_file_location(
        "hansards_table", os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hansards", "table.py"))
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    (tmp_path / "align").mkdir()

    def rows(dev, test):  # the posterior's best row, then a worse alignment-distribution best row
        return [{"method": method, "direction": "both", "symmetrize": "mean", "links": "threshold:0.5",
                 "pool": "pieces", "AER": test + extra, "P": 90.0, "R": 85.0, "choice": "best", "dev_AER": dev + extra}
                for method, extra in (("posterior", 0.0), ("alignment", 30.0 - dev))]

    for m, dev, test in (("dhmm1", 10.0, 9.9), ("dhmm1+a60", 7.5, 9.2), ("dhmm1+a240", 8.0, 8.0),
                         ("dhmm0", 20.0, 19.0), ("dhmm0+a60", 20.0, 18.0)):
        (tmp_path / "align" / f"{m}.test.json").write_text(json.dumps(rows(dev, test)))
    assert table.main(["--work", str(tmp_path), "--models", "dhmm0,dhmm1,dhmm0+a60,dhmm1+a60,dhmm1+a240"]) == 0
    out = capsys.readouterr().out
    assert "| transformer_dhmm, first order, adapted (60 updates on the text to align) | posterior |" in out
    # chosen on trial (7.5), not on test (8.0 at 240); a tie keeps the unadapted model
    assert "* transformer_dhmm, first order: 60 updates (trial AER of the best variant 7.50; 0: 10.00, 60: 7.50, " \
           "240: 8.00)" in out
    assert "* transformer_dhmm, zero order: none (trial AER of the best variant 20.00; 0: 20.00, 60: 20.00)" in out


def test_link_scores_are_the_values_the_decision_was_read_from():
    from hmm_nmt_align.base.links import link_scores, pool_words, soft_combine

    rng = np.random.default_rng(0)
    fwd = rng.dirichlet(np.ones(4), size=3)  # 3 target pieces x 4 source pieces
    rev = rng.dirichlet(np.ones(3), size=4)
    so, to = [0, 0, 1, 2], [0, 1, 1]  # source word 0 has two pieces, target word 1 has two
    for sym in ("prod", "mean"):
        opts = LinkOptions("threshold", 0.05, False, sym, "words")
        links = sentence_word_links(fwd, so, to, opts, rev, eos_s=False, eos_t=False)
        want = soft_combine(pool_words(fwd, so, to), pool_words(rev, to, so), sym)
        assert links and link_scores(links, fwd, so, to, opts, rev) == pytest.approx([want[t, s] for s, t in links])
        assert all(want[t, s] > 0.05 for s, t in links)
    # an atools merge: the mean of both directions (a link may have one direction's support only)
    opts = LinkOptions("argmax", 0.0, False, "grow-diag-final-and", "words")
    links = sentence_word_links(fwd, so, to, opts, rev, eos_s=False, eos_t=False)
    mean = 0.5 * (pool_words(fwd, so, to) + pool_words(rev, to, so).T)
    assert link_scores(links, fwd, so, to, opts, rev) == pytest.approx([mean[t, s] for s, t in links])
    # pieces: the largest piece pair of the word pair; one direction alone: its own posterior
    opts = LinkOptions("threshold", 0.1, False, None, "pieces")
    links = sentence_word_links(fwd, so, to, opts, None, eos_s=False, eos_t=False)
    best = {(s, t): max(fwd[i, j] for i in range(3) for j in range(4) if so[j] == s and to[i] == t) for s, t in links}
    assert links and link_scores(links, fwd, so, to, opts) == pytest.approx([best[k] for k in links])


@pytest.mark.parametrize("pool", ["words", "pieces"])
@pytest.mark.parametrize("sym", [None, "prod", "mean", "grow-diag-final-and"])
def test_scored_word_links_are_the_links_with_their_link_scores(pool, sym):
    """The one-pass form under ``--scores`` gives the same links as without scores, and link_scores' values."""
    from hmm_nmt_align.base.links import link_scores, scored_word_links

    rng = np.random.default_rng(1)
    fwd, rev = rng.dirichlet(np.ones(5), size=4), rng.dirichlet(np.ones(4), size=5)
    so, to = [0, 0, 1, 2, 2], [0, 1, 1, 2]
    for decision in ("argmax", "threshold"):
        opts = LinkOptions(decision, 0.1, False, sym, pool)
        r = None if sym is None else rev
        links = sentence_word_links(fwd, so, to, opts, r, eos_s=False, eos_t=False)
        scored = scored_word_links(fwd, so, to, opts, r, eos_s=False, eos_t=False)
        assert links and [(s, t) for s, t, _ in scored] == links
        assert [p for _, _, p in scored] == pytest.approx(link_scores(links, fwd, so, to, opts, r))
