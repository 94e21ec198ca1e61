"""glibc's heap kept for reuse in the trainers of ``hmm-nmt-align-corpus``.

The separable lexicon's (rows, V) tensors are tens of MB each. glibc serves blocks that large with fresh ``mmap``
pages (above its mmap threshold: 128 KB, raised on the fly up to 32 MB) and returns them to the kernel on
``free``, so each training step faults their pages in and zeroes them again. :func:`trainer_env` raises the mmap
and trim thresholds in a trainer's environment (glibc reads them when the process starts): freed blocks stay with
the process for the next step. The same tensors are alive at the same time, so the peak memory is the same
(``benchmarks/heap.py`` measures both). Other C libraries ignore the variables. Standard library only.
"""
from typing import Dict, Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "trainer_env"]

MMAP_THRESHOLD = 1 << 30  # bytes: blocks below it come from the heap (freed blocks are reused) instead of mmap
TRIM_THRESHOLD = (1 << 31) - 1  # bytes of free memory at the heap's top kept before returning it to the kernel

_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def trainer_env(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` with glibc's thresholds for a child process; a value the user set is kept."""
    return {**_ENV, **env}

