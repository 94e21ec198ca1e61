"""Make fairseq 0.12 checkpoints loadable under torch >= 2.6.

torch 2.6 switched ``torch.load`` to ``weights_only=True``: only tensors, containers and allow-listed classes
may be unpickled. fairseq 0.12 calls ``torch.load`` with a ``map_location`` but without the flag, and its
checkpoints pickle a few non-tensor objects (``argparse.Namespace`` for legacy ``args``, numpy scalars in the
training state, enum values of fairseq's dataclass choices in ``cfg``, and omegaconf containers in checkpoints
re-saved after loading, e.g. by fairseq's ``average_checkpoints.py``; and, when a distributed run resumes, the
``_TensorPlaceholder`` objects with which rank 0 broadcasts the loaded state to the other ranks). Instead of turning the check off for
every caller (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``), we allow-list exactly those classes, process-wide, through
``torch.serialization.add_safe_globals``; anything else in a checkpoint is still refused.

The list itself, and the loader every checkpoint of the project goes through, are
:mod:`hmm_nmt_align.safe_checkpoint` (importable without fairseq); :mod:`hmm_nmt.compat.safe_load` routes
fairseq's own ``load_checkpoint_to_cpu`` to that loader. What is installed here serves fairseq's remaining
``torch.load`` calls (the distributed broadcast of a loaded state).
"""
import torch

from hmm_nmt.compat._once import install_once
from hmm_nmt_align.safe_checkpoint import safe_globals

__all__ = ["safe_globals", "install"]


@install_once
def install():
    """Allow-list the classes above for ``weights_only`` loading (no-op on old torch)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(safe_globals())
