r"""State-biased softmax emissions: N per-state word distributions for the price of about one.

A chain decoder whose states emit words needs, at every target position t, one distribution over the
vocabulary per state i and their mixture under the state weights w_t(i):

    eta_{t,i}(v) = exp(l_t(v) + B_i(v)) / Z_{t,i},      Z_{t,i} = sum_v exp(l_t(v) + B_i(v)),
    p_t(v)       = sum_i w_t(i) eta_{t,i}(v),

with ``l_t`` (M, V) context logits shared by all states (a transformer decoder's output layer) and ``B``
(N, V) a per-state log-linear word preference that does not depend on t. Written out, both Z and the
mixture are matrix products, never an (M, N, V) tensor:

    Z_t        = exp(l_t) @ exp(B)^T                         (M, V) x (V, N)
    p_t(v)     = exp(l_t(v)) * [ (w_t / Z_t) @ exp(B) ](v)    (M, N) x (N, V)

so the cost is 2 M N V multiply-adds, against M d V for the logits themselves (N = 16, d = 128: a quarter
more), instead of N full output layers.

Numerics: every exponential is shifted by a (detached) maximum, and :func:`bounded_bias` keeps
``|B_i(v)| <= c``. Then each sum has one term >= exp(-2c) relative to its shift (the argmax word of l_t
for Z, the heaviest state for the mixture), so with c = 8 nothing underflows in float32 however peaked
l_t is (tested against the (M, N, V) logsumexp in float64 with logits spanning 10^4 nats).
"""
import torch

__all__ = ["bounded_bias", "log_normalizers", "log_emission", "mixture_log_probs"]


def bounded_bias(raw, bound):
    """``c tanh(raw / c)``: the per-state bias B with ``|B| < c`` (identity near 0)."""
    return bound * torch.tanh(raw / bound)


def log_normalizers(logits, log_bias):
    """``log Z`` (..., N): ``log sum_v exp(logits[..., v] + log_bias[i, v])`` by one matrix product."""
    m = logits.amax(-1, keepdim=True).detach()
    mb = log_bias.amax(-1, keepdim=True).detach()  # (N, 1)
    s = torch.matmul(torch.exp(logits - m), torch.exp(log_bias - mb).transpose(0, 1))
    return torch.log(s) + m + mb.transpose(0, 1)


def log_emission(logits, log_bias, log_z, tokens):
    """``log eta_{t,i}(tokens_t)`` (..., N) for ``tokens`` (...) (indices into V)."""
    gold = logits.gather(-1, tokens.unsqueeze(-1))  # (..., 1)
    return gold + log_bias.transpose(0, 1)[tokens] - log_z


def mixture_log_probs(logits, log_bias, log_coef):
    """``log sum_i exp(log_coef[..., i]) exp(logits[..., v] + log_bias[i, v])`` (..., V).

    With ``log_coef = log w - log Z`` this is the mixture ``log p_t(v)`` of the module docstring.
    """
    mb = log_bias.amax(-1, keepdim=True).detach()  # (N, 1)
    a = log_coef + mb.transpose(0, 1)
    c = a.amax(-1, keepdim=True).detach()
    s = torch.matmul(torch.exp(a - c), torch.exp(log_bias - mb))
    return logits + torch.log(s) + c
