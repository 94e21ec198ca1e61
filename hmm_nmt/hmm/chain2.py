r"""Chains of order 2, run over state pairs (see :mod:`hmm_nmt.hmm.chain` for order 1).

``log_G2`` (B, T, N, N, N) ``[b, t, k, j, i]``: the log-potential from the pair (x_{t-2}=k, x_{t-1}=j) to
(x_{t-1}=j, x_t=i), started from a virtual pair (x_{-2}, x_{-1}) with weights ``log_init2`` (N, N) or
(B, N, N) (default uniform). α²_t(j, i) and β²_t(j, i) are the order-1 recursions over pairs; written
directly they cost N^3 per step instead of the N^4 of the lifted order-1 chain (:func:`lift2`), which the
tests use as the oracle and :func:`viterbi2` uses to find the best path with the order-1 Viterbi.
"""
from typing import Optional

import torch
from torch import Tensor

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.logspace import MASKED
from hmm_nmt.hmm.semiring import LOG, Semiring

__all__ = ["forward2", "backward2", "marginals2", "lift2", "viterbi2",
           "chain2_forward", "chain2_backward", "chain2_posteriors"]


def forward2(log_G2: Tensor, log_init2: Optional[Tensor] = None, mask: Optional[Tensor] = None,
             semiring: Semiring = LOG):
    """Normalised forward over pairs: ``(log α² (B, T, N, N) [j, i], log Z (B,))``."""
    B, T, N = log_G2.shape[:3]
    mask = chain.check_mask(mask, B, T)
    a = chain.uniform_init(log_G2, B, (N, N)) if log_init2 is None else log_init2.expand(B, N, N)
    log_Z = log_G2.new_zeros(B)
    out = []
    steps = log_G2.unbind(1)
    for t in range(T):
        s = semiring.sum(a.unsqueeze(-1) + steps[t], dim=1)
        c = semiring.sum(s.reshape(B, -1), dim=-1)
        s = s - c.view(B, 1, 1)
        if mask is not None:
            m = mask[:, t]
            s = torch.where(m.view(B, 1, 1), s, a)
            c = torch.where(m, c, torch.zeros_like(c))
        log_Z = log_Z + c
        out.append(s)
        a = s
    return torch.stack(out, dim=1), log_Z


def backward2(log_G2: Tensor, mask: Optional[Tensor] = None, semiring: Semiring = LOG) -> Tensor:
    """Normalised backward over pairs: (B, T, N, N) log β² ``[j, i]``, β²_{T-1} = 1."""
    B, T, N = log_G2.shape[:3]
    mask = chain.check_mask(mask, B, T)
    b = log_G2.new_zeros(B, N, N)
    out = [b]
    steps = log_G2.unbind(1)
    for t in range(T - 2, -1, -1):
        # β_t(j, i) = ⊕_k G_{t+1}(j, i, k) ⊗ β_{t+1}(i, k)
        s = semiring.sum(steps[t + 1] + b.unsqueeze(1), dim=-1)
        s = s - semiring.sum(s.reshape(B, -1), dim=-1).view(B, 1, 1)
        if mask is not None:
            s = torch.where(mask[:, t + 1].view(B, 1, 1), s, torch.zeros_like(s))
        out.append(s)
        b = s
    out.reverse()
    return torch.stack(out, dim=1)


def marginals2(log_G2: Tensor, log_init2: Optional[Tensor] = None, mask: Optional[Tensor] = None,
               semiring: Semiring = LOG):
    """Single-state marginals ``p(x_t = i | y) ∝ ⊕_j α²_t(j, i) β²_t(j, i)``: ``(log_post (B, T, N), log Z)``."""
    log_alpha, log_Z = forward2(log_G2, log_init2, mask, semiring)
    log_beta = backward2(log_G2, mask, semiring)
    s = semiring.sum(log_alpha + log_beta, dim=2)
    return s - semiring.sum(s, dim=-1).unsqueeze(-1), log_Z


def lift2(log_G2: Tensor, log_init2: Optional[Tensor] = None):
    """The order-1 chain over pair states p = j * N + i: ``(log_G (B, T, N², N²), log_init (B, N²))``.

    The potential from pair (k, j) to pair (j', i) is G2(k, j, i) where j' = j and MASKED elsewhere, so any
    order-1 algorithm of :mod:`hmm_nmt.hmm.chain` runs unchanged on order 2 (at N^4 per step).
    """
    B, T, N = log_G2.shape[:3]
    lifted = log_G2.new_full((B, T, N, N, N, N), MASKED)  # [k, j, j', i]
    idx = torch.arange(N, device=log_G2.device)
    lifted[:, :, :, idx, idx, :] = log_G2  # G2[k, j, i] at (k, j, j, i)
    init = chain.uniform_init(log_G2, B, (N, N)) if log_init2 is None else log_init2.expand(B, N, N)
    return lifted.reshape(B, T, N * N, N * N), init.reshape(B, N * N)


def viterbi2(log_G2: Tensor, log_init2: Optional[Tensor] = None, mask: Optional[Tensor] = None):
    """Best state path of the order-2 chain: ``(score (B,), path (B, T))``, -1 on padding."""
    N = log_G2.size(2)
    log_G, log_init = lift2(log_G2, log_init2)
    score, pairs = chain.viterbi(log_G, log_init, mask)
    return score, torch.where(pairs >= 0, pairs % N, pairs)


# the names the entropic forward-backward has always used (hmm_nmt.hmm.efb re-exports them)
def chain2_forward(log_G2, log_init2=None, mask=None):
    return forward2(log_G2, log_init2, mask)


def chain2_backward(log_G2, mask=None):
    return backward2(log_G2, mask)


def chain2_posteriors(log_G2, log_init2=None, mask=None):
    """Single-state posteriors of the order-2 chain: ``(log_post (B, T, N), log_Z (B,))``."""
    return marginals2(log_G2, log_init2, mask)
