"""Link decisions on target-by-source matrices, and soft symmetrization of two directions (numpy only).

Every function takes matrices cut to the *real* tokens (no EOS row or column): ``m[i, j]`` scores target
token i against source token j, e.g. the posterior p(b_i = j | E, F) of a direct HMM (whose row may leave
some mass on the source EOS: a row need not sum to 1 here).  Links are returned as sorted
``(j source, i target)`` pairs, the Pharaoh order.

Decisions (``--links`` of ``hmm-nmt-align``):

``argmax``       each target token links its best source token (one link per target token; ties: the
                 leftmost), the usual HMM/attention extraction.
``mutual``       (j, i) where j is the best source of i *and* i the best target of j (intersection).
``union``        (j, i) where j is the best source of i *or* i the best target of j.
``threshold:T``  every (j, i) with m[i, j] > T: many-to-many, and a token may stay unaligned; on a
                 posterior, T = 0.5 keeps only links the model is more sure of than of all others together.

Soft symmetrization (``--symmetrize prod|mean`` with ``--rev-path``): the forward model's posterior
p_f(b_i = j | E, F) (I x J) and the reverse model's p_r(a_j = i | F, E) (J x I, transposed to I x J) are
combined into one matrix *before* the decision, instead of merging two sets of hard links afterwards
(the atools heuristics of :mod:`hmm_nmt_align.base.symmetrize`):

``prod``  m = p_f * p_r^T       a link needs both directions' support (a soft intersection)
``mean``  m = (p_f + p_r^T) / 2  either direction can carry it (a soft union)

With ``prod``, ``threshold:T`` keeps p_f p_r > T, so T = 0.25 corresponds to 0.5 in each direction.

Sentence level (:func:`sentence_word_links`, under ``hmm-nmt-align`` and the hub's ``align``): the word links
of one sentence pair from one direction's matrix, or two directions' merged as :class:`LinkOptions` says;
there the matrices may still hold the EOS row and column, which :func:`argmax_links` treats as fairseq does.

Pieces or words (``--pool``, :attr:`LinkOptions.pool`): by default (``pieces``) every decision and soft merge
is taken on the *piece* matrix and the piece links are mapped to words ("two words are linked when any of
their pieces are").  With ``words``, each direction's piece matrix is first pooled into a word matrix by
:func:`pool_words`, and the decision, soft merge or atools heuristic is taken on the words::

    W[iw, jw] = mean over the pieces i of target word iw of  sum over the pieces j of source word jw of m[i, j]

The sum over source pieces is, for a posterior, the probability of the event "target piece i aligns inside
source word jw" (the pieces of a word are disjoint events: 0.3 + 0.2 + 0.2 over ``w@@ ri@@ t@@ ten`` is 0.7,
which passes ``threshold:0.5`` where no single piece does).  The mean over target pieces counts each piece of
target word iw as one observation of where that word aligns, so a word row is a distribution of the same
kind as a piece row (it sums to at most 1; the mass on the source EOS is left out).  The EOS column being
gone, ``argmax`` is taken over the real source words and ``null_eos`` does not apply.

Scores (:func:`link_scores`, ``--scores`` of ``hmm-nmt-align-corpus``): the confidence of each word link is the
value of the matrix its decision was taken on: the (pooled) posterior of one direction, the ``prod``/``mean``
combination of both, or, for an atools heuristic (a link may come from one direction alone), the mean of the two
directions' posteriors; with ``pieces``, the largest over the link's piece pairs.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from hmm_nmt_align.base.symmetrize import symmetrize

Link = Tuple[int, int]

__all__ = ["DECISIONS", "METHODS", "SOFT", "POOLS", "parse_decision", "decide", "soft_combine", "pool_words", "argmax_links",
           "LinkOptions", "sentence_word_links", "scored_word_links", "link_scores"]

DECISIONS = ("argmax", "mutual", "union", "threshold")
SOFT = ("prod", "mean")
# the matrices a checkpoint gives (hmm_nmt.aligner.matrices computes them; here so that a command line can check
# --method before importing the model layer)
METHODS = ("alignment", "posterior", "attention")
POOLS = ("pieces", "words")


def parse_decision(text: str) -> Tuple[str, float]:
    """``"argmax"`` -> ("argmax", 0.0); ``"threshold:0.4"`` -> ("threshold", 0.4); ValueError otherwise."""
    name, _, value = text.partition(":")
    if name not in DECISIONS:
        raise ValueError(f"unknown link decision {text!r}; expected argmax, mutual, union or threshold:T")
    if name != "threshold":
        if value:
            raise ValueError(f"{name} takes no value, got {text!r}")
        return name, 0.0
    try:
        t = float(value)
    except ValueError:
        raise ValueError(f"threshold needs a number, as in threshold:0.5, got {text!r}") from None
    if not 0.0 <= t < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {t}")
    return name, t


def decide(matrix: np.ndarray, decision: str = "argmax", threshold: float = 0.0) -> List[Link]:
    """Links ``(j, i)`` of an (I, J) matrix of real tokens under ``decision`` (see the module docstring)."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"expected an (I, J) matrix, got shape {m.shape}")
    n_tgt, n_src = m.shape
    if n_tgt == 0 or n_src == 0:
        return []
    if decision == "threshold":
        i, j = np.nonzero(m > threshold)
        return sorted(zip(j.tolist(), i.tolist()))
    row = {(int(j), i) for i, j in enumerate(m.argmax(axis=1))}
    if decision == "argmax":
        return sorted(row)
    col = {(j, int(i)) for j, i in enumerate(m.argmax(axis=0))}
    if decision == "mutual":
        return sorted(row & col)
    if decision == "union":
        return sorted(row | col)
    raise ValueError(f"unknown link decision {decision!r}")


def soft_combine(fwd: np.ndarray, rev: np.ndarray, op: str) -> np.ndarray:
    """(I, J) combination of the forward posterior ``fwd`` (I, J) and the reverse one ``rev`` (J, I)."""
    fwd, rev = np.asarray(fwd, dtype=np.float64), np.asarray(rev, dtype=np.float64)
    if rev.T.shape != fwd.shape:
        raise ValueError(f"forward matrix {fwd.shape} (target x source) and reverse matrix {rev.shape} "
                         "(source x target) do not describe the same sentence pair")
    if op == "prod":
        return fwd * rev.T
    if op == "mean":
        return 0.5 * (fwd + rev.T)
    raise ValueError(f"unknown soft symmetrization {op!r}; expected one of {', '.join(SOFT)}")


def _owner_matrix(owner: Sequence[int], n_pieces: int, side: str) -> np.ndarray:
    """(pieces, words) 0/1 matrix of a piece->word map (words numbered 0..max, a word may own no piece)."""
    own = np.asarray(owner, dtype=np.int64).reshape(-1)
    if len(own) != n_pieces:
        raise ValueError(f"{side} owner has {len(own)} entries for {n_pieces} {side} pieces of the matrix")
    if len(own) and own.min() < 0:
        raise ValueError(f"{side} owner has a negative word index")
    n_words = int(own.max()) + 1 if len(own) else 0
    one_hot = np.zeros((n_pieces, n_words))
    one_hot[np.arange(n_pieces), own] = 1.0
    return one_hot


def pool_words(matrix: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int]) -> np.ndarray:
    """(target words, source words) matrix of an (I, J) piece matrix of real tokens (no EOS row or column).

    ``tgt_owner[i]``/``src_owner[j]`` is the word of target piece i / source piece j.  ``W[iw, jw]`` is the
    mean over the pieces of target word iw of the sum of ``m[i, j]`` over the pieces of source word jw
    (the module docstring says why).  For the reverse direction's (J, I) matrix swap the owners.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2:
        raise ValueError(f"expected an (I, J) matrix, got shape {m.shape}")
    src = _owner_matrix(src_owner, m.shape[1], "source")
    tgt = _owner_matrix(tgt_owner, m.shape[0], "target")
    count = tgt.sum(axis=0)
    tgt_mean = tgt / np.where(count > 0, count, 1.0)  # a word without pieces keeps a zero row
    return tgt_mean.T @ m @ src


# ----------------------------------------------------------------------------------------- sentences
def argmax_links(matrix: np.ndarray, src_eos: bool = True, tgt_eos: bool = True,
                 null_eos: bool = False) -> List[Tuple[int, int]]:
    """Piece-level links (source j, target i): the argmax source of every target row.

    With ``tgt_eos`` the last row (the target EOS) is dropped. With ``src_eos`` the last column (the source
    EOS) is not a link target: by default the argmax is taken over the other columns, so every target
    token is linked (fairseq's ``extract_hard_alignment`` convention, as in ``--print-alignment``); with
    ``null_eos`` a row whose argmax is the EOS column gets no link (EOS acting as the empty word).
    """
    matrix = np.asarray(matrix)
    n_rows, n_cols = matrix.shape
    rows = n_rows - 1 if tgt_eos else n_rows
    if rows <= 0 or n_cols - int(src_eos) <= 0:
        return []
    if src_eos and not null_eos:
        matrix = matrix[:, :-1]
    best = matrix.argmax(axis=1)  # ties: the first (leftmost) position, like torch.max
    return [(int(best[i]), i) for i in range(rows) if not (src_eos and best[i] == n_cols - 1)]


@dataclass
class LinkOptions:
    """How links are read off the matrices (the decisions above).

    ``decision``/``threshold``: ``argmax`` (default), ``mutual``, ``union`` or ``threshold`` with its T;
    ``null_eos``: argmax only, a target token whose argmax is the source EOS stays unaligned;
    ``symmetrize`` (with a reverse model): ``prod``/``mean`` (soft, before the decision) or an atools
    heuristic of :mod:`hmm_nmt_align.base.symmetrize` (after the decision, on word links);
    ``pool``: ``pieces`` (default: decide on the piece matrices, a word pair is linked when any of its piece
    pairs is) or ``words`` (pool each direction's matrix to words with :func:`pool_words` first, then decide;
    not with ``null_eos``).
    """

    decision: str = "argmax"
    threshold: float = 0.0
    null_eos: bool = False
    symmetrize: Optional[str] = None
    pool: str = "pieces"

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """ValueError for a ``pool`` that is not one of :data:`POOLS`, or ``pool="words"`` with ``null_eos``."""
        if self.pool not in POOLS:
            raise ValueError(f"unknown pool {self.pool!r}; expected one of {', '.join(POOLS)}")
        if self.pool == "words" and self.null_eos:
            raise ValueError("null_eos does not apply to pool='words': the pooled word matrix has no EOS column "
                             "(its argmax is over the real source words)")


def _directional(m: np.ndarray, opts: LinkOptions, eos_s: bool = True, eos_t: bool = True) -> List[Tuple[int, int]]:
    """Piece links (j, i) of one direction's (I [+ EOS], J [+ EOS]) matrix."""
    if opts.decision == "argmax":
        return argmax_links(m, eos_s, eos_t, opts.null_eos)
    return decide(m[: m.shape[0] - int(eos_t), : m.shape[1] - int(eos_s)], opts.decision, opts.threshold)


def sentence_word_links(fwd: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int], opts: LinkOptions,
                        rev: Optional[np.ndarray] = None, eos_s: bool = True,
                        eos_t: bool = True) -> List[Tuple[int, int]]:
    """Word links (i source word, j target word) of one sentence pair.

    ``fwd`` (I [+ EOS], J [+ EOS]) is the source-to-target model's matrix, ``rev`` (J [+ EOS], I [+ EOS]) the
    target-to-source model's on the same pieces; ``src_owner[j]``/``tgt_owner[i]`` is the word of piece j/i.
    With ``opts.pool == "words"`` the decisions are taken on the pooled word matrices (:func:`pool_words`).
    """
    def to_words(links):
        return sorted({(src_owner[j], tgt_owner[i]) for j, i in links})

    opts.check()
    if opts.pool == "words":
        return _pooled_word_links(fwd, src_owner, tgt_owner, opts, rev)
    if rev is None:
        return to_words(_directional(fwd, opts, eos_s, eos_t))
    n_src, n_tgt = len(src_owner), len(tgt_owner)
    if opts.symmetrize in SOFT:
        combined = soft_combine(fwd[:n_tgt, :n_src], rev[:n_src, :n_tgt], opts.symmetrize)
        return to_words(decide(combined, opts.decision, opts.threshold))
    f = to_words(_directional(fwd, opts, eos_s, eos_t))
    r = to_words([(j, i) for i, j in _directional(rev, opts, eos_t, eos_s)])
    return symmetrize(f, r, opts.symmetrize)


def _pooled(fwd: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int],
            rev: Optional[np.ndarray]) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Both directions' word matrices (:func:`pool_words`), the EOS row and column cut off."""
    n_src, n_tgt = len(src_owner), len(tgt_owner)
    f = pool_words(np.asarray(fwd)[:n_tgt, :n_src], src_owner, tgt_owner)
    return f, None if rev is None else pool_words(np.asarray(rev)[:n_src, :n_tgt], tgt_owner, src_owner)


def _decide_pooled(f: np.ndarray, r: Optional[np.ndarray], opts: LinkOptions) -> List[Tuple[int, int]]:
    if r is None:
        return decide(f, opts.decision, opts.threshold)
    if opts.symmetrize in SOFT:
        return decide(soft_combine(f, r, opts.symmetrize), opts.decision, opts.threshold)
    return symmetrize(decide(f, opts.decision, opts.threshold),
                      [(j, i) for i, j in decide(r, opts.decision, opts.threshold)], opts.symmetrize)


def _pooled_word_links(fwd: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int], opts: LinkOptions,
                       rev: Optional[np.ndarray]) -> List[Tuple[int, int]]:
    """:func:`sentence_word_links` with ``pool="words"``: pool, then decide (or merge) on the words."""
    return _decide_pooled(*_pooled(fwd, src_owner, tgt_owner, rev), opts)


def _score_matrix(f: np.ndarray, r: Optional[np.ndarray], opts: LinkOptions) -> np.ndarray:
    """The matrix a link's confidence is read from: one direction, its soft merge, or (atools) the mean."""
    return f if r is None else soft_combine(f, r, opts.symmetrize if opts.symmetrize in SOFT else "mean")


def scored_word_links(fwd: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int], opts: LinkOptions,
                      rev: Optional[np.ndarray] = None, eos_s: bool = True,
                      eos_t: bool = True) -> List[Tuple[int, int, float]]:
    """:func:`sentence_word_links` with each link's :func:`link_scores` confidence, ``(source word, target
    word, p)``; with ``pool="words"`` the word matrices are pooled once for both."""
    opts.check()
    if opts.pool != "words":
        links = sentence_word_links(fwd, src_owner, tgt_owner, opts, rev, eos_s, eos_t)
        return [(s, t, p) for (s, t), p in zip(links, link_scores(links, fwd, src_owner, tgt_owner, opts, rev))]
    f, r = _pooled(fwd, src_owner, tgt_owner, rev)
    m = _score_matrix(f, r, opts)
    return [(s, t, float(m[t, s])) for s, t in _decide_pooled(f, r, opts)]


def link_scores(links: Sequence[Link], fwd: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int],
                opts: LinkOptions, rev: Optional[np.ndarray] = None) -> List[float]:
    """The confidence of each word link ``(source word, target word)`` of :func:`sentence_word_links` (same
    arguments): the value its decision was read from, as the module docstring says."""
    n_src, n_tgt = len(src_owner), len(tgt_owner)
    f = np.asarray(fwd, dtype=np.float64)[:n_tgt, :n_src]
    r = None if rev is None else np.asarray(rev, dtype=np.float64)[:n_src, :n_tgt]
    if opts.pool == "words":
        f = pool_words(f, src_owner, tgt_owner)
        r = None if r is None else pool_words(r, tgt_owner, src_owner)
    m = _score_matrix(f, r, opts)
    if opts.pool == "words":
        return [float(m[t, s]) for s, t in links]
    words = np.full((max(tgt_owner, default=-1) + 1, max(src_owner, default=-1) + 1), -np.inf)
    np.maximum.at(words, (np.asarray(tgt_owner)[:, None], np.asarray(src_owner)[None, :]), m)
    return [float(words[t, s]) for s, t in links]
