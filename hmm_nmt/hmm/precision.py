"""Which floating-point type the HMM arithmetic runs in.

Log-sum-exp, the dynamic programs and every accumulation run in float32 whatever the model's dtype (bf16 or
fp16 matmuls included), except in float64, which is kept: tests compare different computation paths (exact
vs pruned, chunked vs materialised, autograd vs explicit) in float64, where they agree to ~1e-12 on any CPU,
instead of in float32, where summing the same terms in another order differs by the CPU's rounding.
"""
import torch
from torch import Tensor


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`accumulation_dtype` (a no-op for float32 and float64)."""
    return x.to(accumulation_dtype(x.dtype))
