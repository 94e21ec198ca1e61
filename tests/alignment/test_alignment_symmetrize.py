"""Symmetrization: hand-derived examples (atools semantics) and atools' own output on random inputs."""
import os

import pytest

from hmm_nmt_align.base.symmetrize import (
    METHODS,
    grow_diag,
    grow_diag_final,
    grow_diag_final_and,
    intersect,
    symmetrize,
    union,
)

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def L(s):
    """'0-0 1-1' -> [(0, 0), (1, 1)]"""
    return [tuple(map(int, t.split("-"))) for t in s.split()]


def textbook_grow_diag(fwd, rev, n_src, n_tgt):
    """Koehn's published GROW-DIAG pseudo-code (Moses' train-model.perl documentation), for contrast:
    loop over the points *already in* the alignment in (i, j) order and try their neighbours in the order
    left, up, right, down, then the diagonals."""
    neighbours = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
    un, res = set(fwd) | set(rev), set(fwd) & set(rev)
    src, tgt = {i for i, _ in res}, {j for _, j in res}
    added = True
    while added:
        added = False
        for i in range(n_src):
            for j in range(n_tgt):
                if (i, j) in res:
                    for di, dj in neighbours:
                        p = (i + di, j + dj)
                        if p in un and p not in res and (p[0] not in src or p[1] not in tgt):
                            res.add(p), src.add(p[0]), tgt.add(p[1])
                            added = True
    return sorted(res)


def test_intersect_union_sorted():
    fwd, rev = L("2-1 0-0 1-2"), L("1-2 0-1 0-0")
    assert intersect(fwd, rev) == L("0-0 1-2")
    assert union(fwd, rev) == L("0-0 0-1 1-2 2-1")  # (i, j) order, like atools' output


def test_atools_differs_from_textbook_grow_diag():
    # fwd = {1-0, 1-1}, rev = {0-0, 1-1}; intersection {1-1}; union adds 0-0 and 1-0.
    #   atools scans the candidates in (i, j) order:
    #     0-0: source 0 unaligned and its diagonal neighbour 1-1 is in -> added (source 0, target 0 now aligned)
    #     1-0: source 1 and target 0 both aligned now -> rejected
    #   -> {0-0, 1-1}
    #   textbook loops over the alignment points: from 1-1 it tries (0,1) no, (1,0): target 0 still unaligned
    #   -> added; then the diagonal (0,0): source 0 unaligned -> added  -> {0-0, 1-0, 1-1}
    fwd, rev = L("1-0 1-1"), L("0-0 1-1")
    assert grow_diag(fwd, rev) == L("0-0 1-1")
    assert textbook_grow_diag(fwd, rev, 2, 2) == L("0-0 1-0 1-1")
    assert symmetrize(fwd, rev, "grow-diag") != textbook_grow_diag(fwd, rev, 2, 2)


def test_grow_diag_repeats_scans_until_fixed_point():
    # intersection {2-2}; candidates 0-0, 1-1 (in this order).
    #   scan 1: 0-0 has no neighbour in {2-2} -> skipped; 1-1 touches 2-2 -> added
    #   scan 2: 0-0 now touches 1-1 and source 0 is unaligned -> added; scan 3 adds nothing
    fwd, rev = L("0-0 2-2"), L("1-1 2-2")
    assert grow_diag(fwd, rev) == L("0-0 1-1 2-2")


def test_grow_diag_result_grows_during_scan():
    # intersection {0-0}; candidates 0-1, 1-0, 1-1 in that order, all neighbours of 0-0.
    #   0-1: target 1 unaligned -> added;  1-0: source 1 unaligned -> added;
    #   1-1: source 1 and target 1 were aligned by the two points just added -> rejected.
    fwd, rev = L("0-0 0-1 1-1"), L("0-0 1-0")
    assert grow_diag(fwd, rev) == L("0-0 0-1 1-0")
    # the final steps cannot add 1-1 either (both words aligned); final-and neither
    assert grow_diag_final(fwd, rev) == L("0-0 0-1 1-0")
    assert grow_diag_final_and(fwd, rev) == L("0-0 0-1 1-0")


def test_final_versus_final_and():
    # fwd = {0-0, 2-0, 2-1}, rev = {1-1}: the intersection is empty so grow-diag adds nothing.
    #   final (either word unaligned), fwd first in (i, j) order:
    #     0-0 added; 2-0: source 2 unaligned -> added; 2-1: target 1 unaligned -> added;
    #     then rev: 1-1: source 1 unaligned -> added                      -> {0-0, 1-1, 2-0, 2-1}
    #   final-and (both unaligned):
    #     0-0 added; 2-0: target 0 taken -> no; 2-1: both free -> added;
    #     rev 1-1: target 1 taken -> no                                   -> {0-0, 2-1}
    fwd, rev = L("0-0 2-0 2-1"), L("1-1")
    assert grow_diag(fwd, rev) == []
    assert grow_diag_final(fwd, rev) == L("0-0 1-1 2-0 2-1")
    assert grow_diag_final_and(fwd, rev) == L("0-0 2-1")


def test_final_scans_fwd_before_rev():
    # no intersection; fwd = {0-1}, rev = {1-1}.  fwd's 0-1 goes in first; then rev's 1-1 has source 1
    # unaligned (final: added) but target 1 taken (final-and: not added).  Swapping the inputs swaps the
    # roles: final-and then keeps 1-1 instead of 0-1.
    fwd, rev = L("0-1"), L("1-1")
    assert grow_diag_final(fwd, rev) == L("0-1 1-1")
    assert grow_diag_final_and(fwd, rev) == L("0-1")
    assert grow_diag_final_and(rev, fwd) == L("1-1")


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown symmetrization method"):
        symmetrize([], [], "grow")


def test_matches_atools_reference_output():
    """tests/data/atools_reference.tsv: `atools -c METHOD` output (fast_align's refine code compiled from
    utils/atools.cc) for 250 random pairs of alignments, every method, exact string match."""
    methods = ["intersect", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and"]
    n = 0
    with open(os.path.join(DATA, "atools_reference.tsv")) as f:
        for line in f:
            if line.startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            assert len(cols) == 7
            fwd, rev = L(cols[0]), L(cols[1])
            for m, expected in zip(methods, cols[2:]):
                got = " ".join(f"{i}-{j}" for i, j in METHODS[m](fwd, rev))
                assert got == expected, (m, cols[0], cols[1])
            n += 1
    assert n == 250
