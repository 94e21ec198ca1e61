"""Loading a fairseq checkpoint for forced alignment, and the binarized subset it aligns (imports fairseq)."""
import os
from typing import Optional, Tuple

import torch

import hmm_nmt  # noqa: F401  (registers the plugin; makes checkpoints loadable under torch >= 2.6)
from hmm_nmt_align.base.console import ExtractionError
from hmm_nmt_align.safe_checkpoint import CheckpointError, UnsafeCheckpointError

__all__ = ["load_model", "load_subset", "read_checkpoint", "load_aligner"]


def _dict_size(path: str) -> Optional[int]:
    from fairseq.data import Dictionary

    try:
        return len(Dictionary.load(path))
    except Exception:  # a malformed dictionary: fairseq's own error comes when the task loads it
        return None


def _embedding_rows(state, side: str) -> Optional[int]:
    for key in (f"{side}.embed_tokens.weight", f"{side}.output_projection.weight"):
        w = (state.get("model") or {}).get(key)
        if w is not None and getattr(w, "dim", lambda: 0)() == 2:
            return int(w.shape[0])
    return None


def _languages(folder: str, state) -> Optional[Tuple[str, str]]:
    """(source, target) language of the dictionaries ``dict.SRC.txt``/``dict.TGT.txt`` in ``folder`` that the
    checkpoint ``state`` was trained with, or None when there are none.

    The checkpoint's ``cfg.task.source_lang/target_lang`` when it records them; else fairseq's inference from
    binarized file names (``test.SRC-TGT.SRC.bin``); else the folder's two dictionaries, the direction decided by
    the checkpoint's embedding sizes (one joined dictionary: either order is the same). A checkpoint trained
    without ``--source-lang/--target-lang`` and moved away from its data-bin (examples/toy/demo.sh) is found so.
    """
    from fairseq.data.data_utils import infer_language_pair

    task = state["cfg"].task
    src, tgt = getattr(task, "source_lang", None), getattr(task, "target_lang", None)

    def has(x):
        return os.path.isfile(os.path.join(folder, f"dict.{x}.txt"))

    if src and tgt:
        return (src, tgt) if has(src) and has(tgt) else None
    s, t = infer_language_pair(folder)
    if s and t and has(s) and has(t):
        return s, t
    langs = sorted(n[len("dict."):-len(".txt")] for n in os.listdir(folder)
                   if n.startswith("dict.") and n.endswith(".txt") and n.count(".") == 2)
    if src in langs or tgt in langs:  # one side recorded: the other is the other dictionary
        rest = [x for x in langs if x not in (src, tgt)]
        if len(rest) == 1:
            return (src, rest[0]) if src else (rest[0], tgt)
    if len(langs) != 2:
        if len(langs) > 2:
            raise ExtractionError(f"{folder} holds {len(langs)} dictionaries ({', '.join(f'dict.{x}.txt' for x in langs)}) "
                                  "and the checkpoint does not record its languages: give a folder with its two")
        return None
    a, b = langs
    enc, dec = _embedding_rows(state, "encoder"), _embedding_rows(state, "decoder")
    na, nb = _dict_size(os.path.join(folder, f"dict.{a}.txt")), _dict_size(os.path.join(folder, f"dict.{b}.txt"))
    fits = [(x, y) for x, y, nx, ny in ((a, b, na, nb), (b, a, nb, na)) if (enc, dec) == (nx, ny)]
    if len(fits) == 1:
        return fits[0]
    with open(os.path.join(folder, f"dict.{a}.txt"), "rb") as fa, open(os.path.join(folder, f"dict.{b}.txt"), "rb") as fb:
        if fa.read() == fb.read():
            return a, b  # one joined dictionary under two names
    if fits:
        raise ExtractionError(f"{folder}: dict.{a}.txt and dict.{b}.txt both fit the checkpoint, which does not record "
                              "its source language: cannot tell the direction")
    raise ExtractionError(f"{folder}: dict.{a}.txt ({na} symbols) and dict.{b}.txt ({nb}) do not fit the checkpoint "
                          f"(embeddings of {enc} source / {dec} target symbols)")


def _dictionary_dir(path: str, state) -> Tuple[str, dict]:
    """The folder with the checkpoint's ``dict.SRC.txt`` and ``dict.TGT.txt``: the checkpoint's own folder,
    else the data-bin it was trained on; and the overrides naming the languages."""
    task_cfg = state["cfg"].task
    src, tgt = getattr(task_cfg, "source_lang", None), getattr(task_cfg, "target_lang", None)
    trained = str(getattr(task_cfg, "data", "") or "").split(os.pathsep)[0]
    tried = []
    for folder in (os.path.dirname(os.path.abspath(path)), trained):
        if not folder or not os.path.isdir(folder):
            continue
        tried.append(folder)
        pair = _languages(folder, state)
        if pair:
            return folder, {"source_lang": pair[0], "target_lang": pair[1]}
    names = f"dict.{src}.txt and dict.{tgt}.txt" if src and tgt else "the dictionaries"
    raise ExtractionError(f"no {names} next to the checkpoint or in its training data-bin "
                          f"({', '.join(tried) or 'not recorded'}): give --data DIR (a folder with the dictionaries)")


def _one_line(e: Exception, limit: int = 300) -> str:
    detail = " ".join(str(e).split())  # one line, even for a multi-line state_dict mismatch
    if len(detail) > limit:
        detail = detail[:limit] + " ..."
    return f"{type(e).__name__}: {detail}" if detail else type(e).__name__


def read_checkpoint(path: str, flag: str = "--path") -> dict:
    """The checkpoint's state (fairseq's ``load_checkpoint_to_cpu``), its cfg as an omegaconf object;
    ``ExtractionError`` naming ``flag`` for a missing file or one that is no fairseq checkpoint."""
    if not os.path.isfile(path):
        raise ExtractionError(f"{flag}: checkpoint not found: {path}")
    if os.path.getsize(path) == 0:
        raise ExtractionError(f"{flag} {path}: not a fairseq checkpoint (empty file)")
    from fairseq import checkpoint_utils

    try:  # through hmm_nmt_align.safe_checkpoint (hmm_nmt.compat.safe_load): weights only, allow-listed classes
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except UnsafeCheckpointError as e:  # a pickle payload: refused, never run
        raise ExtractionError(f"{flag} {e}") from None
    except CheckpointError as e:
        raise ExtractionError(f"{flag} {path}: not a fairseq checkpoint ({e.detail or e.what})") from None
    except Exception as e:  # a zip of torch tensors without fairseq's fields, ...
        raise ExtractionError(f"{flag} {path}: not a fairseq checkpoint ({_one_line(e)})") from None
    if not isinstance(state, dict) or "model" not in state or (state.get("cfg") is None and state.get("args") is None):
        raise ExtractionError(f"{flag} {path}: not a fairseq checkpoint (no model and cfg in it)")
    if state.get("cfg") is None:
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        state["cfg"] = convert_namespace_to_omegaconf(state["args"])
        state["args"] = None
    return state


def load_model(path: str, data: Optional[str] = None, cpu: bool = False, flag: str = "--path",
               data_flag: str = "--data"):
    """Load a checkpoint with its task pointed at ``data``; returns ``(model, task)`` in eval mode.

    ``data`` is a data-bin, or any folder with the dictionaries ``dict.SRC.txt`` / ``dict.TGT.txt``; None
    looks for them next to the checkpoint, then in the data-bin recorded in the checkpoint. ``flag`` and
    ``data_flag`` name the options in the errors (``--rev-path``/``--rev-data`` for the reverse model).
    """
    if not os.path.isfile(path):
        raise ExtractionError(f"{flag}: checkpoint not found: {path}")
    if data is not None and not os.path.isdir(data):
        raise ExtractionError(f"{data_flag}: data-bin directory not found: {data}")
    state = read_checkpoint(path, flag)
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name

    if data is None:
        data, overrides = _dictionary_dir(path, state)
    else:
        pair = _languages(data, state)
        overrides = {"source_lang": pair[0], "target_lang": pair[1]} if pair else {}
    try:
        overwrite_args_by_name(state["cfg"], {"data": data, **overrides})
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    except Exception as e:  # dictionary of another size, unknown architecture, ...
        raise ExtractionError(f"cannot load checkpoint {path} ({flag}) with data {data}: {_one_line(e, 400)}") from None
    model = models[0]
    device = "cuda" if torch.cuda.is_available() and not cpu else "cpu"
    model.to(device).float().eval()
    return model, task


def load_subset(task, subset: str):
    """The task's dataset for ``subset`` (``test``, ``valid``, ``train``, ``test1`` ...)."""
    if subset in task.datasets:
        return task.dataset(subset)
    try:
        task.load_dataset(subset, combine=False, epoch=1)
    except (FileNotFoundError, KeyError) as e:
        msg = e.args[0] if e.args else str(e)
        raise ExtractionError(f"--subset {subset}: {msg}") from None
    dataset = task.dataset(subset)
    if getattr(dataset, "tgt", None) is None:
        raise ExtractionError(f"--subset {subset}: no target side; forced alignment needs reference pairs")
    return dataset


def load_aligner(text: str, data: Optional[str], cpu: bool, flag: str = "--path", data_flag: str = "--data"):
    """``(model, task)`` of ``--path``: one checkpoint, or an :class:`~hmm_nmt.aligner.ensemble.AlignerEnsemble`
    of several with the same dictionaries (the first one's task)."""
    paths = [p for p in text.split(os.pathsep) if p]
    loaded = [load_model(p, data, cpu, flag=flag, data_flag=data_flag) for p in paths]
    if len(loaded) == 1:
        return loaded[0]
    from hmm_nmt.aligner.ensemble import AlignerEnsemble

    first = loaded[0][1]
    for (_, task), path in zip(loaded[1:], paths[1:]):
        for side in ("source_dictionary", "target_dictionary"):
            if getattr(task, side).symbols != getattr(first, side).symbols:
                raise ExtractionError(f"{flag}: {path} has another {side.split('_')[0]} dictionary than "
                                      f"{paths[0]}: an ensemble needs one dictionary")
    try:
        return AlignerEnsemble([m for m, _ in loaded]), first
    except ValueError as e:
        raise ExtractionError(f"{flag}: {e}") from None
