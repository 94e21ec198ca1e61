"""scripts/bench_tagging.py: early stopping on the dev score, a SIGKILL in the middle of the benchmark and the same
command again (it reuses the runs already stored and makes the rest, with the numbers of an uninterrupted run),
and the refusal to mix runs of other training settings in one --out."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "bench_tagging.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _cmd(data, out, *extra):
    return [sys.executable, SCRIPT, "--data", data, "--tasks", "chunk", "--models", "rnn", "hnmc",
            "--seeds", "1", "2", "--epochs", "30", "--patience", "2", "--embed-dim", "8", "--hidden-size", "8",
            "--lr", "0.05", "--out", out, *extra]


def _runs(path):
    try:
        with open(path) as f:
            return json.load(f)["runs"]
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
def test_bench_tagging_stops_early_resumes_after_a_kill_and_refuses_other_settings(tmp_path):
    data = str(tmp_path / "data")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tagging_tiny.py"), "conll2000", data], check=True)
    train = os.path.join(data, "train.txt")
    ref, out = str(tmp_path / "ref.json"), str(tmp_path / "out.json")
    subprocess.run(_cmd(train, ref), check=True, capture_output=True, text=True, env=ENV, timeout=600)
    reference = _runs(ref)
    assert len(reference) == 4
    for r in reference.values():  # patience 2 of at most 30 epochs: every run stopped on its dev score
        assert r["epochs_run"] < 30 and r["epochs_run"] - r["best_epoch"] == 2

    proc = subprocess.Popen(_cmd(train, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 300
    while not _runs(out) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _runs(out)
    assert 1 <= len(first) < 4, f"the kill came after {len(first)} of 4 runs"
    r = subprocess.run(_cmd(train, out), capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    resumed = _runs(out)
    assert set(resumed) == set(reference)
    for key in first:  # reused, not trained again
        assert resumed[key] == first[key]
    for key, res in reference.items():  # the same numbers as without the kill
        for field in ("score", "epochs_run", "best_epoch", "final_loss"):
            assert resumed[key][field] == res[field], (key, field)
    assert "| chunk |" in r.stdout or "chunk" in r.stdout

    bad = subprocess.run(_cmd(train, out)[:-2] + ["--lr", "0.01", "--out", out], capture_output=True, text=True,
                         env=ENV, timeout=600)
    assert bad.returncode != 0 and "other settings (--lr 0.05 -> 0.01)" in bad.stderr
    assert _runs(out) == resumed  # nothing written
