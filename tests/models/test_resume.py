"""Exact resume after SIGKILL: a real fairseq-train run killed right after it saved a mid-epoch checkpoint,
then the same command again, trains the same updates as an uninterrupted run (same logged losses, same
parameters at the end). fairseq re-seeds every update from --seed + the update count and stores the data
iterator's position, the optimizer, the lr scheduler and the update count; the plugin's own update-dependent
state (the --lexicon-topk-warmup switch) follows fairseq's update count."""
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from test_distributed_cpu import ENV, ROOT, SMALL, USER_DIR

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

MAX_UPDATE, SAVE_EVERY = 10, 3


def command(toy, save):
    # the top-k warmup ends at update 5, between the kill and the end: the switch must follow the restored count
    return [sys.executable, "-m", "fairseq_cli.train", str(toy / "bin"), "--user-dir", USER_DIR,
            "--arch", "transformer_dhmm", *SMALL, "--dropout", "0.1", "--lexicon-topk", "1",
            "--lexicon-topk-warmup", "5", "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing",
            "0.1", "--optimizer", "adam", "--lr", "0.002", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
            "--max-tokens", "300", "--max-update", str(MAX_UPDATE), "--save-interval-updates", str(SAVE_EVERY),
            "--keep-interval-updates", "1", "--no-epoch-checkpoints", "--disable-validation", "--log-interval", "1",
            "--log-format", "json", "--no-progress-bar", "--save-dir", str(save), "--seed", "7",
            "--num-workers", "0", "--cpu"]


def losses(text):
    logs = [json.loads(line[line.index("{"):]) for line in text.splitlines() if "| train_inner |" in line]
    return {int(r["num_updates"]): (r["loss"], r["nll_loss"], r.get("align_mass")) for r in logs}


@pytest.mark.slow
def test_sigkill_then_same_command_resumes_exactly(scale_toy):
    toy = scale_toy
    full = subprocess.run(command(toy, toy / "full"), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert full.returncode == 0, full.stderr[-3000:]
    reference = losses(full.stdout + full.stderr)
    assert sorted(reference) == list(range(1, MAX_UPDATE + 1))

    save = toy / "killed"
    env = dict(ENV, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(command(toy, save), env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    first = []
    for line in proc.stdout:
        first.append(line)
        if "Saved checkpoint" in line and f"@ {SAVE_EVERY} updates" in line:
            os.kill(proc.pid, signal.SIGKILL)  # no handler, no atexit, no flush: as a crash or an OOM kill
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(first)[-3000:]
    done = load_checkpoint_state(save / "checkpoint_last.pt")
    n = done["optimizer_history"][-1]["num_updates"]
    assert SAVE_EVERY <= n < MAX_UPDATE  # killed before the end (the next save is 3 updates later)

    again = subprocess.run(command(toy, save), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    log = again.stdout + again.stderr
    assert f"Loaded checkpoint {save / 'checkpoint_last.pt'}" in log and f"{n} updates" in log
    resumed = losses(log)
    assert sorted(resumed) == list(range(n + 1, MAX_UPDATE + 1))
    # update N+1 (and every later one) logs the loss of the uninterrupted run: loss, nll and, after the
    # top-k warmup, the kept alignment mass
    for u in resumed:
        assert resumed[u] == reference[u], (u, resumed[u], reference[u])
    assert reference[MAX_UPDATE][2] is not None and reference[1][2] is None
    end_full = load_checkpoint_state(toy / "full" / "checkpoint_last.pt")
    end_resumed = load_checkpoint_state(save / "checkpoint_last.pt")
    for k, v in end_full["model"].items():
        # same float32 operations in the same order on one thread: equal up to the last bit
        torch.testing.assert_close(end_resumed["model"][k], v, rtol=0, atol=0, msg=k)


def test_checkpoint_copy_cannot_be_truncated_by_a_kill(tmp_path, monkeypatch):
    """fairseq copies checkpoint_1_N.pt to checkpoint_last.pt: a kill during the copy keeps the old file."""
    import shutil

    from fairseq import checkpoint_utils

    import hmm_nmt  # noqa: F401  (installs the atomic copy)

    src, dst = tmp_path / "checkpoint_1_6.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old")

    def dying_copy(a, b):  # writes part of the file, then the process is gone
        with open(b, "wb") as f:
            f.write(open(a, "rb").read()[:10])
        raise SystemExit("killed")

    monkeypatch.setattr(shutil, "copyfile", dying_copy)
    with pytest.raises(SystemExit):
        checkpoint_utils.PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == b"old"
    monkeypatch.undo()
    assert checkpoint_utils.PathManager.copy(str(src), str(dst), overwrite=True)
    assert dst.read_bytes() == src.read_bytes()
