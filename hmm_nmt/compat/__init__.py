"""Patches that make fairseq 0.12 and torch work together for this plugin, installed on ``import hmm_nmt``.

* :mod:`hmm_nmt.compat.checkpoints`: fairseq checkpoints load under torch >= 2.6 (``weights_only``);
* :mod:`hmm_nmt.compat.safe_load`: fairseq reads checkpoints through the project's safe loader (a checkpoint that
  would run code is refused in one line);
* :mod:`hmm_nmt.compat.numpy2`: fairseq's datasets on numpy >= 2 (``np.compat.long``);
* :mod:`hmm_nmt.compat.atomic_checkpoints`: fairseq's checkpoint copies are atomic;
* :mod:`hmm_nmt.compat.batch_tail`: validation, ``fairseq-generate`` and every other non-training iterator keep
  their last batch (fairseq 0.12 drops it when its size is not a multiple of 8, skipping test sentences);
* :mod:`hmm_nmt.compat.distributed_cpu`: fairseq's distributed training on CPU processes (gloo), and with it
  :mod:`hmm_nmt.compat.cpu_bf16`: ``--cpu --bf16`` as CPU autocast;
* :mod:`hmm_nmt.compat.topk_plateau`: with ``--patience``, a validation plateau starts the next step of
  ``--lexicon-topk-schedule`` instead of stopping training;
* :mod:`hmm_nmt.compat.cli_errors`: fairseq's command lines print a missing file or a refused option as one
  line (exit 2), not a traceback.

Every ``install()`` is guarded by :func:`install_once`.
"""
from hmm_nmt.compat import (
    atomic_checkpoints,
    batch_tail,
    checkpoints,
    cli_errors,
    cpu_bf16,
    distributed_cpu,
    numpy2,
    safe_load,
    topk_plateau,
)
from hmm_nmt.compat._once import install_once

__all__ = ["atomic_checkpoints", "batch_tail", "checkpoints", "cli_errors", "cpu_bf16", "distributed_cpu", "numpy2",
           "safe_load", "topk_plateau", "install_once",
           "install_torch", "install_fairseq", "install_all"]


def install_torch() -> None:
    """The patches needed without fairseq's classes: checkpoint loading, numpy >= 2."""
    checkpoints.install()
    numpy2.install()


def install_fairseq() -> None:
    """The patches of fairseq itself (call once fairseq is importable): the safe checkpoint loader, atomic
    checkpoint copies, evaluation batches that keep their tail, the top-k schedule's plateau rule and, on a
    machine without CUDA, the CPU launcher (which also turns ``--cpu --bf16`` into CPU autocast)."""
    safe_load.install()
    atomic_checkpoints.install()
    batch_tail.install()
    topk_plateau.install()
    cli_errors.install()
    distributed_cpu.install()


def install_all() -> None:
    """Every patch, in the order ``import hmm_nmt`` installs them; fairseq's only where fairseq imports."""
    install_torch()
    try:
        import fairseq  # noqa: F401
    except ImportError:
        return
    install_fairseq()
