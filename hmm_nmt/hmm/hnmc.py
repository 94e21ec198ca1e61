r"""Hidden neural Markov chains (HNMC, HNMC2, HNMC-CN), section 3 of Azeraf et al. (ICAART 2021).

An HNMC layer replaces the product of HMM parameters in one step of the entropic forward-backward
(:mod:`hmm_nmt.hmm.efb`) by a feed-forward network with a positive last activation ``f`` (mELU, exp or
sigmoid) and then runs EFB; its output at every position is the posterior vector ``p(h_t | y_{1:T})``
(B, T, N), which a next layer can take as its observation (stacking), or a classifier can read.

* **HNMC** models ``a_j(i) L_{y_t}(i) / pi(i)`` by ``f(W y_t + U onehot(j) + c)_i``.
* **HNMC2** models ``a2_{k,j}(i) L_{y_t}(i) / pi(i)`` by ``f(W y_t + U onehot(k, j) + c)_i`` and runs the
  order-2 EFB over state pairs.
* **HNMC-CN** models, with two networks, ``I_{j,y_{t-1}}(i) L_{y_t}(i) / a_j(i)`` by
  ``f(W_1 y_{t-1} + W_2 y_t + U_I onehot(j) + c_I)_i`` and ``J_{i,y_t}(j) / pi(j)`` by
  ``f(W_3 y_t + U_J onehot(i) + c_J)_j``; their product is the potential of Eq. (4)-(5).

As in the paper the networks have no hidden layer (one affine map of the concatenated inputs), and the
first step starts from a constant virtual initial state ``h_{-1}`` (uniform weights; for HNMC-CN the
virtual observation ``y_{-1}`` is 0). Only the one-hot part of the input depends on the previous state,
so the (B, T, N, N) potentials are the affine map of ``y_t`` broadcast against an (N, N) matrix.

:class:`HNMCStack` stacks K layers (figure 4); :func:`make_architecture` builds the paper's three
architectures (1: the model only, 2: the model and a feed-forward classifier, 3: two models stacked).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.chain import chain_forward, chain_posteriors
from hmm_nmt.hmm.chain2 import chain2_posteriors, viterbi2
from hmm_nmt.hmm.crf import constrain_potentials
from hmm_nmt.hmm.efb import log_positive
from hmm_nmt.hmm.semiring import Semiring

__all__ = ["HNMCLayer", "HNMC2Layer", "HNMCCNLayer", "HNMCStack", "LAYERS", "make_architecture"]


def _affine(in_features, out_features):
    """Weight and bias initialised like ``nn.Linear(in_features, out_features)``."""
    lin = nn.Linear(in_features, out_features)
    return lin.weight, lin.bias


def _constrained(log_G, constraints, mask):
    """``log_G`` with a tag scheme's ``(allowed, start, end)`` added (see :func:`constrain_potentials`)."""
    return log_G if constraints is None else constrain_potentials(log_G, *constraints, mask)


class HNMCLayer(nn.Module):
    """Order-1 hidden neural Markov chain over ``num_states`` states, input (B, T, input_dim)."""

    order = 1

    def __init__(self, input_dim, num_states, activation="melu"):
        super().__init__()
        self.input_dim, self.num_states, self.activation = input_dim, num_states, activation
        log_positive(torch.zeros(1), activation)  # validate the name now
        # one affine map of [y_t ; onehot(j)]; its one-hot columns form U (N_out=i, N_in=j)
        w, b = _affine(input_dim + num_states, num_states)
        self.weight_y = nn.Parameter(w[:, :input_dim].detach().clone())
        self.weight_prev = nn.Parameter(w[:, input_dim:].detach().clone())
        self.bias = nn.Parameter(b.detach().clone())

    def log_potentials(self, y):
        """(B, T, N, N) log potentials ``[b, t, j, i] = log f(W y_t + U_{:, j} + c)_i``."""
        z = F.linear(y, self.weight_y, self.bias).unsqueeze(2) + self.weight_prev.t()
        return log_positive(z, self.activation)

    def forward(self, y, mask=None, log_init=None):
        """Log posteriors (B, T, N) of the states given all observations (entropic forward-backward).

        ``log_init``: log weights of the virtual initial state (default: uniform, the paper's constant)."""
        return chain_posteriors(self.log_potentials(y), log_init, mask)[0]

    def viterbi(self, y, mask=None, log_init=None, constraints=None):
        """The best state path under the chain's potentials (the MAP of the distribution whose marginals
        :meth:`forward` returns): ``(log score (B,), path (B, T))``, -1 on padding."""
        return chain.viterbi(_constrained(self.log_potentials(y), constraints, mask), log_init, mask)

    def forward_only(self, y, mask=None, log_alpha0=None):
        """Normalised log entropic forward (B, T, N): the state given the observations up to t only."""
        if self.activation != "exp":
            return chain_forward(self.log_potentials(y), log_alpha0, mask)[0]
        # exp activation: G_t(j, i) = exp(W y_t + c)_i exp(U_ij) factorises (an HMM with transition
        # weights exp(U)), so each step is one (B, N) x (N, N) product, no (B, T, N, N) tensor
        B = y.size(0)
        a = self.initial_log_alpha(B, y) if log_alpha0 is None else log_alpha0.expand(B, self.num_states)
        obs = F.linear(y, self.weight_y, self.bias)
        return chain.forward(self.weight_prev.t(), a, mask, log_emit=obs, semiring=self._exp_semiring()).log_alpha

    def _exp_semiring(self):
        return _RowShiftedExp(self.weight_prev.t())  # [j, i]

    def initial_log_alpha(self, batch_size, like):
        return like.new_full((batch_size, self.num_states), -math.log(self.num_states))

    def step(self, y_t, log_alpha_prev):
        """One forward step: y_t (B, D), previous normalised log alpha (B, N) -> new one (B, N)."""
        if self.activation == "exp":
            obs = F.linear(y_t, self.weight_y, self.bias)
            return chain.filter_step(log_alpha_prev, self.weight_prev.t(), obs, semiring=self._exp_semiring())[1]
        return chain.filter_step(log_alpha_prev, self.log_potentials(y_t.unsqueeze(1))[:, 0])[1]


class _RowShiftedExp(Semiring):
    """The log semiring for one fixed (N, N) log-weight matrix U, its products run as matmuls with exp(U)
    computed once: each row j is shifted by its maximum so exp never overflows (the largest weight is 1, so
    some sum is >= the largest alpha and nothing underflows as a whole)."""

    name = "row_shifted_exp"

    def __init__(self, log_matrix):
        self.shift = log_matrix.max(dim=1).values  # per source state j
        self.trans = torch.exp(log_matrix - self.shift.unsqueeze(1))

    def matvec(self, v, _log_matrix):
        w = v + self.shift
        c = w.max(dim=-1, keepdim=True).values
        return torch.log(torch.matmul(torch.exp(w - c), self.trans).clamp(min=torch.finfo(w.dtype).tiny)) + c


class HNMC2Layer(nn.Module):
    """Order-2 hidden neural Markov chain (HNMC2): the network sees ``y_t`` and the pair (k, j)."""

    order = 2

    def __init__(self, input_dim, num_states, activation="melu"):
        super().__init__()
        self.input_dim, self.num_states, self.activation = input_dim, num_states, activation
        log_positive(torch.zeros(1), activation)
        N = num_states
        w, b = _affine(input_dim + N * N, N)
        self.weight_y = nn.Parameter(w[:, :input_dim].detach().clone())
        self.weight_pair = nn.Parameter(w[:, input_dim:].detach().clone())  # (i, k*N + j)
        self.bias = nn.Parameter(b.detach().clone())

    def log_potentials(self, y):
        """(B, T, N, N, N) log potentials ``[b, t, k, j, i]``."""
        N = self.num_states
        u = self.weight_pair.t().reshape(N, N, N)  # [k, j, i]
        z = F.linear(y, self.weight_y, self.bias)[:, :, None, None, :] + u
        return log_positive(z, self.activation)

    def forward(self, y, mask=None, log_init=None):
        """Log posteriors (B, T, N); ``log_init`` (N, N): weights of the virtual initial pair."""
        return chain2_posteriors(self.log_potentials(y), log_init, mask)[0]

    def viterbi(self, y, mask=None, log_init=None, constraints=None):
        """The best state path of the order-2 chain: ``(log score (B,), path (B, T))``, -1 on padding."""
        return viterbi2(_constrained(self.log_potentials(y), constraints, mask), log_init, mask)


class HNMCCNLayer(nn.Module):
    """Hidden neural Markov chain with complexified noise (HNMC-CN), two networks (section 3.2)."""

    order = 1

    def __init__(self, input_dim, num_states, activation="melu"):
        super().__init__()
        self.input_dim, self.num_states, self.activation = input_dim, num_states, activation
        log_positive(torch.zeros(1), activation)
        D, N = input_dim, num_states
        # network 1: I_{j,y_{t-1}}(i) L_{y_t}(i) / a_j(i) from [y_{t-1}; y_t; onehot(j)], output over i
        w, b = _affine(2 * D + N, N)
        self.weight_i_prev_obs = nn.Parameter(w[:, :D].detach().clone())
        self.weight_i_obs = nn.Parameter(w[:, D:2 * D].detach().clone())
        self.weight_i_prev = nn.Parameter(w[:, 2 * D:].detach().clone())
        self.bias_i = nn.Parameter(b.detach().clone())
        # network 2: J_{i,y_t}(j) / pi(j) from [y_t; onehot(i)], output over j
        w, b = _affine(D + N, N)
        self.weight_j_obs = nn.Parameter(w[:, :D].detach().clone())
        self.weight_j_next = nn.Parameter(w[:, D:].detach().clone())
        self.bias_j = nn.Parameter(b.detach().clone())

    def log_potentials(self, y):
        """(B, T, N, N) log potentials ``[b, t, j, i]`` (y_{-1} = 0)."""
        y_prev = F.pad(y, (0, 0, 1, 0))[:, :-1]
        zi = (F.linear(y_prev, self.weight_i_prev_obs) + F.linear(y, self.weight_i_obs, self.bias_i)).unsqueeze(2)
        zi = zi + self.weight_i_prev.t()  # [j, i]
        zj = F.linear(y, self.weight_j_obs, self.bias_j).unsqueeze(2) + self.weight_j_next.t()  # [i, j]
        return log_positive(zi, self.activation) + log_positive(zj, self.activation).transpose(-1, -2)

    def forward(self, y, mask=None, log_init=None):
        """Log posteriors (B, T, N)."""
        return chain_posteriors(self.log_potentials(y), log_init, mask)[0]

    def viterbi(self, y, mask=None, log_init=None, constraints=None):
        """The best state path under the chain's potentials (the MAP of the distribution whose marginals
        :meth:`forward` returns): ``(log score (B,), path (B, T))``, -1 on padding."""
        return chain.viterbi(_constrained(self.log_potentials(y), constraints, mask), log_init, mask)


LAYERS = {"hnmc": HNMCLayer, "hnmc2": HNMC2Layer, "hnmc_cn": HNMCCNLayer}


class HNMCStack(nn.Module):
    """K stacked layers (figure 4): the posteriors of layer k are the observations of layer k+1.

    ``forward`` returns the log posteriors of the last layer (B, T, sizes[-1]).
    """

    def __init__(self, kind, input_dim, sizes, activation="melu"):
        super().__init__()
        if kind not in LAYERS:
            raise ValueError(f"unknown HNMC kind {kind!r} ({', '.join(LAYERS)})")
        dims = [input_dim] + list(sizes)
        self.layers = nn.ModuleList(LAYERS[kind](dims[k], dims[k + 1], activation) for k in range(len(sizes)))

    def forward(self, y, mask=None):
        log_post = None
        for k, layer in enumerate(self.layers):
            log_post = layer(y if k == 0 else log_post.exp(), mask)
        return log_post

    def viterbi(self, y, mask=None, constraints=None):
        """The best state path of the last layer, its observations the posteriors of the layers below;
        ``constraints`` ``(allowed, start, end)`` over the last layer's states (a tag scheme's)."""
        for layer in self.layers[:-1]:
            y = layer(y, mask).exp()
        return self.layers[-1].viterbi(y, mask, constraints=constraints)


class _Arch(nn.Module):
    def __init__(self, stack, classifier):
        super().__init__()
        self.stack, self.classifier = stack, classifier

    def forward(self, y, mask=None):
        log_post = self.stack(y, mask)
        if self.classifier is None:
            return log_post
        return F.log_softmax(self.classifier(log_post.exp()), dim=-1)

    def viterbi(self, y, mask=None, constraints=None):
        """Architectures 1 and 3: the best output path of the last chain (its states are the outputs)."""
        if self.classifier is not None:
            raise ValueError("architecture 2 ends with a classifier, not a chain over the outputs: no Viterbi path")
        return self.stack.viterbi(y, mask, constraints)


def make_architecture(kind, architecture, input_dim, num_outputs, hidden_size, num_layers=1, activation="melu"):
    """The paper's architectures; the module maps (B, T, input_dim) to (B, T, num_outputs) log-probs.

    1: one model whose states are the outputs; 2: ``num_layers`` models of ``hidden_size`` states then an
    affine map and softmax; 3: ``num_layers`` models of ``hidden_size`` states then a model whose states
    are the outputs (``num_layers=1``: two models stacked).
    """
    if architecture == 1:
        return _Arch(HNMCStack(kind, input_dim, [num_outputs], activation), None)
    if architecture == 2:
        return _Arch(HNMCStack(kind, input_dim, [hidden_size] * num_layers, activation),
                     nn.Linear(hidden_size, num_outputs))
    if architecture == 3:
        return _Arch(HNMCStack(kind, input_dim, [hidden_size] * num_layers + [num_outputs], activation), None)
    raise ValueError(f"architecture must be 1, 2 or 3, got {architecture}")
