"""scripts/benchmark_translation.py --seeds: one benchmark per seed and the mean/spread over seeds, through the
real command lines on the embedded toy corpus (examples/toy/generate.py, fed to prepare.sh as a flat layout)."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from benchmarks import seeds as seed_summary

GENERATE = os.path.join(ROOT, "examples", "toy", "generate.py")
PREPARE = os.path.join(ROOT, "examples", "multi30k", "prepare.sh")
BENCH = os.path.join(ROOT, "scripts", "benchmark_translation.py")


def env():
    e = dict(os.environ)
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e["OMP_NUM_THREADS"] = "1"
    return e


def run(cmd, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env(), cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def toy_data(tmp_path):
    raw = tmp_path / "toy"
    run([sys.executable, GENERATE, "--out", str(raw), "--train", "300", "--valid", "20", "--test", "20"])
    flat = tmp_path / "flat"
    flat.mkdir()
    for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        for side, lang in (("src", "de"), ("tgt", "en")):
            shutil.copy(raw / f"{split}.{side}", flat / f"{name}.lc.norm.tok.{lang}")
    dest = tmp_path / "data"
    run([PREPARE, "--local", str(flat), "--dest", str(dest), "--merges", "50"])
    return dest


def test_seed_summary_mean_and_sample_sd():
    def doc(bleu, ter, nll):
        return {"results": {"de-en": [{"slot": "dhmm0", "label": "direct HMM", "arch": "transformer_dhmm",
                                       "updates": 10, "bleu": bleu, "ter": ter, "chrf": 50.0, "length_ratio": 1.0,
                                       "best_valid_nll_loss": nll, "train_tokens_per_second": None}]}}
    s = seed_summary.aggregate({2: doc(12.0, 70.0, 3.0), 1: doc(10.0, 74.0, 2.0)})["de-en"][0]
    assert s["seeds"] == [1, 2]
    assert s["bleu"]["values"] == [10.0, 12.0] and s["bleu"]["mean"] == 11.0
    assert s["bleu"]["sd"] == pytest.approx(2 ** 0.5)  # sample sd (n - 1)
    assert s["ter"]["min"] == 70.0 and s["ter"]["max"] == 74.0
    assert s["train_tokens_per_second"]["mean"] is None
    md = seed_summary.markdown({"de-en": [s]})
    assert "| 11.00 ± 1.41 | 72.00 ± 2.83 |" in md and "| n/a |" in md


@pytest.mark.slow
def test_benchmark_two_seeds_on_toy_data(tmp_path):
    data = toy_data(tmp_path)
    out = tmp_path / "bench"
    cmd = [sys.executable, BENCH, "--data", str(data), "--out", str(out), "--models", "transformer,dhmm0",
           "--seeds", "1,2", "--embed-dim", "16", "--ffn-dim", "32", "--layers", "1", "--heads", "2",
           "--max-tokens", "500", "--lr", "1e-3", "--warmup-updates", "5", "--max-update", "6",
           "--validate-interval-updates", "3", "--threads", "1", "--gen-batch-size", "20", "--no-plots",
           "--generate-args", "--max-len-b 10", "--tune-lenpen", "0.5,1.5", "--tune-eos-penalty", "0,1"]
    run(cmd)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seeds"] == [1, 2]
    rows = summary["summary"]["de-en"]
    assert [r["slot"] for r in rows] == ["transformer", "dhmm0"]
    for r in rows:
        per_seed = [json.loads((out / f"seed-{s}" / "results.json").read_text()) for s in (1, 2)]
        vals = [next(x for x in d["results"]["de-en"] if x["slot"] == r["slot"])["best_valid_nll_loss"]
                for d in per_seed]
        assert r["best_valid_nll_loss"]["values"] == vals
        assert r["best_valid_nll_loss"]["mean"] == pytest.approx(sum(vals) / 2)
        assert vals[0] != vals[1]  # the seed really changed the run
        assert r["updates"] == [6, 6]
        assert r["train_minutes"]["mean"] > 0 and set(r["lenpen"]["values"]) <= {0.5, 1.5}
    for s in (1, 2):  # each seed's training really used its seed
        fa = json.loads((out / f"seed-{s}" / "de-en" / "dhmm0" / "train_command.json").read_text())["fairseq_args"]
        assert fa[fa.index("--seed") + 1] == str(s)
        for r in json.loads((out / f"seed-{s}" / "results.json").read_text())["results"]["de-en"]:
            # --tune-lenpen x --tune-eos-penalty: the dev-best pair of the grid, and the test set decoded with it
            dev = {(d["eos_penalty"], d["lenpen"]): d["bleu"] for d in r["lenpen_dev"]}
            assert set(dev) == {(0.0, 0.5), (0.0, 1.5), (1.0, 0.5), (1.0, 1.5)}
            assert dev[(r["eos_penalty"], r["lenpen"])] == max(dev.values())
            ga = json.loads((out / f"seed-{s}" / "de-en" / r["slot"] / "decode_done.json").read_text())["fairseq_args"]
            assert ga[ga.index("--lenpen") + 1] == str(r["lenpen"])
            task = ga[ga.index("--task") + 1]
            if r["eos_penalty"]:
                assert task == "translation_eos_penalty" and float(ga[ga.index("--eos-penalty") + 1]) == 1.0
            else:
                assert task == "translation" and "--eos-penalty" not in ga
    md = (out / "summary.md").read_text()
    assert "±" in md and "seed-1/results.md" in md
    # a rerun finds every stage done and rewrites the same summary
    again = run(cmd)
    assert "training already done" in again.stderr
    assert json.loads((out / "summary.json").read_text())["summary"] == summary["summary"]
    bad = run(cmd[:cmd.index("--seeds") + 1] + ["1,1"] + cmd[cmd.index("--seeds") + 2:], check=False)
    assert bad.returncode != 0 and "--seeds must list distinct integers" in bad.stderr


@pytest.mark.slow
def test_quality_ablation_recipe_runs_one_variant(tmp_path):
    script = os.path.join(ROOT, "examples", "multi30k", "quality_ablation.sh")
    bad = run([script, "--data", str(tmp_path), "--out", str(tmp_path / "q"), "last", "1"], check=False)
    assert bad.returncode == 2 and "prepare.json not found" in bad.stderr
    data = toy_data(tmp_path)
    bad = run([script, "--data", str(data), "--out", str(tmp_path / "q"), "bogus", "1"], check=False)
    assert bad.returncode == 2 and "unknown VARIANT 'bogus'" in bad.stderr
    proc = run([script, "--data", str(data), "--out", str(tmp_path / "q"), "first-order", "3", "2"])
    scores = [line for line in proc.stdout.splitlines() if line.startswith("first-order seed 3 ")]
    assert [s.split()[3] for s in scores] == ["bleu:", "ter:", "chrf:"]
    log = (tmp_path / "q" / "first-order-s3" / "train.log").read_text()
    assert "transformer_dhmm_first_order" in log and "num_updates: 2 >= max_update: 2" in log
    hyps = (tmp_path / "q" / "first-order-s3" / "hyp.valid").read_text().splitlines()
    assert len(hyps) == 20  # every dev sentence decoded, in order


def _processes_mentioning(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:  # gone meanwhile
            pass
    return found


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to list processes")
def test_sigterm_stops_the_fairseq_child(tmp_path):
    """kill (TERM) of the benchmark must not leave its fairseq-train child running (it did: only Ctrl-C
    was handled), and the run stays resumable (exit 130 like Ctrl-C)."""
    import signal
    import time
    data = toy_data(tmp_path)
    out = tmp_path / "bench"
    proc = subprocess.Popen(
        [sys.executable, BENCH, "--data", str(data), "--out", str(out), "--models", "transformer",
         "--embed-dim", "16", "--ffn-dim", "32", "--layers", "1", "--heads", "2", "--max-tokens", "500",
         "--max-update", "100000", "--log-interval", "1", "--threads", "1", "--no-plots"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), cwd=ROOT)
    log = out / "de-en" / "transformer" / "train.log"
    ckpts = str(out / "de-en" / "transformer" / "checkpoints")
    try:
        deadline = time.time() + 300
        while not (log.exists() and "train_inner" in log.read_text()):
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.5)
        assert _processes_mentioning(ckpts)  # fairseq-train is up
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130
        assert "interrupted; run the same command again to resume" in proc.stdout.read()
        assert _processes_mentioning(ckpts) == []
    finally:  # a failure must not leave a training behind
        for pid in _processes_mentioning(ckpts) + ([proc.pid] if proc.poll() is None else []):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
