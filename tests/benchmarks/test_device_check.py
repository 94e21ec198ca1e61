"""benchmarks/device_check.sh, the GPU check: its syntax and its refusal of a data folder without the corpora
run anywhere; the mixed-precision training it times (fairseq-train --amp, both alignment orders) runs on a tiny
corpus where CUDA is present, and is skipped elsewhere."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "device_check.sh")
SMALL = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--share-all-embeddings"]


def test_script_parses_and_is_executable():
    subprocess.run(["bash", "-n", SCRIPT], check=True)
    assert os.access(SCRIPT, os.X_OK)


def test_missing_data_is_one_line_naming_the_file(tmp_path):
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    proc = subprocess.run(["bash", SCRIPT, "--data", str(data), "--work", str(work)], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("device_check.sh: error: ")
    assert f"{data}/hansards_enfr/gold/enfr.src-tgt not found" in lines[0]
    assert not work.exists()  # refused before anything was made


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (fairseq's --amp is CUDA autocast)")
@pytest.mark.parametrize("arch", ["transformer_dhmm", "transformer_dhmm_first_order"])
def test_amp_training_on_cuda_gives_a_finite_loss(scale_toy, tmp_path, arch):
    """Five --amp updates of the direct HMM on the GPU (the toy corpus of the scaling tests): every logged loss
    finite, under a loss scaler (fairseq logs its scale only with --amp or --fp16)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", str(scale_toy / "bin"), "--user-dir", os.path.join(ROOT, "hmm_nmt"),
         "--arch", arch, *SMALL, "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
         "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "2",
         "--max-tokens", "1000", "--max-update", "5", "--seed", "1", "--amp", "--no-save",
         "--save-dir", str(tmp_path / "ckpt"), "--disable-validation", "--num-workers", "0",
         "--log-format", "json", "--log-interval", "1", "--no-progress-bar"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    steps = [json.loads(line[line.index("{"):]) for line in out.splitlines() if "| train_inner |" in line]
    final = [json.loads(line[line.index("{"):]) for line in out.splitlines() if "| train |" in line]
    assert steps and final, out[-4000:]
    assert all(math.isfinite(float(s["loss"])) for s in steps)
    assert math.isfinite(float(final[-1]["train_loss"]))
    assert int(final[-1]["train_num_updates"]) == 5
    assert "loss_scale" in steps[-1]
