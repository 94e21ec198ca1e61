"""hmm_nmt: hidden Markov models for neural machine translation, as a fairseq plugin.

Importing this package (what ``fairseq-* --user-dir hmm_nmt`` does) registers every model,
architecture, criterion and task of the plugin, makes fairseq checkpoints loadable under
torch >= 2.6 (see :mod:`hmm_nmt.compat.checkpoints`), makes fairseq's checkpoint copies atomic
(:mod:`hmm_nmt.compat.atomic_checkpoints`) and, on machines without CUDA, lets fairseq's
distributed training run on CPU processes with gloo (see :mod:`hmm_nmt.compat.distributed_cpu`).

The HMM mathematics lives in :mod:`hmm_nmt.hmm` and does not import fairseq.
"""
import importlib
import os

__version__ = "0.1.0"

from hmm_nmt import compat  # noqa: E402

compat.install_torch()  # checkpoint loading under torch >= 2.6, numpy >= 2


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
    compat.install_fairseq()  # atomic checkpoint copies; on CPU-only machines the gloo launcher and bf16 autocast
