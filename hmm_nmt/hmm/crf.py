r"""Linear-chain CRF over tags, and valid-sequence (constrained) decoding; both on the shared chain module.

Notation: K tags, emission scores ``s_t(k)`` (B, T, K) from any encoder (a BiLSTM for the BiLSTM-CRF of
Huang et al. 2015 / Lample et al. 2016), transition scores ``A(j, k)`` from tag j to tag k, start and end
scores ``a_start(k)``, ``a_end(k)``. A tag path y has score

    S(y) = a_start(y_1) + Σ_t s_t(y_t) + Σ_{t>1} A(y_{t-1}, y_t) + a_end(y_T)

and p(y | x) = exp S(y) / Z, log Z the log-sum-exp over all K^T paths: the chain forward with
``log_G = A``, ``log_start = a_start``, ``log_emit = s`` and the end scores added at each sentence's last
position. Decoding is :func:`hmm_nmt.hmm.chain.viterbi` on the same potentials.

A tag scheme's constraints (:func:`hmm_nmt.data.tag_schemes.transitions`) become -inf-like
(:data:`~hmm_nmt.hmm.logspace.MASKED`) transition, start and end scores: :func:`constrained_viterbi` gives any
per-token tagger (softmax outputs) the best *valid* sequence, and a CRF built with ``allowed`` never scores
an invalid one.
"""
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.logspace import MASKED

__all__ = ["LinearChainCRF", "constraint_scores", "constrained_viterbi", "constrain_potentials", "add_constraints"]


def _with_end(log_emit: Tensor, end: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Add the end scores at each sequence's last real position."""
    B, T, K = log_emit.shape
    if mask is None:
        last = torch.full((B,), T - 1, dtype=torch.long, device=log_emit.device)
    else:
        last = (mask.long().sum(1) - 1).clamp(min=0)
    at_end = torch.zeros(B, T, 1, dtype=log_emit.dtype, device=log_emit.device)
    at_end.scatter_(1, last.view(B, 1, 1), 1.0)
    return log_emit + at_end * end


def constraint_scores(allowed, start, end, dtype=torch.float32, device=None):
    """0 / MASKED transition (K, K), start (K,) and end (K,) scores from boolean constraints."""
    def score(x):
        x = torch.as_tensor(x, dtype=torch.bool, device=device)
        return torch.where(x, torch.zeros((), dtype=dtype, device=device),
                           torch.full((), MASKED, dtype=dtype, device=device))
    return score(allowed), score(start), score(end)


def constrained_viterbi(log_probs: Tensor, allowed, start, end, mask: Optional[Tensor] = None):
    """The best tag sequence under per-token scores ``log_probs`` (B, T, K) among the sequences the
    constraints allow: ``(score (B,), tags (B, T))``, -1 on padding. A sentence no valid sequence fits
    (only possible with unusable tags) gets the best sequence anyway, with a score below MASKED."""
    trans, start_s, end_s = constraint_scores(allowed, start, end, log_probs.dtype, log_probs.device)
    return chain.viterbi(trans, None, mask, log_emit=_with_end(log_probs, end_s, mask),
                         log_start=start_s.expand(log_probs.size(0), -1))


def constrain_potentials(log_G: Tensor, allowed, start, end, mask: Optional[Tensor] = None) -> Tensor:
    """A chain's log potentials with a tag scheme's constraints added, for the chain Viterbi of a model whose
    states are the tags (HNMC architectures 1 and 3).

    ``log_G`` (B, T, N, N) ``[b, t, j, i]`` (order 1) or (B, T, N, N, N) ``[b, t, k, j, i]`` (order 2, the
    constraint is on the bigram (j, i)): MASKED is added where the transition j -> i is not allowed (t >= 1),
    where i may not start (t = 0, whatever the virtual predecessor) and where i may not end (each
    sentence's last position). Allowed entries are unchanged, so among valid paths the scores, and hence
    the best path, are the model's own."""
    trans, start_s, end_s = constraint_scores(allowed, start, end, log_G.dtype, log_G.device)
    B, T = log_G.shape[:2]
    N = trans.size(0)
    extra = log_G.dim() - 4  # 0 for order 1, 1 for order 2
    first = torch.zeros(T, dtype=torch.bool, device=log_G.device)
    if T:
        first[0] = True
    view = (1, T) + (1,) * extra + (N, N)
    pair = torch.where(first.view(T, 1, 1), start_s.view(1, 1, N).expand(T, N, N), trans.unsqueeze(0).expand(T, N, N))
    out = log_G + pair.view(view)
    if mask is None:
        last = torch.full((B,), T - 1, dtype=torch.long, device=log_G.device)
    else:
        last = (mask.long().sum(1) - 1).clamp(min=0)
    at_end = torch.zeros(B, T, dtype=log_G.dtype, device=log_G.device)
    at_end.scatter_(1, last.view(B, 1), 1.0)
    return out + at_end.view((B, T) + (1,) * (extra + 1) + (1,)) * end_s.view((1, 1) + (1,) * (extra + 1) + (N,))


def add_constraints(trans: Tensor, start: Tensor, emit: Tensor, constraints, mask: Optional[Tensor] = None):
    """CRF potentials ``(trans, start, emit)`` (see :meth:`LinearChainCRF.potentials`) with a tag scheme's
    ``constraints`` ``(allowed, start, end)`` added; the end scores go to each sequence's last position."""
    t2, s2, e2 = constraint_scores(*constraints, dtype=emit.dtype, device=emit.device)
    return trans + t2, start + s2, _with_end(emit, e2, mask)


class LinearChainCRF(nn.Module):
    """The CRF output layer: ``nll(emissions, tags, mask)`` for training, ``decode`` (Viterbi) and
    ``marginals``. ``allowed``/``start``/``end`` (optional booleans) fix the impossible transitions."""

    def __init__(self, num_tags: int, allowed=None, start=None, end=None):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        ones = torch.ones(num_tags, dtype=torch.bool)
        t, s, e = constraint_scores(ones[:, None] & ones if allowed is None else allowed,
                                    ones if start is None else start, ones if end is None else end)
        self.register_buffer("constraint_trans", t, persistent=False)
        self.register_buffer("constraint_start", s, persistent=False)
        self.register_buffer("constraint_end", e, persistent=False)

    def potentials(self, emissions: Tensor, mask: Optional[Tensor]):
        dt = emissions.dtype
        trans = self.transitions.to(dt) + self.constraint_trans.to(dt)
        start = (self.start.to(dt) + self.constraint_start.to(dt)).expand(emissions.size(0), -1)
        emit = _with_end(emissions, self.end.to(dt) + self.constraint_end.to(dt), mask)
        return trans, start, emit

    def log_partition(self, emissions: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        trans, start, emit = self.potentials(emissions, mask)
        return chain.forward(trans, None, mask, log_emit=emit, log_start=start).log_Z

    def score(self, emissions: Tensor, tags: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """S(y) (B,) of the given tag paths (padding ignored)."""
        trans, start, emit = self.potentials(emissions, mask)
        m = torch.ones_like(tags, dtype=torch.bool) if mask is None else mask
        safe = tags.masked_fill(~m, 0)
        s = emit.gather(2, safe.unsqueeze(-1)).squeeze(-1).masked_fill(~m, 0.0).sum(1)
        s = s + start.gather(1, safe[:, :1]).squeeze(1)
        pair = trans[safe[:, :-1], safe[:, 1:]].masked_fill(~m[:, 1:], 0.0)
        return s + pair.sum(1)

    def nll(self, emissions: Tensor, tags: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """-log p(tags | x) per sentence (B,)."""
        return self.log_partition(emissions, mask) - self.score(emissions, tags, mask)

    def decode(self, emissions: Tensor, mask: Optional[Tensor] = None, constraints=None):
        """Viterbi: ``(score (B,), tags (B, T))``, -1 on padding. ``constraints`` ``(allowed, start, end)``:
        further impossible transitions, on top of the CRF's own."""
        trans, start, emit = self.potentials(emissions, mask)
        if constraints is not None:
            trans, start, emit = add_constraints(trans, start, emit, constraints, mask)
        return chain.viterbi(trans, None, mask, log_emit=emit, log_start=start)

    def marginals(self, emissions: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """log p(y_t = k | x) (B, T, K)."""
        trans, start, emit = self.potentials(emissions, mask)
        return chain.marginals(trans, None, mask, log_emit=emit, log_start=start)[0]
