"""The first-order direct HMM's forward-backward in probability space, scaled per step (Rabiner 1989).

The log-space recursion of :mod:`hmm_nmt.hmm.direct` sums over (j', j) in log space at every target step: an
addition, a maximum, an exponential and a sum over a (B, J', J) tensor per step, and autograd's backward keeps
each of them. Here the transitions P_i(j', j) = exp T(i, j', j) are exponentiated once and each step is one
batched vector-matrix product::

    e_i(j)   = exp(L(i, j) - m_i),  m_i = max_j L(i, j)          (1 at each step's best position)
    a_1      = p(j | start) e_1 / c_1
    a_i      = (a_{i-1} P_i) * e_i / c_i,   c_i the total that makes a_i sum to 1
    b_I      = 1,   b_{i-1} = P_i (e_i * b_i) / c_i
    log p(E | F) = sum_i (log c_i + m_i),   p(b_i = j | E, F) = a_i(j) b_i(j)
    p(b_{i-1} = j', b_i = j | E, F) = a_{i-1}(j') P_i(j', j) e_i(j) b_i(j) / c_i

which are also the gradients of log p(E | F) with respect to L, T and the start scores: the backward of
:func:`log_likelihood` is that closed form, one elementwise product over (B, I, J', J), not a replay of I steps.

Underflow. A probability below about e^-87 is 0 in float32, and the only path a lexicon allows (the second
pass's links mask the lexicon) may run through such a transition: its sentence would lose all mass. Real
transitions and start probabilities are therefore raised to e^FLOOR (a normal float32). The recursion is exact
for that perturbed model; since only the raised paths gained weight, the true posterior distribution over
alignments is within total variation

    sum_i e^FLOOR / c_i * sum_j e_i(j) b_i(j)       (each a_{i-1} sums to 1)

of the perturbed one. A sentence whose bound exceeds ``tol`` (or with a value that is not finite) is computed
again in log space, so every result is within ``tol`` of the exact one: in practice none is redone.
"""
import math
from typing import Dict

import torch
from torch import Tensor

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.logspace import MASKED
from hmm_nmt.hmm.semiring import LOG_SAFE

__all__ = ["FLOOR", "TOL", "recursions", "log_likelihood", "posteriors"]

#: log of the smallest transition or start probability kept (e^-80 is a normal float32)
FLOOR = -80.0
#: largest bound on the posterior error (total variation) accepted before a sentence is redone in log space
TOL = 1e-6


def recursions(lex: Tensor, tgt_mask: Tensor, log_init: Tensor, log_trans: Tensor) -> Dict[str, Tensor]:
    """The scaled forward and backward of every sentence (no gradients), in float32 or wider.

    lex (B, I, J) L; tgt_mask (B, I) True on real target positions (a padded step carries the state);
    log_init (B, J) A0 and log_trans (B, I, J', J) T with MASKED on source padding (the slice i = 0 unused).
    Returns ``alpha``, ``beta``, ``emit`` (B, I, J), ``total`` c and ``shift`` m (B, I; c = 1, m = 0 on
    padding), ``trans`` P (B, I, J', J), ``log_z`` (B,) and ``redo`` (B,): the sentences to compute in log space.
    """
    dtype = torch.promote_types(lex.dtype, torch.float32)
    lex, log_init, log_trans = lex.to(dtype), log_init.to(dtype), log_trans.to(dtype)
    real = log_init > MASKED / 2  # (B, J) the real source positions
    trans = log_trans.clamp_min(FLOOR).exp_().mul_(real[:, None, None, :].to(dtype))
    init = log_init.clamp_min(FLOOR).exp() * real
    scores = lex.masked_fill(~real[:, None, :], float("-inf"))
    shift = scores.amax(-1, keepdim=True)
    emit = (scores - shift).exp()
    steps, emits, masks = trans.unbind(1), emit.unbind(1), tgt_mask[..., None].unbind(1)
    prev = init
    alphas, totals = [], []
    for i in range(lex.size(1)):
        a = emits[i] * (prev if i == 0 else torch.bmm(prev.unsqueeze(1), steps[i]).squeeze(1))
        c = a.sum(-1, keepdim=True)
        prev = torch.where(masks[i], a / c, prev)
        alphas.append(prev)
        totals.append(torch.where(masks[i], c, torch.ones_like(c)))
    b = torch.ones_like(init)
    betas = [b] * lex.size(1)
    for i in range(lex.size(1) - 1, 0, -1):
        s = torch.bmm(steps[i], (emits[i] * b).unsqueeze(-1)).squeeze(-1) / totals[i]
        b = betas[i - 1] = torch.where(masks[i], s, b)
    alpha, beta = torch.stack(alphas, 1), torch.stack(betas, 1)
    total = torch.cat(totals, -1)
    shift = shift.squeeze(-1).masked_fill(~tgt_mask, 0.0)
    log_z = (total.log() + shift).sum(-1)
    bound = (math.exp(FLOOR) / total * (emit * beta).sum(-1)).masked_fill(~tgt_mask, 0.0).sum(-1)
    redo = ~(torch.isfinite(alpha * beta).flatten(1).all(-1) & torch.isfinite(log_z) & (bound <= TOL))
    return dict(alpha=alpha, beta=beta, emit=emit, total=total, shift=shift, trans=trans, log_z=log_z,
                redo=redo)


def _log_space_log_z(lex: Tensor, tgt_mask: Tensor, log_init: Tensor, log_trans: Tensor) -> Tensor:
    """log p(E | F) by the log-space recursion (the chain module's forward), for the sentences redone."""
    q = chain.forward(log_trans, mask=tgt_mask, log_emit=lex, log_start=log_init, semiring=LOG_SAFE,
                      normalize=False)
    return q.log_Z


class _ScaledLogZ(torch.autograd.Function):
    """log p(E | F) (B,) with the closed-form backward (posteriors and pair posteriors, module docstring)."""

    @staticmethod
    def forward(ctx, lex, tgt_mask, log_init, log_trans):
        r = recursions(lex.detach(), tgt_mask, log_init.detach(), log_trans.detach())
        log_z = r["log_z"]
        redo = r["redo"].nonzero().squeeze(-1)
        if redo.numel():
            exact = _log_space_log_z(lex[redo].detach(), tgt_mask[redo], log_init[redo].detach(),
                                     log_trans[redo].detach())
            log_z = log_z.index_copy(0, redo, exact.to(log_z.dtype))
        ctx.save_for_backward(lex, tgt_mask, log_init, log_trans, r["alpha"], r["beta"], r["emit"], r["total"],
                              r["trans"], redo)
        return log_z.to(lex.dtype)

    @staticmethod
    def backward(ctx, grad):
        lex, tgt_mask, log_init, log_trans, alpha, beta, emit, total, trans, redo = ctx.saved_tensors
        g = grad.to(alpha.dtype)[:, None, None]
        post = alpha * beta * tgt_mask[..., None] * g  # (B, I, J)
        d_init = post[:, 0] * tgt_mask[:, :1]
        # p(b_{i-1} = j', b_i = j | E, F) for i >= 1 on real steps: a_{i-1}(j') P_i(j', j) e_i(j) b_i(j) / c_i
        later = (emit * beta / total[..., None] * g)[:, 1:] * tgt_mask[:, 1:, None]
        d_trans = torch.zeros_like(trans)
        torch.mul(trans[:, 1:], alpha[:, :-1, :, None], out=d_trans[:, 1:]).mul_(later[:, :, None, :])
        if redo.numel():
            with torch.enable_grad():
                args = [x[redo].detach().requires_grad_() for x in (lex, log_init, log_trans)]
                exact = _log_space_log_z(args[0], tgt_mask[redo], args[1], args[2])
                d_lex, d_i, d_t = torch.autograd.grad(exact, args, grad_outputs=grad[redo].to(exact.dtype))
            post = post.index_copy(0, redo, d_lex.to(post.dtype))
            d_init = d_init.index_copy(0, redo, d_i.to(d_init.dtype))
            d_trans = d_trans.index_copy(0, redo, d_t.to(d_trans.dtype))
        return post.to(lex.dtype), None, d_init.to(log_init.dtype), d_trans.to(log_trans.dtype)


def log_likelihood(log_init: Tensor, log_trans: Tensor, lex: Tensor, tgt_mask: Tensor) -> Tensor:
    """log p(E | F) per sentence (B,) of the first-order direct HMM, differentiable in all three scores."""
    return _ScaledLogZ.apply(lex, tgt_mask.bool(), log_init, log_trans)


def posteriors(lex: Tensor, tgt_mask: Tensor, log_init: Tensor, log_trans: Tensor) -> Tensor:
    """p(b_i = j | E, F) (B, I, J), zero on padded target positions (no gradients)."""
    with torch.no_grad():
        r = recursions(lex, tgt_mask, log_init, log_trans)
        post = r["alpha"] * r["beta"] * tgt_mask[..., None]
        redo = r["redo"].nonzero().squeeze(-1)
        if redo.numel():
            with torch.enable_grad():
                x = lex[redo].detach().requires_grad_()
                exact = _log_space_log_z(x, tgt_mask[redo], log_init[redo].detach(), log_trans[redo].detach())
                (d,) = torch.autograd.grad(exact.sum(), x)
            post = post.index_copy(0, redo, d.to(post.dtype))
    return post.to(lex.dtype)
