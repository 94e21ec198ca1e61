r"""The one chain-inference module under every HMM core: forward, backward, marginals, Viterbi.

A core is *potentials plus an adapter*: it computes log-potentials and calls these recursions. Notation
(states i, j in {0..N-1}, time t in {0..T-1}, batched over b, right-padded sequences):

* ``log_G`` (B, T, N, N) ``[b, t, j, i]``: the log-potential of moving from state j at t-1 to i at t; a
  time or batch dimension of size 1 broadcasts (time-invariant transitions never need a (B, T, N, N) copy);
* ``log_emit`` (B, T, N), optional: a per-position score added after the transition (an emission); keeping it
  apart from ``log_G`` saves a (B, T, N, N) addition when the potentials factorise;
* the start: either a virtual state ``x_{-1}`` with weights ``log_init`` (default uniform) that enters
  through ``G_0``, or ``log_start`` (B, N), the prediction for t = 0 itself (``G_0`` is then unused).

Forward (α) and backward (β), ⊕ / ⊗ from a :mod:`semiring <hmm_nmt.hmm.semiring>`::

    pred_0(i)  = log_start(i)  or  ⊕_j log_init(j) ⊗ G_0(j, i)
    pred_t(i)  = ⊕_j α_{t-1}(j) ⊗ G_t(j, i)                 (t >= 1)
    α_t(i)     = pred_t(i) ⊗ emit_t(i)
    β_{T-1}(i) = 0,   β_t(j) = ⊕_i G_{t+1}(j, i) ⊗ emit_{t+1}(i) ⊗ β_{t+1}(i)
    log Z      = ⊕_i α_{T-1}(i)

With ``normalize=True`` (the default) α_t is renormalised at every step by its ⊕-total log c_t and
log Z = Σ_t log c_t (the scaled forward: no underflow on any length); with normalised HMM potentials
log c_t = log p(y_t | y_<t), the filter's one-step-ahead conditional, and α_t is the filtered state.
β is normalised by its own total, or by the forward's log c (Rabiner's scaling, ``log_c=``), or not at all.
Under :data:`~hmm_nmt.hmm.semiring.MAX` the same code gives the best path score and max-marginals;
:func:`viterbi` adds the back-pointers and returns the best path.

Padding (``mask`` (B, T) False): α is carried unchanged, log c_t = 0 and β is reset to 0, so the real
positions of a padded sequence get exactly the values of the unpadded one.

Marginals p(x_t = i | y) are α_t + β_t renormalised (:func:`marginals`, ``method="explicit"``), or the
gradient of log Z with respect to the emission scores (``method="autograd"``, torch-struct's view); the
tests check they agree. Order 2 lives in :mod:`hmm_nmt.hmm.chain2`.
"""
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from hmm_nmt.hmm.semiring import LOG, MAX, Semiring

__all__ = ["Forward", "forward", "backward", "marginals", "viterbi", "filter_step",
           "chain_forward", "chain_backward", "chain_posteriors", "check_mask", "uniform_init"]


class Forward(NamedTuple):
    log_alpha: Tensor  # (B, T, N) α, normalised per step unless normalize=False
    log_Z: Tensor  # (B,) ⊕ over all paths (log-partition, or best path score under MAX)
    log_c: Optional[Tensor]  # (B, T) per-step normalisers, 0 on padding (None when not normalised)
    log_pred: Optional[Tensor]  # (B, T, N) the prediction before emit_t (only when asked for)


def check_mask(mask: Optional[Tensor], B: int, T: int) -> Optional[Tensor]:
    if mask is None:
        return None
    if mask.shape != (B, T):
        raise ValueError(f"mask must be (B, T) = {(B, T)}, got {tuple(mask.shape)}")
    return mask.bool()


def uniform_init(like: Tensor, B: int, shape) -> Tensor:
    n = math.prod(shape)
    return like.new_full((B,) + tuple(shape), -math.log(n))


def _steps(log_G: Tensor, T: int):
    """Per-step views of the potentials; a time dimension of size 1 broadcasts over all T steps."""
    if log_G.dim() == 2:
        log_G = log_G[None, None]
    if log_G.size(1) == 1 and T != 1:
        return [log_G[:, 0]] * T
    if log_G.size(1) < T:
        raise ValueError(f"potentials have {log_G.size(1)} steps, the sequence {T}")
    return log_G.unbind(1)  # one UnbindBackward, not T slice-backwards each the size of log_G


def _sizes(log_G: Tensor, log_emit: Optional[Tensor], log_start: Optional[Tensor], mask: Optional[Tensor]):
    N = log_G.size(-1)
    batched = [t.size(0) for t in (log_emit, log_start, mask) if t is not None and t.dim() > 1]
    B = max(batched + [log_G.size(0) if log_G.dim() == 4 else 1])
    T = log_emit.size(1) if log_emit is not None else (mask.size(1) if mask is not None else log_G.size(1))
    return B, T, N


def forward(log_G: Tensor, log_init: Optional[Tensor] = None, mask: Optional[Tensor] = None, *,
            log_emit: Optional[Tensor] = None, log_start: Optional[Tensor] = None, semiring: Semiring = LOG,
            normalize: bool = True, return_predictive: bool = False) -> Forward:
    """The forward recursion (see the module docstring); the only Python loop is over time."""
    B, T, N = _sizes(log_G, log_emit, log_start, mask)
    mask = check_mask(mask, B, T)
    steps = _steps(log_G, T)
    if log_start is not None:
        prior = log_start.expand(B, N)
    else:
        prior = uniform_init(log_G, B, (N,)) if log_init is None else log_init.expand(B, N)
    emits = log_emit.unbind(1) if log_emit is not None else None
    a = prior
    log_Z = log_G.new_zeros(B)
    out, cs, preds = [], [], []
    for t in range(T):
        if t == 0 and log_start is not None:
            s = prior
        else:
            s = semiring.matvec(a, steps[t])
        if return_predictive:
            preds.append(s)
        if emits is not None:
            s = s + emits[t]
        if normalize:
            c = semiring.sum(s, dim=-1).unsqueeze(-1)
            s = s - c
        if mask is not None:
            m = mask[:, t].unsqueeze(-1)
            s = torch.where(m, s, a)
            if normalize:
                c = torch.where(m, c, torch.zeros_like(c))
            if return_predictive:
                preds[-1] = torch.where(m, preds[-1], a)
        if normalize:
            log_Z = log_Z + c.squeeze(-1)
            cs.append(c.squeeze(-1))
        out.append(s)
        a = s
    if T == 0:
        empty = log_G.new_zeros(B, 0, N)
        return Forward(empty, log_Z, log_G.new_zeros(B, 0) if normalize else None,
                       empty if return_predictive else None)
    if not normalize:
        log_Z = semiring.sum(a, dim=-1)
    return Forward(torch.stack(out, dim=1), log_Z, torch.stack(cs, dim=1) if normalize else None,
                   torch.stack(preds, dim=1) if return_predictive else None)


def backward(log_G: Tensor, mask: Optional[Tensor] = None, *, log_emit: Optional[Tensor] = None,
             semiring: Semiring = LOG, normalize: bool = True, log_c: Optional[Tensor] = None,
             length: Optional[int] = None) -> Tensor:
    """The backward recursion: (B, T, N) log β with β_{T-1} = 0 (log 1).

    ``normalize``: β_t renormalised by its own ⊕-total; ``log_c`` (B, T) instead scales β_t by the forward's
    normaliser of step t+1 (then α_t + β_t is the log-marginal itself, and the paper's unscaled β follows by
    adding back Σ_{s>t} log c_s). ``length``: T when neither ``log_emit`` nor ``mask`` gives it.
    """
    B, T, N = _sizes(log_G, log_emit, None, mask)
    T = length if length is not None else T
    mask = check_mask(mask, B, T)
    steps = _steps(log_G, T)
    if log_c is not None:
        log_emit = -log_c.unsqueeze(-1) if log_emit is None else log_emit - log_c.unsqueeze(-1)
    emits = log_emit.unbind(1) if log_emit is not None else None
    b = log_G.new_zeros(B, N)
    out = [b] * T
    for t in range(T - 2, -1, -1):
        s = semiring.rmatvec(steps[t + 1], b if emits is None else emits[t + 1] + b)
        if normalize and log_c is None:
            s = s - semiring.sum(s, dim=-1).unsqueeze(-1)
        if mask is not None:
            s = torch.where(mask[:, t + 1].unsqueeze(-1), s, b if log_c is not None else torch.zeros_like(s))
        out[t] = s
        b = s
    return torch.stack(out, dim=1) if T else log_G.new_zeros(B, 0, N)


def marginals(log_G: Tensor, log_init: Optional[Tensor] = None, mask: Optional[Tensor] = None, *,
              log_emit: Optional[Tensor] = None, log_start: Optional[Tensor] = None, semiring: Semiring = LOG,
              method: str = "explicit"):
    """``(log p(x_t = i | y) (B, T, N), log Z (B,))``; under MAX the (normalised) max-marginals.

    ``method="explicit"``: forward-backward; ``"autograd"``: the gradient of log Z with respect to a zero
    score added to every (t, i) (differentiable inputs are detached; padded positions get log 0 = -inf).
    """
    if method == "autograd":
        with torch.enable_grad():
            B, T, N = _sizes(log_G, log_emit, log_start, mask)
            probe = log_G.new_zeros(B, T, N, requires_grad=True)
            emit = probe if log_emit is None else log_emit.detach() + probe
            fwd = forward(log_G.detach(), None if log_init is None else log_init.detach(), mask, log_emit=emit,
                          log_start=None if log_start is None else log_start.detach(), semiring=semiring)
            (grad,) = torch.autograd.grad(fwd.log_Z.sum(), probe)
        return grad.clamp_min(0).log(), fwd.log_Z
    if method != "explicit":
        raise ValueError(f"method must be 'explicit' or 'autograd', got {method!r}")
    fwd = forward(log_G, log_init, mask, log_emit=log_emit, log_start=log_start, semiring=semiring)
    log_beta = backward(log_G, mask, log_emit=log_emit, semiring=semiring, length=fwd.log_alpha.size(1))
    s = fwd.log_alpha + log_beta
    return s - semiring.sum(s, dim=-1).unsqueeze(-1), fwd.log_Z


def viterbi(log_G: Tensor, log_init: Optional[Tensor] = None, mask: Optional[Tensor] = None, *,
            log_emit: Optional[Tensor] = None, log_start: Optional[Tensor] = None):
    """The best path: ``(score (B,), path (B, T) long)``, -1 on padded positions.

    The score is the max over paths of Σ_t G_t(x_{t-1}, x_t) (+ emit_t(x_t)), the start included as in
    :func:`forward`; it equals ``forward(..., semiring=MAX, normalize=False).log_Z``. Ties go to the lowest
    state index.
    """
    B, T, N = _sizes(log_G, log_emit, log_start, mask)
    mask = check_mask(mask, B, T)
    steps = _steps(log_G, T)
    emits = log_emit.unbind(1) if log_emit is not None else None
    if log_start is not None:
        a = log_start.expand(B, N)
    else:
        a = uniform_init(log_G, B, (N,)) if log_init is None else log_init.expand(B, N)
    keep = torch.arange(N, device=log_G.device).expand(B, N)
    pointers = []
    for t in range(T):
        if t == 0 and log_start is not None:
            s, ptr = a, keep
        elif t == 0:
            s = MAX.matvec(a, steps[0])  # the virtual predecessor is not part of the path
            ptr = keep
        else:
            s, ptr = (a.unsqueeze(-1) + steps[t]).max(dim=-2)
        if emits is not None:
            s = s + emits[t]
        if mask is not None and t > 0:
            m = mask[:, t].unsqueeze(-1)
            s = torch.where(m, s, a)
            ptr = torch.where(m, ptr, keep)
        pointers.append(ptr)
        a = s
    if T == 0:
        return a.amax(-1), torch.zeros(B, 0, dtype=torch.long, device=log_G.device)
    score, last = a.max(dim=-1)
    path = [last]
    for t in range(T - 1, 0, -1):
        last = pointers[t].gather(1, last.unsqueeze(1)).squeeze(1)
        path.append(last)
    path = torch.stack(path[::-1], dim=1)
    if mask is not None:
        path = path.masked_fill(~mask, -1)
    return score, path


def filter_step(log_alpha_prev: Tensor, log_G_t: Tensor, log_emit_t: Optional[Tensor] = None,
                semiring: Semiring = LOG):
    """One step of the normalised forward (incremental decoding): ``(pred, α_t normalised, log c_t)``."""
    pred = semiring.matvec(log_alpha_prev, log_G_t)
    s = pred if log_emit_t is None else pred + log_emit_t
    c = semiring.sum(s, dim=-1)
    return pred, s - c.unsqueeze(-1), c


# ------------------------------------------------------------------------------------------------
# the potentials-only form (the entropic forward-backward's, no separate emission; see hmm_nmt.hmm.efb)
def chain_forward(log_G, log_init=None, mask=None, return_steps=False):
    """Normalised forward over (B, T, N, N) potentials from a virtual state ``log_init`` (default uniform):
    ``(log_alpha, log_Z)``, plus the per-step log c (B, T) with ``return_steps``."""
    fwd = forward(log_G, log_init, mask)
    return (fwd.log_alpha, fwd.log_Z, fwd.log_c) if return_steps else (fwd.log_alpha, fwd.log_Z)


def chain_backward(log_G, mask=None):
    """Normalised backward over (B, T, N, N) potentials: (B, T, N) log β, β_{T-1} = 1 (log 0)."""
    return backward(log_G, mask, length=log_G.size(1))


def chain_posteriors(log_G, log_init=None, mask=None):
    """Posterior marginals over (B, T, N, N) potentials: ``(log_post (B, T, N), log_Z (B,))``."""
    return marginals(log_G, log_init, mask)

