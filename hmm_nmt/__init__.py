"""hmm_nmt: hidden Markov models for neural machine translation, as a fairseq plugin.

Importing this package (what ``fairseq-* --user-dir hmm_nmt`` does) registers every model,
architecture, criterion and task of the plugin, makes fairseq checkpoints loadable under
torch >= 2.6 (see :mod:`hmm_nmt.checkpoint_compat`), makes fairseq's checkpoint copies atomic
(:mod:`hmm_nmt.atomic_checkpoints`) and, on machines without CUDA, lets fairseq's
distributed training run on CPU processes with gloo (see :mod:`hmm_nmt.distributed_cpu`).

The HMM mathematics lives in :mod:`hmm_nmt.hmm` and does not import fairseq.
"""
import importlib
import os

__version__ = "0.1.0"

from hmm_nmt import checkpoint_compat  # noqa: E402

checkpoint_compat.install()

from hmm_nmt import numpy_compat  # noqa: E402

numpy_compat.install()


def _import_all(subpackage):
    # fairseq's own convention: every module of models/, criterions/, tasks/ registers itself on import
    folder = os.path.join(os.path.dirname(__file__), subpackage)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and not name.startswith("_"):
            importlib.import_module(f"hmm_nmt.{subpackage}.{name[:-3]}")


try:
    import fairseq  # noqa: F401
except ImportError:  # pure-torch use of hmm_nmt.hmm without fairseq installed
    fairseq = None

if fairseq is not None:
    for _sub in ("tasks", "criterions", "models"):
        _import_all(_sub)
    from hmm_nmt import atomic_checkpoints, distributed_cpu  # noqa: E402

    atomic_checkpoints.install()
    distributed_cpu.install()
