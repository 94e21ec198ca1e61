r"""Entropic forward-backward (EFB) and classic forward-backward for the HMM, the HMM of order 2 (HMM2)
and the HMM with complexified noise (HMM-CN), after Azeraf et al., "Introducing the hidden neural Markov
chain framework" (ICAART 2021), section 2 and appendix.

Notation (the paper's; states are indexed i, j, k in {0..N-1}, time t in {0..T-1} here, 0-based):

* ``pi(i) = p(x_t = i)`` (stationary marginal), ``a_j(i) = p(x_{t+1} = i | x_t = j)``,
  ``a2_{k,j}(i) = p(x_{t+2} = i | x_t = k, x_{t+1} = j)`` (HMM2),
* ``L_y(i) = p(x_t = i | y_t = y)``: the *posterior* of the state given one observation, which is what a
  neural network can produce from arbitrary features of ``y`` (the classic algorithm needs the
  likelihood ``b_i(y) = p(y | x = i)`` instead),
* HMM-CN: ``I_{j,y}(i) = p(x_{t+1} = i | x_t = j, y_t = y)`` and ``J_{j,y}(i) = p(x_t = i | x_{t+1} = j,
  y_{t+1} = y)``.

Entropic forward (Eq. 2) ``alpha_{t+1}(i) = L_{y_{t+1}}(i) / pi(i) * sum_j alpha_t(j) a_j(i)``, entropic
backward (Eq. 3) ``beta_t(i) = sum_j L_{y_{t+1}}(j) / pi(j) * beta_{t+1}(j) a_i(j)``, and the posterior
(Eq. 1) ``p(x_t = i | y) = alpha_t(i) beta_t(i) / sum_j alpha_t(j) beta_t(j)``. Since
``L_y(i) / pi(i) = b_i(y) / p(y)``, alpha and beta are the classic ones divided by ``p(y_1)...p(y_t)``
(appendix, Eq. 6-9), so the posteriors agree with the classic forward-backward.

One generic dynamic programme
-----------------------------
Every recursion above is a chain with positive *potentials* ``G_t(j, i)`` (from state j at t-1 to i at
t), started from a virtual state ``x_{-1}`` with weights ``init``::

    alpha_t(i) = sum_j alpha_{t-1}(j) G_t(j, i),   alpha_{-1} = init
    beta_t(j)  = sum_i G_{t+1}(j, i) beta_{t+1}(i), beta_{T-1} = 1

(order 2: the same over state pairs, ``G_t(k, j, i)`` from pair (k, j) to pair (j, i)). The models only
differ by their potentials; e.g. EFB for the HMM is ``G_0(j, i) = L_{y_0}(i)`` and ``G_t(j, i) =
a_j(i) L_{y_t}(i) / pi(i)``, the classic FB ``G_0(j, i) = pi(i) b_i(y_0)`` and ``G_t(j, i) = a_j(i)
b_i(y_t)``, both with a uniform ``init``. :func:`~hmm_nmt.hmm.chain.chain_posteriors` and
:func:`~hmm_nmt.hmm.chain2.chain2_posteriors` (the shared chain module, re-exported here) run it in
log space, normalising alpha and beta at every step (the per-step constants cancel in Eq. 1 and are
accumulated into ``log_Z`` for the forward), so arbitrarily long sequences never underflow, and
everything is differentiable by autograd (the posteriors are also the gradient of ``log_Z`` with respect
to the log-potentials, which the tests check).

Batching: potentials are (B, T, N, N) (order 2: (B, T, N, N, N)); ``mask`` (B, T) is True on the real
positions of right-padded sequences. At padded positions alpha is carried unchanged and beta is 1, so
the posteriors of the real positions are exactly those of the unpadded sequence.
"""
import torch

from hmm_nmt.hmm.chain import chain_backward, chain_forward, chain_posteriors
from hmm_nmt.hmm.chain2 import chain2_backward, chain2_forward, chain2_posteriors
from hmm_nmt.hmm.logspace import lengths_to_mask

__all__ = [
    "log_melu", "log_positive",
    "chain_forward", "chain_backward", "chain_posteriors",
    "chain2_forward", "chain2_backward", "chain2_posteriors",
    "efb_hmm", "classic_fb_hmm", "efb_hmm2", "classic_fb_hmm2", "efb_hmm_cn", "classic_fb_hmm_cn",
    "lengths_to_mask",
]


# ------------------------------------------------------------------------------------------------
# positive activations (in log space: the cores take log-potentials)
def log_melu(x):
    """log of mELU(x) = 1 + x if x > 0 else exp(x) (the paper's positive activation), computed stably."""
    pos = x.clamp(min=0)
    # log1p(max(x, 0)) + min(x, 0); writing min(x, 0) as x - max(x, 0) keeps the slope 1 at x = 0 exactly
    return torch.log1p(pos) + (x - pos)


def log_positive(x, activation="melu"):
    """log f(x) for the positive last activations f of the paper: ``melu``, ``exp`` or ``sigmoid``."""
    if activation == "melu":
        return log_melu(x)
    if activation == "exp":
        return x
    if activation == "sigmoid":
        return torch.nn.functional.logsigmoid(x)
    raise ValueError(f"unknown positive activation {activation!r} (melu, exp, sigmoid)")


# ------------------------------------------------------------------------------------------------
# the paper's algorithms, in its parameters (all arguments are logs; L, b, I, J, c are per position)
def _first(log_x, N):
    """Potential of step 0 that does not depend on the virtual predecessor: (B, N) -> (B, 1, N, N)."""
    return log_x.unsqueeze(1).unsqueeze(2).expand(-1, 1, N, N)


def efb_hmm(log_L, log_pi, log_a, mask=None):
    """Entropic forward-backward for the HMM, Eq. (1)-(3).

    ``log_L`` (B, T, N): ``log L_{y_t}(i) = log p(x_t = i | y_t)``; ``log_pi`` (N,); ``log_a`` (N, N)
    ``[j, i] = log a_j(i)``. Returns ``(log_post, log_Z)``; log_Z is ``log p(y) - sum_t log p(y_t)``.
    """
    N = log_L.size(-1)
    rest = log_a.view(1, 1, N, N) + (log_L[:, 1:] - log_pi).unsqueeze(2)
    log_G = torch.cat([_first(log_L[:, 0], N), rest], dim=1)
    return chain_posteriors(log_G, None, mask)


def classic_fb_hmm(log_pi, log_a, log_b, mask=None):
    """Classic forward-backward: ``log_b`` (B, T, N) emission log-likelihoods ``log b_i(y_t)``.
    Returns ``(log_post, log p(y))``."""
    N = log_b.size(-1)
    rest = log_a.view(1, 1, N, N) + log_b[:, 1:].unsqueeze(2)
    log_G = torch.cat([_first(log_pi + log_b[:, 0], N), rest], dim=1)
    return chain_posteriors(log_G, None, mask)


def _first2(log_x, N):
    return log_x.view(-1, 1, 1, 1, N).expand(-1, 1, N, N, N)


def efb_hmm2(log_L, log_pi, log_a, log_a2, mask=None):
    """Entropic forward-backward for the HMM of order 2 (section 2.3).

    ``log_a`` (N, N) first transition ``[j, i]``, ``log_a2`` (N, N, N) ``[k, j, i] = log a2_{k,j}(i)``.
    With the uniform virtual pair, alpha^2 at t=1 is ``L_{y_0}(j) a_j(i) L_{y_1}(i) / pi(i)`` up to a
    constant, i.e. the paper's alpha^2_2, and the t=0 posterior is the paper's first-step formula.
    """
    B, T, N = log_L.shape
    parts = [_first2(log_L[:, 0], N)]
    if T > 1:
        parts.append(log_a.view(1, 1, 1, N, N).expand(B, 1, N, N, N) + (log_L[:, 1] - log_pi).view(B, 1, 1, 1, N))
    if T > 2:
        parts.append(log_a2.view(1, 1, N, N, N) + (log_L[:, 2:] - log_pi).view(B, T - 2, 1, 1, N))
    return chain2_posteriors(torch.cat(parts, dim=1), None, mask)


def classic_fb_hmm2(log_pi, log_a, log_a2, log_b, mask=None):
    """Classic forward-backward for the HMM2 over state pairs; returns ``(log_post, log p(y))``."""
    B, T, N = log_b.shape
    parts = [_first2(log_pi + log_b[:, 0], N)]
    if T > 1:
        parts.append(log_a.view(1, 1, 1, N, N).expand(B, 1, N, N, N) + log_b[:, 1].view(B, 1, 1, 1, N))
    if T > 2:
        parts.append(log_a2.view(1, 1, N, N, N) + log_b[:, 2:].view(B, T - 2, 1, 1, N))
    return chain2_posteriors(torch.cat(parts, dim=1), None, mask)


def efb_hmm_cn(log_L, log_pi, log_a, log_I, log_J, mask=None):
    """Entropic forward-backward for the HMM with complexified noise, Eq. (4)-(5).

    ``log_I`` (B, T, N, N) ``[t, j, i] = log I_{j,y_t}(i) = log p(x_{t+1} = i | x_t = j, y_t)`` (the last
    position is unused); ``log_J`` (B, T, N, N) ``[t, i, j] = log J_{i,y_t}(j) = log p(x_{t-1} = j | x_t =
    i, y_t)`` (the first position is unused). The potential from j at t-1 to i at t is
    ``I_{j,y_{t-1}}(i) L_{y_t}(i) J_{i,y_t}(j) / (pi(j) a_j(i))``.
    """
    N = log_L.size(-1)
    rest = (log_I[:, :-1] + log_L[:, 1:].unsqueeze(2) + log_J[:, 1:].transpose(-1, -2)
            - log_pi.view(1, 1, N, 1) - log_a.view(1, 1, N, N))
    log_G = torch.cat([_first(log_L[:, 0], N), rest], dim=1)
    return chain_posteriors(log_G, None, mask)


def classic_fb_hmm_cn(log_p1, log_I, log_c, mask=None):
    """Classic forward-backward of the HMM-CN (appendix): ``alpha'_1(i) = p(x_1 = i, y_1)`` (``log_p1``
    (B, N)), ``alpha'_{t+1}(i) = sum_j alpha'_t(j) I_{j,y_t}(i) p(y_{t+1} | x_t = j, x_{t+1} = i)`` with
    ``log_c`` (B, T, N, N) ``[t, j, i] = log p(y_t | x_{t-1} = j, x_t = i)`` (first position unused).
    Returns ``(log_post, log p(y))``."""
    N = log_p1.size(-1)
    log_G = torch.cat([_first(log_p1, N), log_I[:, :-1] + log_c[:, 1:]], dim=1)
    return chain_posteriors(log_G, None, mask)
