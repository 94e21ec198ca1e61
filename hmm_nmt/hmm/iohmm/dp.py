"""The IOHMM's dynamic programme (Bengio & Frasconi 1994, Eq. 2-3, 6, 9-11) over the shared chain module.

Adapter only: the potentials are the state networks' transition probabilities ``phi`` (successor first,
``[b, t, i, j]``, run as matmuls by :class:`~hmm_nmt.hmm.semiring.ProbLog`) and the output densities
``log_f``; the recursions are :func:`hmm_nmt.hmm.chain.forward` / :func:`~hmm_nmt.hmm.chain.backward` /
:func:`~hmm_nmt.hmm.chain.viterbi`. Notation and conventions: :mod:`hmm_nmt.hmm.iohmm`.
"""
from typing import NamedTuple

import torch

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.logspace import NEG_INF, log_matvec, safe_log
from hmm_nmt.hmm.semiring import ProbLog

__all__ = ["NEG_INF", "safe_log", "log_matvec", "Filter", "observe", "filter_step", "forward_filter",
           "log_likelihood", "log_alpha", "backward_scaled", "log_beta", "Posteriors", "posteriors",
           "state_distribution", "q_function", "viterbi"]

PHI = ProbLog(successor_first=True)


def _check(log_phi, log_f, mask):
    if log_phi.dim() != 4 or log_phi.shape[-1] != log_phi.shape[-2]:
        raise ValueError(f"log_phi must be (B, T, n, n), got {tuple(log_phi.shape)}")
    if log_f.shape != log_phi.shape[:3]:
        raise ValueError(f"log_f must be (B, T, n) = {tuple(log_phi.shape[:3])}, got {tuple(log_f.shape)}")
    B, T, n = log_f.shape
    if mask is None:
        mask = torch.ones(B, T, dtype=torch.bool, device=log_f.device)
    elif mask.shape != (B, T):
        raise ValueError(f"mask must be (B, T) = {(B, T)}, got {tuple(mask.shape)}")
    mask = mask.bool()
    # padded steps: identity-free filler (phi = 1, f = 1); their values are never selected, and finite
    # filler keeps NaN out of the gradient of the unselected torch.where branches
    log_phi = torch.where(mask[:, :, None, None], log_phi, torch.zeros_like(log_phi))
    log_f = torch.where(mask[:, :, None], log_f, torch.zeros_like(log_f))
    return log_phi, log_f, mask


def _initial(log_zeta0, B, n, like):
    log_zeta0 = log_zeta0.to(like)
    if log_zeta0.shape not in ((n,), (B, n)):
        raise ValueError(f"log_zeta0 must be (n,) or (B, n) with n={n}, got {tuple(log_zeta0.shape)}")
    return log_zeta0.expand(B, n)


class Filter(NamedTuple):
    log_zeta: torch.Tensor  # (B, T, n) predictive state  log P(x_t = i | u_1^t, y_<t)
    log_alpha_hat: torch.Tensor  # (B, T, n) filtered state  log P(x_t = i | u_1^t, y_1^t)
    log_c: torch.Tensor  # (B, T) log P(y_t | y_<t, u_1^t); 0 without target or padded
    log_likelihood: torch.Tensor  # (B,) log P(y | u), Eq. 6 per sequence


def observe(log_zeta_t, log_f_t):
    """Bayes update with the target at ``t``: ``(log P(x_t | u_1^t, y_1^t), log P(y_t | y_<t, u_1^t))``."""
    joint = log_zeta_t + log_f_t
    log_c = torch.logsumexp(joint, -1)
    return joint - log_c.unsqueeze(-1), log_c


def filter_step(log_alpha_prev, phi_t, log_f_t):
    """One step of the forward recursion from the filtered ``log P(x_{t-1} | u_1^{t-1}, y_1^{t-1})``.

    Returns ``(log_zeta_t, log_alpha_hat_t, log_c_t)``: the predictive state (Eq. 2:
    ``zeta_t = sum_j alpha_hat_{j,t-1} phi_j,t``), the state after seeing ``y_t`` and
    ``log P(y_t | y_<t, u_1^t)``; ``phi_t`` holds *probabilities* (B, n, n).
    """
    return chain.filter_step(log_alpha_prev, phi_t, log_f_t, semiring=PHI)


def forward_filter(log_phi, log_f, log_zeta0, mask=None):
    """Scaled forward recursion (Eq. 11): predictive/filtered states and the log-likelihood (Eq. 6).

    The paper's ``log alpha_it`` is ``log_alpha_hat + cumsum(log_c)`` (see :func:`log_alpha`).
    Differentiable: autograd through it is training method (a).
    """
    log_phi, log_f, mask = _check(log_phi, log_f, mask)
    return _forward(log_phi.exp(), log_f, _initial(log_zeta0, *log_f.shape[::2], log_f), mask)


def _forward(phi, log_f, prev, mask):
    B, T, n = log_f.shape
    if T == 0:
        empty = log_f.new_zeros(B, 0, n)
        return Filter(empty, empty, log_f.new_zeros(B, 0), log_f.new_zeros(B))
    # padded steps carry the last real state (zeta too); log_c is 0 there
    fwd = chain.forward(phi, prev, mask, log_emit=log_f, semiring=PHI, return_predictive=True)
    return Filter(fwd.log_pred, fwd.log_alpha, fwd.log_c, fwd.log_c.sum(1))


def log_likelihood(log_phi, log_f, log_zeta0, mask=None):
    """``log P(y_1^T | u_1^T)`` per sequence (B,), Eq. 6."""
    return forward_filter(log_phi, log_f, log_zeta0, mask).log_likelihood


def log_alpha(filt: Filter):
    """The paper's unscaled forward variables ``log alpha_it = log P(y_1^t, x_t = i | u_1^t)``."""
    return filt.log_alpha_hat + filt.log_c.cumsum(1).unsqueeze(-1)


def backward_scaled(log_phi, log_f, log_c, mask=None):
    """Scaled backward recursion: ``log beta_hat_it = log P(y_{t+1}^T | x_t = i, u) - sum_{s>t} log_c_s``.

    The paper's ``beta_it`` (Eq. 10, which includes ``f_Y(y_t)``) is
    ``log_f + log_beta_hat + sum_{s>t} log_c_s`` (see :func:`log_beta`).
    """
    log_phi, log_f, mask = _check(log_phi, log_f, mask)
    return _backward(log_phi.exp(), log_f, log_c, mask)


def _backward(phi, log_f, log_c, mask):
    return chain.backward(phi, mask, log_emit=log_f, semiring=PHI, normalize=False, log_c=log_c)


def log_beta(log_f, log_beta_hat, log_c):
    """The paper's ``log beta_it = log P(y_t^T | x_t = i, u_t^T)`` (Eq. 10)."""
    rest = log_c.flip(1).cumsum(1).flip(1) - log_c  # sum_{s>t} log_c_s
    return log_f + log_beta_hat + rest.unsqueeze(-1)


class Posteriors(NamedTuple):
    log_likelihood: torch.Tensor  # (B,)
    zeta_hat: torch.Tensor  # (B, T, n)  P(x_t = i | u, y); 0 on padded steps
    h: torch.Tensor  # (B, T, n, n)  h[b, t, i, j] = P(x_t = i, x_{t-1} = j | u, y); t = 0 pairs with x_0
    zeta0_hat: torch.Tensor  # (B, n)  P(x_0 = j | u, y)
    log_alpha: torch.Tensor  # (B, T, n)  paper's alpha (Eq. 11)
    log_beta: torch.Tensor  # (B, T, n)  paper's beta (Eq. 10)


def posteriors(log_phi, log_f, log_zeta0, mask=None):
    """E-step: ``zeta_hat``, ``h`` and the log-likelihood by forward-backward (no autograd needed)."""
    with torch.no_grad():
        log_phi, log_f, mask = _check(log_phi, log_f, mask)
        B, T, n = log_f.shape
        phi = log_phi.exp()
        init = _initial(log_zeta0, B, n, log_f)
        filt = _forward(phi, log_f, init, mask)
        lb = _backward(phi, log_f, filt.log_c, mask)
        m3 = mask[:, :, None]
        zeta_hat = torch.where(m3, (filt.log_alpha_hat + lb).exp(), 0.0)
        prev = torch.cat([init.unsqueeze(1), filt.log_alpha_hat[:, :-1]], 1)  # alpha_hat_{t-1}, (B, T, n)
        log_h = (log_f + lb - filt.log_c.unsqueeze(-1)).unsqueeze(-1) + log_phi + prev.unsqueeze(-2)
        h = torch.where(m3.unsqueeze(-1), log_h.exp(), 0.0)
        if T:
            zeta0_hat = h[:, 0].sum(1)  # P(x_0 = j) = sum_i P(x_1 = i, x_0 = j)
            empty = ~mask[:, 0]
            zeta0_hat = torch.where(empty[:, None], init.exp(), zeta0_hat)
        else:
            zeta0_hat = init.exp()
        return Posteriors(filt.log_likelihood, zeta_hat, h, zeta0_hat,
                          log_alpha(filt), log_beta(log_f, lb, filt.log_c))


def state_distribution(log_phi, log_zeta0, mask=None):
    """Eq. 2 with no targets: ``log zeta_t = log P(x_t | u_1^t)`` (B, T, n)."""
    return forward_filter(log_phi, torch.zeros_like(log_phi[..., 0]), log_zeta0, mask).log_zeta


def q_function(log_phi, log_f, log_zeta0, post: Posteriors, mask=None):
    """Eq. 9 per sequence (B,): ``sum_t sum_i zeta_hat_it log f_it + sum_ij h_ij,t log phi_ij,t``
    plus the initial-state term ``sum_j zeta0_hat_j log zeta0_j`` (zero gradient when zeta_0 is fixed).

    The posteriors are constants (computed with the old parameters); terms with zero posterior weight
    are dropped so forbidden transitions (``-inf``) never produce ``0 * -inf``.
    """
    log_phi, log_f, mask = _check(log_phi, log_f, mask)
    B, T, n = log_f.shape
    init = _initial(log_zeta0, B, n, log_f)

    def wsum(w, logp, dims):
        return torch.where(w > 0, w * logp, torch.zeros_like(logp)).sum(dims)

    return wsum(post.zeta_hat, log_f, (1, 2)) + wsum(post.h, log_phi, (1, 2, 3)) + wsum(post.zeta0_hat, init, 1)


def viterbi(log_phi, log_f, log_zeta0, mask=None):
    """The most probable state path given inputs and targets: ``(log P(y, x* | u) (B,), x* (B, T))``,
    x_t* in 0..n-1 and -1 on padded steps (max-product over the same potentials as the forward)."""
    log_phi, log_f, mask = _check(log_phi, log_f, mask)
    B, T, n = log_f.shape
    return chain.viterbi(log_phi.transpose(-1, -2), _initial(log_zeta0, B, n, log_f), mask, log_emit=log_f)
