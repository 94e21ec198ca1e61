"""The IOHMM's state networks ``N_j`` (transition probabilities phi, on a constrained graph) and output
networks ``O_j`` (multinomial and Gaussian densities; lookup-table versions for exact EM)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from hmm_nmt.hmm.iohmm.dp import Posteriors
from hmm_nmt.hmm.logspace import NEG_INF, safe_log


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


def _add_per_state_net(module, n_states, out_dim, input_dim, hidden_dim, init_scale):
    """Give ``module`` one linear (``hidden_dim = 0``) or one-hidden-layer tanh network of ``u_t`` per state
    ``j``: parameters ``w1``, ``b1`` (hidden layer) and ``w`` (n, out_dim, d), no output bias (each owner
    keeps its own). Set on ``module`` itself so that checkpoints keep their parameter names."""
    if hidden_dim:
        module.w1 = nn.Parameter(torch.randn(n_states, hidden_dim, input_dim) * init_scale / input_dim ** 0.5)
        module.b1 = nn.Parameter(torch.zeros(n_states, hidden_dim))
        d = hidden_dim
    else:
        d = input_dim
    module.w = nn.Parameter(torch.randn(n_states, out_dim, d) * init_scale / d ** 0.5)


def _per_state_net(module, u):
    """The networks of :func:`_add_per_state_net` at every step, all states at once: (B, T, n, out_dim)."""
    if module.hidden_dim:
        z = torch.tanh(torch.einsum("jhd,btd->btjh", module.w1, u) + module.b1)
        return torch.einsum("jcd,btjd->btjc", module.w, z)
    return torch.einsum("jcd,btd->btjc", module.w, u)


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
        self.hidden_dim = hidden_dim
        _add_per_state_net(self, n_states, n_states, input_dim, hidden_dim, init_scale)  # w: [j, i, :]
        self.b = nn.Parameter(torch.randn(n_states, n_states) * init_scale)  # [j, i]

    def forward(self, u):
        return self.normalize((_per_state_net(self, u) + self.b).transpose(-1, -2))  # -> [b, t, i, j]


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


class _Categorical(nn.Module):
    """What every softmax output network shares: subclasses give ``log_probs(u, shape)`` (B, T, n, n_classes)."""

    def log_density(self, u, y):
        """``log f_Y(y_t; eta_jt)`` (B, T, n) for class ids ``y`` (B, T); invalid ids are clamped (the
        caller masks steps without a target)."""
        lp = self.log_probs(u, y.shape)
        idx = y.clamp(0, self.n_classes - 1)[:, :, None, None].expand(*lp.shape[:3], 1)
        return lp.gather(-1, idx).squeeze(-1)

    def mean(self, u, shape):
        """``eta_jt`` as probabilities (B, T, n, n_classes)."""
        return self.log_probs(u, shape).exp()


class MultinomialOutputs(_Categorical):
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
        _add_per_state_net(self, n_states, n_classes, input_dim, hidden_dim, init_scale)
        self.b = nn.Parameter(torch.randn(n_states, n_classes) * init_scale)

    def log_probs(self, u, shape):
        """``log eta_jt`` (B, T, n, n_classes); ``shape = (B, T)``."""
        if self.input_dim is None:
            return torch.log_softmax(self.logits, -1).expand(*shape, *self.logits.shape)
        return torch.log_softmax(_per_state_net(self, u) + self.b, -1)

    @torch.no_grad()
    def em_update(self, u, y, post: Posteriors, target_mask):
        if self.input_dim is not None:
            raise TypeError("exact EM needs a lookup table: use MultinomialOutputs(input_dim=None) or "
                            "LookupMultinomialOutputs")
        w = post.zeta_hat * target_mask[:, :, None]  # (B, T, n)
        onehot = F.one_hot(y.clamp(0, self.n_classes - 1), self.n_classes).to(w)
        counts = torch.einsum("btj,btc->jc", w, onehot)
        self.logits.copy_(_count_normalize(counts, torch.log_softmax(self.logits, -1), dim=1))


class LookupMultinomialOutputs(_Categorical):
    """Quantized inputs: ``eta_jk = P(y | x_t = j, u_t = sigma_k)`` is a table (K, n, n_classes)."""

    def __init__(self, n_states, n_classes, n_symbols, init_scale=0.5):
        super().__init__()
        self.n_states, self.n_classes, self.n_symbols = n_states, n_classes, n_symbols
        self.logits = nn.Parameter(torch.randn(n_symbols, n_states, n_classes) * init_scale)

    def log_probs(self, u, shape):
        return torch.log_softmax(self.logits, -1)[u.clamp(0, self.n_symbols - 1)]

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
        if input_dim is not None:
            _add_per_state_net(self, n_states, output_dim, input_dim, hidden_dim, init_scale)

    def mean(self, u, shape):
        """``eta_jt`` (B, T, n, output_dim)."""
        if self.input_dim is None:
            return self.b.expand(*shape, *self.b.shape)
        return _per_state_net(self, u) + self.b

    def log_density(self, u, y):
        mu = self.mean(u, y.shape[:2])
        z = (y.unsqueeze(-2) - mu) * torch.exp(-self.log_sigma)
        return (-0.5 * z.pow(2) - self.log_sigma - 0.5 * math.log(2 * math.pi)).sum(-1)


