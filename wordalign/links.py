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
(the atools heuristics of :mod:`wordalign.symmetrize`):

``prod``  m = p_f * p_r^T       a link needs both directions' support (a soft intersection)
``mean``  m = (p_f + p_r^T) / 2  either direction can carry it (a soft union)

With ``prod``, ``threshold:T`` keeps p_f p_r > T, so T = 0.25 corresponds to 0.5 in each direction.

Sentence level (:func:`sentence_word_links`, under ``hmm-nmt-align`` and the hub's ``align``): the word links
of one sentence pair from one direction's matrix, or two directions' merged as :class:`LinkOptions` says;
there the matrices may still hold the EOS row and column, which :func:`argmax_links` treats as fairseq does.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from wordalign.symmetrize import symmetrize

Link = Tuple[int, int]

__all__ = ["DECISIONS", "SOFT", "parse_decision", "decide", "soft_combine", "argmax_links", "LinkOptions",
           "sentence_word_links"]

DECISIONS = ("argmax", "mutual", "union", "threshold")
SOFT = ("prod", "mean")


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
    heuristic of :mod:`wordalign.symmetrize` (after the decision, on word links).
    """

    decision: str = "argmax"
    threshold: float = 0.0
    null_eos: bool = False
    symmetrize: Optional[str] = None


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
    """
    def to_words(links):
        return sorted({(src_owner[j], tgt_owner[i]) for j, i in links})

    if rev is None:
        return to_words(_directional(fwd, opts, eos_s, eos_t))
    n_src, n_tgt = len(src_owner), len(tgt_owner)
    if opts.symmetrize in SOFT:
        combined = soft_combine(fwd[:n_tgt, :n_src], rev[:n_src, :n_tgt], opts.symmetrize)
        return to_words(decide(combined, opts.decision, opts.threshold))
    f = to_words(_directional(fwd, opts, eos_s, eos_t))
    r = to_words([(j, i) for i, j in _directional(rev, opts, eos_t, eos_s)])
    return symmetrize(f, r, opts.symmetrize)
