"""glibc's heap kept for reuse in the processes of ``hmm-nmt-align-corpus``.

The lexicon's (rows, V) tensors are tens of MB each. glibc serves blocks that large with fresh ``mmap`` pages
(above its mmap threshold: 128 KB, raised on the fly up to 32 MB) and returns them to the kernel on ``free``, so
each training step and alignment batch faults its pages in and zeroes them again. On a 2-core Xeon a logits
matmul into a fresh 38 MB tensor took twice as long as into memory the process had freed before; with the
thresholds below, two first-order trainers side by side ran 7-12% faster per update at the same peak memory (the
same tensors are alive at the same time; freed memory stays with the process for the next step instead).

:func:`trainer_env` sets the thresholds in a child's environment (glibc reads them at start), :func:`keep_freed`
in the calling process (``mallopt``, before it forks its workers, which inherit it). Elsewhere than glibc both do
nothing. Standard library only.
"""
import ctypes
import sys
from typing import Dict, Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "trainer_env", "keep_freed"]

MMAP_THRESHOLD = 1 << 30  # bytes: blocks below it come from the heap (freed blocks are reused) instead of mmap
TRIM_THRESHOLD = (1 << 31) - 1  # bytes of free memory at the heap's top kept before returning it to the kernel

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def trainer_env(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` with glibc's thresholds for a child process; a value the user set is kept."""
    return {**_ENV, **env}


def keep_freed() -> bool:
    """Set the thresholds in this process (glibc on Linux); False where there is no ``mallopt``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
