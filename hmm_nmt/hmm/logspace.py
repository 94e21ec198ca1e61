"""Log-space arithmetic shared by every HMM core: one masking constant, safe reductions, length masks.

Masking policy. Impossible events (source padding, states off a support, padded emissions) get the finite
:data:`MASKED` = -1e9 wherever a gradient flows through them: exp() of it is exactly 0 in float32 and float64,
and unlike -inf it never turns into NaN in the backward pass of logsumexp / log_softmax. -inf is kept where it
is a *value* a caller asks for (log 0 of a forbidden IOHMM transition, the log-probability of an impossible
sequence); the reductions here (:func:`masked_logsumexp`, :func:`safe_log`, :func:`log_matvec`) return -inf
there with a zero, never NaN, gradient.
"""
import torch
from torch import Tensor

__all__ = ["MASKED", "NEG_INF", "masked_logsumexp", "safe_log", "log_matvec", "lengths_to_mask"]

MASKED = -1e9
NEG_INF = float("-inf")


def masked_logsumexp(x: Tensor, dim: int) -> Tensor:
    """logsumexp that returns -inf (with zero gradient, no NaN) where every entry is -inf."""
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    # safe_log: log(0) of an all -inf row would send 0/0 = NaN back when its own gradient is 0
    return safe_log((x - m).exp().sum(dim)) + m.squeeze(dim)


def safe_log(x: Tensor) -> Tensor:
    """``log x`` with ``log 0 = -inf`` and a zero (not NaN) gradient at 0."""
    if not (x.requires_grad and torch.is_grad_enabled()):
        return x.log()  # no gradient to protect: one op instead of four
    return torch.where(x > 0, x.clamp_min(torch.finfo(x.dtype).tiny).log(), NEG_INF)


def log_matvec(phi: Tensor, log_v: Tensor, transpose: bool = False) -> Tensor:
    """``log sum_j phi[..., i, j] v_j`` (``transpose``: ``log sum_i phi[..., i, j] v_i``) for log ``v``.

    ``phi`` holds probabilities (zeros allowed), so the product runs as a matmul; ``v`` is shifted by its
    maximum so nothing overflows.
    """
    m = log_v.amax(-1, keepdim=True).detach()  # the value does not depend on m: no gradient needed
    m = m.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # all -inf: any finite shift will do
    v = (log_v - m).exp()
    if transpose:
        s = (v.unsqueeze(-2) @ phi).squeeze(-2)
    else:
        s = (phi @ v.unsqueeze(-1)).squeeze(-1)
    return safe_log(s) + m


def lengths_to_mask(lengths: Tensor, max_len: int = None) -> Tensor:
    """(B,) lengths -> (B, T) bool mask, True on the first ``lengths[b]`` positions."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
