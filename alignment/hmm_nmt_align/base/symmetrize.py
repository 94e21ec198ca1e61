"""Symmetrization of two directional word alignments, exactly as fast_align's ``atools -c``.

Inputs are both written as (source, target) pairs: ``fwd`` from the source-to-target model (each
target word has at most one link), ``rev`` from the target-to-source model already turned into
source-target pairs (``atools -i FWD -j REV``).  Outputs are sorted by (i, j), which is the order in
which atools prints them.

Methods (Koehn et al. 2005 names; atools semantics, which are not those of the textbook pseudo-code):

``intersect`` / ``union``
    fwd ∩ rev, fwd ∪ rev.
``grow-diag``
    Start from the intersection.  Scan the points of the union that are not in the result in (i, j)
    order and add a point when its source word i or its target word j is still unaligned *and* one
    of its 8 neighbours (horizontal, vertical, diagonal) is already in the result.  The result grows
    *while* scanning, so a point added early in a scan can license a later point of the same scan.
    Points added are removed from the candidate list and the scan is repeated until a whole scan adds
    nothing.  (The textbook version instead loops over the points already in the alignment and tries
    their neighbours in a fixed neighbour order; the two can add different points.)
``grow-diag-final``
    grow-diag, then scan fwd's links in (i, j) order and add each one whose source or target word is
    unaligned (updated as links are added), then the same for rev.
``grow-diag-final-and``
    as grow-diag-final, but a link is added only when both its source and its target word are
    unaligned.

The functions take any iterable of ``(i, j)`` pairs and return a sorted list.
"""
from typing import Callable, Dict, Iterable, List, Set, Tuple

Link = Tuple[int, int]

__all__ = ["METHODS", "symmetrize", "intersect", "union", "grow_diag", "grow_diag_final", "grow_diag_final_and"]

# all 8 neighbours; atools tries them in this order, which does not matter for a yes/no test
_NEIGHBOURS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))


def intersect(fwd: Iterable[Link], rev: Iterable[Link]) -> List[Link]:
    return sorted(set(fwd) & set(rev))


def union(fwd: Iterable[Link], rev: Iterable[Link]) -> List[Link]:
    return sorted(set(fwd) | set(rev))


class _Grid:
    """The growing result with its aligned-word bookkeeping (atools' res_, is_i_aligned_, is_j_aligned_)."""

    def __init__(self, links: Iterable[Link]):
        self.res: Set[Link] = set()
        self.src: Set[int] = set()
        self.tgt: Set[int] = set()
        for p in links:
            self.add(p)

    def add(self, p: Link) -> None:
        self.res.add(p)
        self.src.add(p[0])
        self.tgt.add(p[1])

    def one_or_both_unaligned(self, p: Link) -> bool:
        return p[0] not in self.src or p[1] not in self.tgt

    def neither_aligned(self, p: Link) -> bool:
        return p[0] not in self.src and p[1] not in self.tgt

    def neighbour_aligned(self, p: Link) -> bool:
        i, j = p
        return any((i + di, j + dj) in self.res for di, dj in _NEIGHBOURS)

    def grow(self, candidates: Iterable[Link]) -> None:
        """atools Grow(KoehnAligned, idempotent=false): repeated ordered scans until a fixed point."""
        pending = sorted(set(candidates) - self.res)
        while pending:
            added = set()
            for p in pending:  # the result grows during the scan
                if self.one_or_both_unaligned(p) and self.neighbour_aligned(p):
                    self.add(p)
                    added.add(p)
            if not added:
                break
            pending = [p for p in pending if p not in added]

    def final(self, links: Iterable[Link], pred: Callable[[Link], bool]) -> None:
        """atools Grow(pred, idempotent=true): one scan in (i, j) order."""
        for p in sorted(set(links)):
            if p not in self.res and pred(p):
                self.add(p)


def grow_diag(fwd: Iterable[Link], rev: Iterable[Link]) -> List[Link]:
    fwd, rev = set(fwd), set(rev)
    g = _Grid(fwd & rev)
    g.grow(fwd | rev)
    return sorted(g.res)


def _grow_diag_final(fwd, rev, both: bool) -> List[Link]:
    fwd, rev = set(fwd), set(rev)
    g = _Grid(fwd & rev)
    g.grow(fwd | rev)
    pred = g.neither_aligned if both else g.one_or_both_unaligned
    g.final(fwd, pred)
    g.final(rev, pred)
    return sorted(g.res)


def grow_diag_final(fwd: Iterable[Link], rev: Iterable[Link]) -> List[Link]:
    return _grow_diag_final(fwd, rev, both=False)


def grow_diag_final_and(fwd: Iterable[Link], rev: Iterable[Link]) -> List[Link]:
    return _grow_diag_final(fwd, rev, both=True)


METHODS: Dict[str, Callable[[Iterable[Link], Iterable[Link]], List[Link]]] = {
    "intersect": intersect,
    "union": union,
    "grow-diag": grow_diag,
    "grow-diag-final": grow_diag_final,
    "grow-diag-final-and": grow_diag_final_and,
}


def symmetrize(fwd: Iterable[Link], rev: Iterable[Link], method: str = "grow-diag") -> List[Link]:
    """Merge ``fwd`` (source-to-target) and ``rev`` (target-to-source, as source-target pairs)."""
    try:
        fn = METHODS[method]
    except KeyError:
        raise ValueError(f"unknown symmetrization method {method!r}; expected one of {', '.join(METHODS)}") from None
    return fn(fwd, rev)
