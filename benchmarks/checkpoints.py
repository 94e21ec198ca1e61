"""Which checkpoint a benchmark decodes: fairseq's best on validation, or the average of the N best."""
import glob
import os

from benchmarks.common import BenchmarkError
from hmm_nmt_align.base.atomic import atomic_output
from hmm_nmt_align.safe_checkpoint import CheckpointError, load_checkpoint_state


def average_checkpoints(paths, out_path):
    """Parameter average of fairseq checkpoints (what fairseq's scripts/average_checkpoints.py does)."""
    import torch

    avg, first = None, None
    for p in paths:
        # the state as saved, as fairseq's script reads it, so that the saved cfg stays a plain dict (fairseq's
        # load_checkpoint_to_cpu would turn it into a DictConfig); weights only, without importing fairseq
        try:
            state = load_checkpoint_state(p)
        except CheckpointError as e:  # truncated, or a pickle payload (refused, never run)
            raise BenchmarkError(f"cannot average: {e}") from None
        if first is None:
            first = state
            avg = {k: v.clone().double() if v.is_floating_point() else v.clone() for k, v in state["model"].items()}
        else:
            if set(state["model"]) != set(avg):
                raise BenchmarkError(f"{p} has other parameters than {paths[0]}")
            for k, v in state["model"].items():
                if v.is_floating_point():
                    avg[k] += v.double()
    for k, v in avg.items():
        if v.is_floating_point():
            avg[k] = (v / len(paths)).to(first["model"][k].dtype)
    first["model"] = avg
    first["last_optimizer_state"] = None  # not needed to decode; keeps the file small
    with atomic_output(out_path) as tmp:
        torch.save(first, tmp)


def select_checkpoint(jdir, average_best):
    """(checkpoint path, how it was chosen) of the job directory ``jdir`` for ``--average-best``."""
    ckpt_dir = os.path.join(jdir, "checkpoints")
    if average_best <= 1:
        return os.path.join(ckpt_dir, "checkpoint_best.pt"), "best validation loss"
    kept = sorted(glob.glob(os.path.join(ckpt_dir, "checkpoint.best_*.pt")))
    if not kept:
        raise BenchmarkError(f"no checkpoint.best_*.pt in {ckpt_dir} to average")
    out = os.path.join(jdir, f"checkpoint_avg{len(kept)}.pt")
    if not os.path.exists(out):
        average_checkpoints(kept, out)
    return out, f"average of the {len(kept)} best on validation"
