"""Make fairseq 0.12 checkpoints loadable under torch >= 2.6.

torch 2.6 switched ``torch.load`` to ``weights_only=True``: only tensors, containers and allow-listed classes
may be unpickled. fairseq 0.12 calls ``torch.load(f, map_location=...)`` without the flag, and its
checkpoints pickle a few non-tensor objects (``argparse.Namespace`` for legacy ``args``, numpy scalars in the
training state, enum values of fairseq's dataclass choices in ``cfg``, and omegaconf containers in checkpoints
re-saved after loading, e.g. by fairseq's ``average_checkpoints.py``; and, when a distributed run resumes, the
``_TensorPlaceholder`` objects with which rank 0 broadcasts the loaded state to the other ranks). Instead of turning the check off for
every caller (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``), we allow-list exactly those classes, process-wide, through
``torch.serialization.add_safe_globals``; anything else in a checkpoint is still refused.
"""
import argparse
import enum
import importlib

import torch

from hmm_nmt.compat._once import install_once


def _fairseq_enums():
    """Enum classes defined by fairseq's dataclass choices (they may appear in saved cfg dicts)."""
    out = []
    try:
        constants = importlib.import_module("fairseq.dataclass.constants")
    except Exception:  # fairseq absent: nothing of it can be in a checkpoint we load
        return out
    for value in vars(constants).values():
        if isinstance(value, type) and issubclass(value, enum.Enum):
            out.append(value)
    return out


def safe_globals():
    """The classes a fairseq checkpoint may pickle besides tensors and plain containers."""
    import numpy as np

    classes = [argparse.Namespace, np.dtype, np.ndarray]
    # numpy scalars are pickled through numpy's reconstruct helpers and dtype classes
    for modname in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            mod = importlib.import_module(modname)
        except Exception:
            continue
        classes += [getattr(mod, n) for n in ("scalar", "_reconstruct") if hasattr(mod, n)]
        break
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        classes += [v for v in vars(dtypes).values() if isinstance(v, type) and issubclass(v, np.dtype)]
    classes += _fairseq_enums()
    try:  # distributed resume: rank 0 broadcasts the loaded state with tensors replaced by placeholders
        from fairseq.distributed.utils import _TensorPlaceholder

        classes.append(_TensorPlaceholder)
    except ImportError:
        pass
    classes += _omegaconf_classes()
    return classes


def _omegaconf_classes():
    """What a re-saved ``cfg`` (an OmegaConf DictConfig) pickles: its containers, nodes and metadata."""
    import collections
    import typing

    try:
        from omegaconf import DictConfig, ListConfig, base, nodes
    except ImportError:
        return []
    node_types = [v for v in vars(nodes).values() if isinstance(v, type) and issubclass(v, nodes.Node)]
    return [DictConfig, ListConfig, base.Metadata, base.ContainerMetadata, typing.Any, collections.defaultdict,
            int, float, bool, str, dict, list] + node_types


@install_once
def install():
    """Allow-list the classes above for ``weights_only`` loading (no-op on old torch)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(safe_globals())
