"""The one way the project reads a checkpoint: ``torch.load(..., weights_only=True)`` with an allow-list.

A checkpoint is a pickle, and unpickling may call any function the file names (an object whose
``__reduce__`` returns ``(os.system, ("...",))``). A model directory or checkpoint is what users download and
share, so nothing here ever unpickles with ``weights_only=False``: :func:`load_checkpoint_state` passes
``weights_only=True`` explicitly (so ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` cannot turn the check off) and
allows, besides tensors and plain containers, exactly the classes a fairseq checkpoint pickles
(:func:`safe_globals`). Before unpickling it lists the checkpoint's globals without running anything
(``torch.serialization.get_unsafe_globals_in_checkpoint``) and refuses a file that names any other, in one
line naming the file and the globals.

Every loader goes through here: the tools, ``benchmarks/``, the tests, and fairseq itself
(:mod:`hmm_nmt.compat.safe_load` routes ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` to it).

It imports torch and numpy, never fairseq unless the checkpoint pickles one of fairseq's classes (an enum
of its dataclass choices); it sits below the plugin (importing anything under ``hmm_nmt`` imports
fairseq), in the tools' package but outside the pure ``hmm_nmt_align.base``, which must not import torch.
"""
import argparse
import enum
import importlib
import os
import pickle
import sys
import warnings

__all__ = ["CheckpointError", "UnsafeCheckpointError", "check_checkpoint_file", "load_checkpoint_state", "safe_globals"]


class CheckpointError(Exception):
    """A file that is no loadable checkpoint. ``str()`` is one line, ``PATH: WHAT (DETAIL)``; ``detail`` is the
    underlying error (``KeyError: 101`` for a text file), for callers that phrase ``what`` their own way."""

    def __init__(self, path: str, what: str, detail: str = ""):
        super().__init__(path, what, detail)
        self.path, self.what, self.detail = path, what, detail

    def __str__(self):
        return f"{self.path}: {self.what}" + (f" ({self.detail})" if self.detail else "")


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint that would call something else than the allow-listed classes when unpickled; refused,
    nothing of it was run."""


def _fairseq_classes():
    """The enum classes of fairseq's dataclass choices (saved cfg dicts may hold them) and the placeholders of
    a distributed resume (rank 0 broadcasts the loaded state with its tensors replaced by them)."""
    out = []
    try:
        constants = importlib.import_module("fairseq.dataclass.constants")
    except Exception:  # fairseq absent: nothing of it can be in a checkpoint we load
        return out
    out += [v for v in vars(constants).values() if isinstance(v, type) and issubclass(v, enum.Enum)]
    try:
        from fairseq.distributed.utils import _TensorPlaceholder

        out.append(_TensorPlaceholder)
    except ImportError:
        pass
    return out


def _numpy_classes():
    import numpy as np

    classes = [np.dtype, np.ndarray]
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


def safe_globals(with_fairseq: bool = True):
    """The classes a fairseq checkpoint may pickle besides tensors and plain containers: ``argparse.Namespace``
    (legacy ``args``), numpy scalars and arrays (training state), omegaconf containers (a re-saved ``cfg``, as
    fairseq's ``average_checkpoints.py`` writes) and, ``with_fairseq``, fairseq's own (imports fairseq)."""
    classes = [argparse.Namespace] + _numpy_classes() + _omegaconf_classes()
    return classes + (_fairseq_classes() if with_fairseq else [])


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split("\n")[0].split())
    text = text[:limit] + " ..." if len(text) > limit else text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _torch_refusal(e: BaseException) -> str:
    """What torch's weights_only unpickler refused, without its paragraphs of advice."""
    keep = [" ".join(part.split()) for part in str(e).split("\n\n")]
    keep = [k for k in keep if k and not k.startswith(("Weights only load failed", "Check the documentation"))]
    return (" ".join(keep) or _first_line(e))[:300]


REFUSED = "refused: unpickling it could run code, so it was not loaded"


def _refused(path, names) -> UnsafeCheckpointError:
    shown = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return UnsafeCheckpointError(path, REFUSED, f"it calls {shown}; only tensors, containers and the classes of "
                                                "fairseq checkpoints are allowed")


def _unsafe_names(torch, path):
    """The globals of the checkpoint not allowed now, read without unpickling; None when torch cannot tell
    (an old torch, a file that is not a zip checkpoint: torch.load's own weights_only check decides)."""
    scan = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if scan is None:
        return None
    try:
        return list(scan(path))
    except Exception:  # not a zip, a truncated archive, an opcode the scanner skips: left to torch.load
        return None


def _check_file(path: str) -> None:
    """Refuse what cannot be a checkpoint from its first bytes: missing, a folder, empty, neither a zip archive
    (torch >= 1.6) nor a pickle (the legacy format)."""
    if not os.path.exists(path):
        raise CheckpointError(path, "no such checkpoint")
    if os.path.isdir(path):
        raise CheckpointError(path, "a folder, not a checkpoint")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise CheckpointError(path, "cannot read", e.strerror or str(e)) from None
    if not head:
        raise CheckpointError(path, "not a checkpoint", "empty file")
    if head != b"PK\x03\x04" and head[:1] != b"\x80":
        raise CheckpointError(path, "not a PyTorch checkpoint", "neither a zip archive nor a pickle")


def _allowed(torch, path):
    """The allow-list for ``path``: fairseq's classes too when fairseq is loaded or the checkpoint names them."""
    classes = safe_globals(with_fairseq="fairseq" in sys.modules)
    if "fairseq" not in sys.modules:
        with torch.serialization.safe_globals(classes):
            names = _unsafe_names(torch, path)
        if names and any(n.startswith("fairseq.") for n in names):
            classes += _fairseq_classes()  # a checkpoint that pickles fairseq's enums: import them to allow them
    return classes


def check_checkpoint_file(path) -> None:
    """Refuse ``path`` when it cannot be a checkpoint or names a global outside the allow-list, reading only its
    first bytes and its pickle's opcodes (nothing is unpickled; the tensors are not read). A file that passes
    may still fail in :func:`load_checkpoint_state` (a truncated archive, a pickle the scan cannot read)."""
    path = os.fspath(path)
    _check_file(path)
    import torch

    if hasattr(torch.serialization, "safe_globals"):
        with torch.serialization.safe_globals(_allowed(torch, path)):
            names = _unsafe_names(torch, path)
        if names:
            raise _refused(path, names)


def load_checkpoint_state(path, map_location="cpu"):
    """The object saved in the checkpoint ``path`` (a fairseq checkpoint: a dict with ``model``, ``cfg`` ...).

    Raises :class:`UnsafeCheckpointError` (a ``pickle.UnpicklingError``) for a checkpoint that would call
    anything but the allow-listed classes, and :class:`CheckpointError` for a missing, empty or unreadable
    file; each message is one line naming ``path``.
    """
    path = os.fspath(path)
    _check_file(path)
    import torch

    if not hasattr(torch.serialization, "safe_globals"):  # torch < 2.5: the allow-list process-wide
        add = getattr(torch.serialization, "add_safe_globals", None)
        if add is not None:
            add(safe_globals(with_fairseq="fairseq" in sys.modules))
        return _load(torch, path, map_location)
    with torch.serialization.safe_globals(_allowed(torch, path)):
        names = _unsafe_names(torch, path)
        if names:
            raise _refused(path, names)
        return _load(torch, path, map_location)


def _load(torch, path, map_location):
    try:
        with warnings.catch_warnings():  # a hand-made pickle of protocol > 2: refused below, in one line
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if str(e).startswith("Weights only load failed"):  # an unsupported global or opcode: nothing was called
            raise UnsafeCheckpointError(path, REFUSED, _torch_refusal(e)) from None
        raise CheckpointError(path, "not a PyTorch checkpoint", _first_line(e)) from None
    except (KeyboardInterrupt, MemoryError):
        raise
    except OSError as e:
        raise CheckpointError(path, "cannot read", e.strerror or _first_line(e)) from None
    except Exception as e:  # a text file (KeyError: 101), a truncated archive, another format
        raise CheckpointError(path, "not a PyTorch checkpoint", _first_line(e)) from None
