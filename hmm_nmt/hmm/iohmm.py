"""Input/output hidden Markov model (Bengio & Frasconi, "An Input Output HMM Architecture", NIPS 1994).

An IOHMM maps an input sequence ``u_1..u_T`` to an output sequence ``y_1..y_T`` through a discrete
hidden state ``x_t in {1..n}``.  Notation (the paper's):

* **state networks** ``N_j``: ``phi_ij,t = P(x_t = i | x_{t-1} = j, u_t)``, a softmax over the
  successors ``S_j`` of state ``j`` (``phi_ij,t = 0`` for ``i`` not in ``S_j``, so transition graphs
  can be constrained);
* **output networks** ``O_j``: ``eta_jt``, the parameter of the output density ``f_Y(y_t; eta_jt)`` given
  ``x_t = j`` and ``u_t`` (softmax outputs for a multinomial, linear outputs for a Gaussian mean);
* **internal state** ``zeta_t`` with ``zeta_it = P(x_t = i | u_1^t)``:
  ``zeta_t = sum_j zeta_{j,t-1} phi_j,t`` (Eq. 2), and the **output** ``eta_t = sum_j zeta_jt eta_jt``
  (Eq. 3), the expected position parameter of ``y_t``;
* **forward** ``alpha_it = P(y_1^t, x_t = i | u_1^t)`` and **backward**
  ``beta_it = P(y_t^T | x_t = i, u_t^T)`` (Eq. 10-11)::

      alpha_it = f_Y(y_t; eta_it) sum_l phi_il(u_t) alpha_{l,t-1}
      beta_it  = f_Y(y_t; eta_it) sum_l phi_li(u_{t+1}) beta_{l,t+1}

* **likelihood** ``L = prod_p P(y_1^T | u_1^T) = prod_p sum_i alpha_iT`` (Eq. 6);
* **posteriors** ``zeta_hat_it = P(x_t = i | u_1^T, y_1^T)`` and
  ``h_ij,t = P(x_t = i, x_{t-1} = j | u_1^T, y_1^T) = beta_it alpha_{j,t-1} phi_ij(u_t) / sum_i alpha_iT``;
* **auxiliary function** (Eq. 9)
  ``Q = sum_p sum_t sum_i [zeta_hat_it log f_Y(y_t; eta_it) + sum_j h_ij,t log phi_ij,t]``.

Targets may be *intermittent* (given only at some steps, e.g. only at the end of a sequence for
classification): a step without a target contributes ``f_Y = 1``, i.e. ``log_f = 0``, and there the
forward recursion is exactly Eq. 2.  Generally the forward pass computes the predictive state
``zeta_t = P(x_t | u_1^t, y_<t)`` (Eq. 2 conditioned on the targets seen so far) and
``P(y_t | y_<t, u_1^t) = sum_i zeta_it f_Y(y_t; eta_it)`` (Eq. 3 as a density), whose product over ``t``
is the likelihood (6).

Conventions of this module: tensors are batched, time runs from ``t = 1..T`` as array index ``0..T-1``
and ``x_0`` is the non-emitting initial state with distribution ``zeta_0``; ``log_phi[b, t, i, j]`` is
``log phi_ij,t`` (successor ``i`` first); ``log_f[b, t, i]`` is ``log f_Y(y_t; eta_it)`` (0 where no
target); ``mask[b, t]`` is True on real (not padded) steps, sequences right padded.  Everything is
computed in log space with per-step normalisation (the scaled forward-backward algorithm), so long
sequences neither underflow nor overflow; forbidden transitions are ``-inf`` in ``log_phi`` and get
exactly zero mass and zero (never NaN) gradient.

Training (all three are here): (a) autograd on :func:`forward_filter`'s log-likelihood (its gradient
with respect to ``log_phi`` / ``log_f`` *is* ``h`` / ``zeta_hat``: posteriors as gradients of the
log-partition); (b) GEM (:func:`gem_step`): E-step posteriors as fixed targets and gradient ascent on
``Q`` (Eq. 13-14) with backtracking so that ``Q``, hence ``L``, never decreases; (c) exact EM
(:func:`em_step`, Eq. 12) for lookup-table networks addressed by quantized inputs.
"""
import math
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------------------
# the dynamic programme
# --------------------------------------------------------------------------------------------------


def safe_log(x):
    """``log x`` with ``log 0 = -inf`` and a zero (not NaN) gradient at 0."""
    if not (x.requires_grad and torch.is_grad_enabled()):
        return x.log()  # no gradient to protect: one op instead of four
    return torch.where(x > 0, x.clamp_min(torch.finfo(x.dtype).tiny).log(), NEG_INF)


def log_matvec(phi, log_v, transpose=False):
    """``log sum_j phi[..., i, j] v_j`` (``transpose``: ``log sum_i phi[..., i, j] v_i``) for log ``v``.

    ``phi`` holds probabilities (zeros allowed); ``v`` is shifted by its maximum so nothing overflows.
    """
    m = log_v.amax(-1, keepdim=True).detach()  # the value does not depend on m: no gradient needed
    m = m.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # all -inf: any finite shift will do
    v = (log_v - m).exp()
    if transpose:
        s = (v.unsqueeze(-2) @ phi).squeeze(-2)
    else:
        s = (phi @ v.unsqueeze(-1)).squeeze(-1)
    return safe_log(s) + m


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
    log_zeta = log_matvec(phi_t, log_alpha_prev)
    log_alpha_hat, log_c = observe(log_zeta, log_f_t)
    return log_zeta, log_alpha_hat, log_c


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
    zetas, alphas, cs = [], [], []
    for t in range(T):  # the recursion is sequential in t; everything else is vectorised
        z, a, c = filter_step(prev, phi[:, t], log_f[:, t])
        m = mask[:, t, None]
        zetas.append(torch.where(m, z, prev))  # padded steps: the last real state, carried
        prev = torch.where(m, a, prev)
        alphas.append(prev)
        cs.append(c)
    log_c = torch.stack(cs, 1).masked_fill(~mask, 0.0)
    return Filter(torch.stack(zetas, 1), torch.stack(alphas, 1), log_c, log_c.sum(1))


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
    B, T, n = log_f.shape
    nxt = log_f.new_zeros(B, n)
    out = [nxt] * T
    v_all = log_f - log_c.unsqueeze(-1)
    for t in range(T - 2, -1, -1):
        b = log_matvec(phi[:, t + 1], v_all[:, t + 1] + nxt, transpose=True)
        nxt = torch.where(mask[:, t + 1, None], b, nxt)
        out[t] = nxt
    return torch.stack(out, 1) if T else log_f.new_zeros(B, 0, n)


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


# --------------------------------------------------------------------------------------------------
# state networks N_j and output networks O_j
# --------------------------------------------------------------------------------------------------


def _graph_mask(n, graph):
    """``allowed[i, j]``: ``i`` is a successor of ``j`` (``i in S_j``); default ergodic (all True)."""
    if graph is None:
        return torch.ones(n, n, dtype=torch.bool)
    g = torch.as_tensor(graph, dtype=torch.bool)
    if g.shape != (n, n):
        raise ValueError(f"transition graph must be (n, n) = {(n, n)}, got {tuple(g.shape)}")
    if not g.any(0).all():
        orphans = (~g.any(0)).nonzero().flatten().tolist()
        raise ValueError(f"every state needs a successor; states without one: {orphans}")
    return g


def left_to_right_graph(n, max_jump=1):
    """Bakis topology: ``j -> i`` allowed for ``j <= i <= j + max_jump`` (a constrained graph example)."""
    i = torch.arange(n)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d <= max_jump)


class _Transitions(nn.Module):
    """Shared masking: activations ``a_ij,t`` -> ``log phi_ij,t`` by a softmax over ``S_j``."""

    def __init__(self, n_states, graph=None):
        super().__init__()
        self.n_states = n_states
        self.register_buffer("allowed", _graph_mask(n_states, graph), persistent=False)

    def normalize(self, a):
        # softmax over successors i of each predecessor j (dim -2); forbidden: phi = 0 exactly
        a = a.masked_fill(~self.allowed, NEG_INF)
        return torch.log_softmax(a, dim=-2)


class StateNetworks(_Transitions):
    """``N_j(u_t; theta_j)`` for real-valued inputs: one linear (``hidden_dim = 0``) or one-hidden-layer
    tanh network per state ``j``, all evaluated at once; returns ``log phi`` (B, T, n, n)."""

    def __init__(self, n_states, input_dim, hidden_dim=0, graph=None, init_scale=0.5):
        super().__init__(n_states, graph)
        n = n_states
        self.hidden_dim = hidden_dim
        if hidden_dim:
            self.w1 = nn.Parameter(torch.randn(n, hidden_dim, input_dim) * init_scale / input_dim ** 0.5)
            self.b1 = nn.Parameter(torch.zeros(n, hidden_dim))
            d = hidden_dim
        else:
            d = input_dim
        self.w = nn.Parameter(torch.randn(n, n, d) * init_scale / d ** 0.5)  # [j, i, :]
        self.b = nn.Parameter(torch.randn(n, n) * init_scale)  # [j, i]

    def forward(self, u):
        if self.hidden_dim:
            z = torch.tanh(torch.einsum("jhd,btd->btjh", self.w1, u) + self.b1)
            a = torch.einsum("jid,btjd->btji", self.w, z)
        else:
            a = torch.einsum("jid,btd->btji", self.w, u)
        return self.normalize((a + self.b).transpose(-1, -2))  # -> [b, t, i, j]


def _count_normalize(counts, old_log_probs, dim):
    """M-step of a table: relative frequencies along ``dim``; rows that saw no data keep their values."""
    total = counts.sum(dim, keepdim=True)
    new = safe_log(counts) - safe_log(total)
    return torch.where(total > 0, new, old_log_probs)


class LookupStateNetworks(_Transitions):
    """Quantized inputs ``u_t = sigma_k``: ``N_j`` is a table ``w_ijk = P(x_t = i | x_{t-1} = j, sigma_k)``
    (the paper's setting of Eq. 12).  Stored as logits; exact EM sets them to ``log w_ijk``."""

    def __init__(self, n_states, n_symbols, graph=None, init_scale=1.0):
        super().__init__(n_states, graph)
        self.n_symbols = n_symbols
        self.logits = nn.Parameter(torch.randn(n_symbols, n_states, n_states) * init_scale)  # [k, i, j]

    def log_table(self):
        return self.normalize(self.logits)  # (K, n, n)

    def forward(self, u):
        if u.dtype not in (torch.int64, torch.int32) or u.dim() != 2:
            raise ValueError("LookupStateNetworks expects (B, T) integer symbol ids")
        return self.log_table()[u.clamp(0, self.n_symbols - 1)]

    @torch.no_grad()
    def em_update(self, u, post: Posteriors, mask):
        """Eq. 12: ``w_ijk = sum_{p, t: u_t = k} h_ij,t / sum_{i in S_j} sum_{p, t: u_t = k} h_ij,t``."""
        K, n = self.n_symbols, self.n_states
        h = post.h * mask[:, :, None, None]
        counts = h.new_zeros(K, n, n).index_add_(0, u.clamp(0, K - 1).reshape(-1), h.reshape(-1, n, n))
        self.logits.copy_(_count_normalize(counts, self.log_table(), dim=1))


class MultinomialOutputs(nn.Module):
    """``O_j`` with softmax outputs over ``n_classes`` (a Bernoulli is ``n_classes = 2``).

    ``input_dim=None``: a Moore machine, ``eta_j`` does not depend on the input; otherwise a linear
    (``hidden_dim = 0``) or one-hidden-layer tanh network of ``u_t`` per state (Mealy machine).
    """

    def __init__(self, n_states, n_classes, input_dim=None, hidden_dim=0, init_scale=0.5):
        super().__init__()
        self.n_states, self.n_classes, self.input_dim, self.hidden_dim = n_states, n_classes, input_dim, hidden_dim
        if input_dim is None:
            self.logits = nn.Parameter(torch.randn(n_states, n_classes) * init_scale)
            return
        if hidden_dim:
            self.w1 = nn.Parameter(torch.randn(n_states, hidden_dim, input_dim) * init_scale / input_dim ** 0.5)
            self.b1 = nn.Parameter(torch.zeros(n_states, hidden_dim))
            d = hidden_dim
        else:
            d = input_dim
        self.w = nn.Parameter(torch.randn(n_states, n_classes, d) * init_scale / d ** 0.5)
        self.b = nn.Parameter(torch.randn(n_states, n_classes) * init_scale)

    def log_probs(self, u, shape):
        """``log eta_jt`` (B, T, n, n_classes); ``shape = (B, T)``."""
        if self.input_dim is None:
            return torch.log_softmax(self.logits, -1).expand(*shape, *self.logits.shape)
        if self.hidden_dim:
            z = torch.tanh(torch.einsum("jhd,btd->btjh", self.w1, u) + self.b1)
            a = torch.einsum("jcd,btjd->btjc", self.w, z)
        else:
            a = torch.einsum("jcd,btd->btjc", self.w, u)
        return torch.log_softmax(a + self.b, -1)

    def log_density(self, u, y):
        """``log f_Y(y_t; eta_jt)`` (B, T, n) for class ids ``y`` (B, T); invalid ids are clamped (the
        caller masks steps without a target)."""
        lp = self.log_probs(u, y.shape)
        idx = y.clamp(0, self.n_classes - 1)[:, :, None, None].expand(*lp.shape[:3], 1)
        return lp.gather(-1, idx).squeeze(-1)

    def mean(self, u, shape):
        """``eta_jt`` as probabilities (B, T, n, n_classes)."""
        return self.log_probs(u, shape).exp()

    @torch.no_grad()
    def em_update(self, u, y, post: Posteriors, target_mask):
        if self.input_dim is not None:
            raise TypeError("exact EM needs a lookup table: use MultinomialOutputs(input_dim=None) or "
                            "LookupMultinomialOutputs")
        w = post.zeta_hat * target_mask[:, :, None]  # (B, T, n)
        onehot = F.one_hot(y.clamp(0, self.n_classes - 1), self.n_classes).to(w)
        counts = torch.einsum("btj,btc->jc", w, onehot)
        self.logits.copy_(_count_normalize(counts, torch.log_softmax(self.logits, -1), dim=1))


class LookupMultinomialOutputs(nn.Module):
    """Quantized inputs: ``eta_jk = P(y | x_t = j, u_t = sigma_k)`` is a table (K, n, n_classes)."""

    def __init__(self, n_states, n_classes, n_symbols, init_scale=0.5):
        super().__init__()
        self.n_states, self.n_classes, self.n_symbols = n_states, n_classes, n_symbols
        self.logits = nn.Parameter(torch.randn(n_symbols, n_states, n_classes) * init_scale)

    def log_probs(self, u, shape):
        return torch.log_softmax(self.logits, -1)[u.clamp(0, self.n_symbols - 1)]

    def log_density(self, u, y):
        lp = self.log_probs(u, y.shape)
        idx = y.clamp(0, self.n_classes - 1)[:, :, None, None].expand(*lp.shape[:3], 1)
        return lp.gather(-1, idx).squeeze(-1)

    def mean(self, u, shape):
        return self.log_probs(u, shape).exp()

    @torch.no_grad()
    def em_update(self, u, y, post: Posteriors, target_mask):
        K, n, C = self.n_symbols, self.n_states, self.n_classes
        w = post.zeta_hat * target_mask[:, :, None]
        onehot = F.one_hot(y.clamp(0, C - 1), C).to(w)
        per = (w.unsqueeze(-1) * onehot.unsqueeze(-2)).reshape(-1, n, C)
        counts = per.new_zeros(K, n, C).index_add_(0, u.clamp(0, K - 1).reshape(-1), per)
        self.logits.copy_(_count_normalize(counts, torch.log_softmax(self.logits, -1), dim=2))


class GaussianOutputs(nn.Module):
    """``O_j`` with linear outputs: ``eta_jt = W_j u_t + b_j`` (or a constant ``b_j`` for a Moore machine,
    ``input_dim=None``) is the mean of a diagonal Gaussian with per-state learned variances."""

    def __init__(self, n_states, output_dim, input_dim=None, hidden_dim=0, init_scale=0.5):
        super().__init__()
        self.n_states, self.output_dim, self.input_dim, self.hidden_dim = n_states, output_dim, input_dim, hidden_dim
        self.b = nn.Parameter(torch.randn(n_states, output_dim) * init_scale)
        self.log_sigma = nn.Parameter(torch.zeros(n_states, output_dim))
        if input_dim is None:
            return
        if hidden_dim:
            self.w1 = nn.Parameter(torch.randn(n_states, hidden_dim, input_dim) * init_scale / input_dim ** 0.5)
            self.b1 = nn.Parameter(torch.zeros(n_states, hidden_dim))
            d = hidden_dim
        else:
            d = input_dim
        self.w = nn.Parameter(torch.randn(n_states, output_dim, d) * init_scale / d ** 0.5)

    def mean(self, u, shape):
        """``eta_jt`` (B, T, n, output_dim)."""
        if self.input_dim is None:
            return self.b.expand(*shape, *self.b.shape)
        if self.hidden_dim:
            z = torch.tanh(torch.einsum("jhd,btd->btjh", self.w1, u) + self.b1)
            return torch.einsum("jcd,btjd->btjc", self.w, z) + self.b
        return torch.einsum("jcd,btd->btjc", self.w, u) + self.b

    def log_density(self, u, y):
        mu = self.mean(u, y.shape[:2])
        z = (y.unsqueeze(-2) - mu) * torch.exp(-self.log_sigma)
        return (-0.5 * z.pow(2) - self.log_sigma - 0.5 * math.log(2 * math.pi)).sum(-1)


# --------------------------------------------------------------------------------------------------
# the model and its three training procedures
# --------------------------------------------------------------------------------------------------


class IOHMM(nn.Module):
    """State networks + output networks + initial state distribution ``zeta_0``.

    ``initial``: ``"learned"`` (softmax parameters, re-estimated by EM), ``"uniform"`` or ``"first"``
    (``x_0 = 1`` surely).  Every method takes the state-network input ``u`` and optionally a separate
    output-network input ``u_out`` (default ``u``).  ``y`` holds the targets; ``target_mask`` (B, T)
    marks the steps that have one (intermittent targets; default: every real step); ``mask`` (B, T)
    marks real steps of right-padded sequences.
    """

    def __init__(self, state_networks, output_networks, initial="learned"):
        super().__init__()
        self.state_networks = state_networks
        self.output_networks = output_networks
        n = state_networks.n_states
        if output_networks.n_states != n:
            raise ValueError("state and output networks disagree on the number of states")
        self.n_states = n
        self.initial = initial
        if initial == "learned":
            self.zeta0_logits = nn.Parameter(torch.zeros(n))
        elif initial == "uniform":
            self.register_buffer("fixed_log_zeta0", torch.full((n,), -torch.log(torch.tensor(float(n)))))
        elif initial == "first":
            self.register_buffer("fixed_log_zeta0", torch.full((n,), NEG_INF).index_fill_(0, torch.tensor([0]), 0.0))
        else:
            raise ValueError(f"initial must be learned, uniform or first, not {initial!r}")

    def log_zeta0(self):
        return torch.log_softmax(self.zeta0_logits, 0) if self.initial == "learned" else self.fixed_log_zeta0

    def _masks(self, y, mask, target_mask):
        B, T = y.shape[:2]
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=y.device)
        target_mask = mask if target_mask is None else (target_mask.bool() & mask.bool())
        return mask.bool(), target_mask

    def potentials(self, u, y, target_mask=None, mask=None, u_out=None):
        """``(log_phi, log_f, log_zeta0, mask)``: the inputs of the dynamic programme."""
        mask, target_mask = self._masks(y, mask, target_mask)
        log_phi = self.state_networks(u)
        log_f = self.output_networks.log_density(u if u_out is None else u_out, y)
        log_f = torch.where(target_mask[:, :, None], log_f, torch.zeros_like(log_f))  # no target: f = 1
        return log_phi, log_f, self.log_zeta0().to(log_f), mask

    def log_likelihood(self, u, y, target_mask=None, mask=None, u_out=None):
        """Per-sequence ``log P(y | u)`` (B,), differentiable (training method (a))."""
        return log_likelihood(*self.potentials(u, y, target_mask, mask, u_out))

    def posteriors(self, u, y, target_mask=None, mask=None, u_out=None) -> Posteriors:
        with torch.no_grad():
            return posteriors(*self.potentials(u, y, target_mask, mask, u_out))

    def q_function(self, u, y, post, target_mask=None, mask=None, u_out=None):
        """``Q(Theta; Theta_hat)`` summed over the batch (Eq. 9), differentiable in ``Theta``."""
        log_phi, log_f, log_zeta0, mask = self.potentials(u, y, target_mask, mask, u_out)
        return q_function(log_phi, log_f, log_zeta0, post, mask).sum()

    def predict(self, u, mask=None, u_out=None):
        """Eq. 2 and 3 without targets: ``zeta`` (B, T, n) and the output ``eta_t = sum_j zeta_jt eta_jt``
        (class probabilities of a multinomial, the mean of a Gaussian)."""
        log_phi = self.state_networks(u)
        B, T = log_phi.shape[:2]
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=log_phi.device)
        zeta = state_distribution(log_phi, self.log_zeta0().to(log_phi), mask).exp()
        eta_j = self.output_networks.mean(u if u_out is None else u_out, (B, T))
        return zeta, torch.einsum("btj,btjc->btc", zeta, eta_j)


def em_step(model: IOHMM, u, y, target_mask=None, mask=None, u_out=None):
    """One exact EM iteration for lookup-table networks (Eq. 12); returns the log-likelihood (B,) of the
    parameters *before* the update (the E-step computes it anyway)."""
    for name, net in (("state", model.state_networks), ("output", model.output_networks)):
        if not hasattr(net, "em_update"):
            raise TypeError(f"exact EM needs lookup-table {name} networks, got {type(net).__name__}")
    mask_, target_mask_ = model._masks(y, mask, target_mask)
    post = model.posteriors(u, y, target_mask_, mask_, u_out)
    model.state_networks.em_update(u, post, mask_)
    model.output_networks.em_update(u if u_out is None else u_out, y, post, target_mask_)
    if model.initial == "learned":
        with torch.no_grad():
            model.zeta0_logits.copy_(safe_log(post.zeta0_hat.sum(0) / post.zeta0_hat.shape[0]))
    return post.log_likelihood


def gem_step(model: IOHMM, u, y, target_mask=None, mask=None, u_out=None, lr=0.1, inner_steps=1,
             max_halvings=30):
    """One GEM iteration (Eq. 13-14): E-step posteriors as fixed targets, then ``inner_steps`` gradient
    ascent steps on ``Q``, each step halved until ``Q`` does not decrease (so ``L`` does not either:
    ``L(new) - L(old) >= Q(new; old) - Q(old; old)``).  Returns the log-likelihood (B,) before the step."""
    post = model.posteriors(u, y, target_mask, mask, u_out)
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(inner_steps):
        q0 = model.q_function(u, y, post, target_mask, mask, u_out)
        grads = torch.autograd.grad(q0, params, allow_unused=True)
        old = [p.detach().clone() for p in params]
        step = lr
        accepted = False
        for _ in range(max_halvings):
            with torch.no_grad():
                for p, o, g in zip(params, old, grads):
                    if g is not None:
                        p.copy_(o + step * torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0))
                q1 = model.q_function(u, y, post, target_mask, mask, u_out)
            if q1 >= q0.detach():
                accepted = True
                break
            step /= 2
        if not accepted:
            with torch.no_grad():
                for p, o in zip(params, old):
                    p.copy_(o)
            break
    return post.log_likelihood
