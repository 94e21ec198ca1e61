"""Which floating-point type the HMM arithmetic runs in.

Log-sum-exp, the dynamic programs and every accumulation run in float32 whatever the model's dtype (bf16 or
fp16 matmuls included), except in float64, which is kept: tests compare different computation paths (exact
vs pruned, chunked vs materialised, autograd vs explicit) in float64, where they agree to ~1e-12 on any CPU,
instead of in float32, where summing the same terms in another order differs by the CPU's rounding.

The lexicon's matmuls may run in bf16 (``--lexicon-dtype``); :func:`lexicon_dtype` resolves that choice per
device, since bf16 only pays where the hardware multiplies it natively.
"""
import contextlib
import functools
import logging

import torch
from torch import Tensor

logger = logging.getLogger(__name__)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; everything else accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def upcast(x: Tensor) -> Tensor:
    """``x`` in :func:`accumulation_dtype` (a no-op for float32 and float64)."""
    return x.to(accumulation_dtype(x.dtype))


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bf16 matrices in hardware: CUDA GPUs from Ampere on; x86 CPUs with
    AVX512-BF16 or AMX; other CPUs where oneDNN has bf16 kernels. Elsewhere torch emulates bf16 matmuls: on a
    2-core AMD EPYC with AVX2 only (Zen 3), the first order's lexicon trained 12x (exact) and 5.7x (top-4
    pruned) slower in bf16 than in float32 (docs/speed.md)."""
    device = torch.device(device)
    try:
        if device.type == "cuda":
            try:
                return bool(torch.cuda.is_bf16_supported(including_emulation=False))
            except TypeError:  # older torch: no emulation argument
                return bool(torch.cuda.is_bf16_supported())
        if device.type == "cpu":
            cpu = torch.cpu
            if getattr(cpu, "_is_avx2_supported", lambda: False)():  # x86: the instructions, not oneDNN's emulation
                return bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()
                            or getattr(cpu, "_is_amx_tile_supported", lambda: False)())
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (RuntimeError, AttributeError):
        return False
    return False


LEXICON_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
LEXICON_DTYPE_CHOICES = ("fp32", "bf16", "auto")


@functools.lru_cache(maxsize=None)
def _resolve(name: str, device_type: str, device_index) -> torch.dtype:
    device = torch.device(device_type, device_index) if device_index is not None else torch.device(device_type)
    if name == "auto":
        native = native_bf16(device)
        logger.info("--lexicon-dtype auto: %s on %s (%s)", "bf16" if native else "fp32", device,
                    "native bf16 matmuls" if native else "bf16 matmuls would be emulated")
        return torch.bfloat16 if native else torch.float32
    if name == "bf16" and not native_bf16(device):
        logger.warning("--lexicon-dtype bf16 on %s, which has no native bf16 matmuls: torch emulates them, several "
                       "times slower than fp32 (--lexicon-dtype auto picks fp32 here)", device)
    return LEXICON_DTYPES[name]


def lexicon_dtype(name: str, device: torch.device) -> torch.dtype:
    """The matmul dtype of ``--lexicon-dtype name`` on ``device``: ``fp32``, ``bf16`` (with a warning where bf16
    is emulated), or ``auto``: bf16 where :func:`native_bf16`, else fp32."""
    if name not in LEXICON_DTYPE_CHOICES:
        raise ValueError(f"--lexicon-dtype: unknown value {name!r} (choices: {', '.join(LEXICON_DTYPE_CHOICES)})")
    device = torch.device(device)
    return _resolve(name, device.type, device.index)


def autocast(name: str, device: torch.device):
    """A context in which the matmuls of a whole model run in ``name``'s dtype on ``device`` (resolved as
    :func:`lexicon_dtype`): bf16 autocast, or nothing for fp32. The HMM code keeps its accumulations in fp32."""
    device = torch.device(device)
    if lexicon_dtype(name, device) == torch.bfloat16:
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
