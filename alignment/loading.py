"""Loading a fairseq checkpoint for forced alignment, and the binarized subset it aligns (imports fairseq)."""
import os
from typing import Optional, Tuple

import torch

import hmm_nmt  # noqa: F401  (registers the plugin; makes checkpoints loadable under torch >= 2.6)
from hmm_nmt.aligner.matrices import ExtractionError

__all__ = ["load_model", "load_subset"]


def _dictionary_dir(path: str, task_cfg) -> Tuple[str, dict]:
    """The folder with the checkpoint's ``dict.SRC.txt`` and ``dict.TGT.txt``: the checkpoint's own folder,
    else the data-bin it was trained on; and the overrides naming the languages when the checkpoint does not
    (fairseq then infers them from the training data-bin's file names)."""
    from fairseq.data.data_utils import infer_language_pair

    src, tgt = getattr(task_cfg, "source_lang", None), getattr(task_cfg, "target_lang", None)
    trained = str(getattr(task_cfg, "data", "") or "").split(os.pathsep)[0]
    tried = []
    for folder in (os.path.dirname(os.path.abspath(path)), trained):
        if not folder or not os.path.isdir(folder):
            continue
        tried.append(folder)
        s, t = (src, tgt) if src and tgt else infer_language_pair(folder)
        if s and t and all(os.path.isfile(os.path.join(folder, f"dict.{x}.txt")) for x in (s, t)):
            return folder, {"source_lang": s, "target_lang": t}
    names = f"dict.{src}.txt and dict.{tgt}.txt" if src and tgt else "the dictionaries"
    raise ExtractionError(f"no {names} next to the checkpoint or in its training data-bin "
                          f"({', '.join(tried) or 'not recorded'}): give --data DIR (a folder with the dictionaries)")


def load_model(path: str, data: Optional[str] = None, cpu: bool = False):
    """Load a checkpoint with its task pointed at ``data``; returns ``(model, task)`` in eval mode.

    ``data`` is a data-bin, or any folder with the dictionaries ``dict.SRC.txt`` / ``dict.TGT.txt``; None
    looks for them next to the checkpoint, then in the data-bin recorded in the checkpoint.
    """
    if not os.path.isfile(path):
        raise ExtractionError(f"--path: checkpoint not found: {path}")
    if data is not None and not os.path.isdir(data):
        raise ExtractionError(f"--data: data-bin directory not found: {data}")
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        if state.get("cfg") is None:
            from fairseq.dataclass.utils import convert_namespace_to_omegaconf

            state["cfg"] = convert_namespace_to_omegaconf(state["args"])
            state["args"] = None
        overrides = {}
        if data is None:
            data, overrides = _dictionary_dir(path, state["cfg"].task)
        overwrite_args_by_name(state["cfg"], {"data": data, **overrides})
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    except ExtractionError:
        raise
    except Exception as e:  # corrupt file, dictionary of another size, unknown architecture, ...
        detail = " ".join(str(e).split())  # one line, even for a multi-line state_dict mismatch
        if len(detail) > 400:
            detail = detail[:400] + " ..."
        raise ExtractionError(f"cannot load checkpoint {path} with data {data}: {type(e).__name__}: {detail}") from None
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
