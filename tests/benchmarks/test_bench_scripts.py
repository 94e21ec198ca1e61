"""The speed benchmarks and the top-k sweep tools run end to end on tiny sizes and print what they promise."""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
NUM = r"[0-9]+(?:\.[0-9]+)?"


def run(*args, check=True):
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return proc


@pytest.mark.slow
def test_bench_lexicon_prints_both_ratios_for_both_dtypes(tmp_path):
    out = run(os.path.join(SCRIPTS, "bench_lexicon.py"), "--rows", "96", "--dim", "16", "--vocab", "50",
              "--chunk", "32", "--repeat", "1", "--threads", "1", "--json", str(tmp_path / "lex.json")).stdout
    rows = json.loads((tmp_path / "lex.json").read_text())
    assert [r["dtype"] for r in rows] == ["fp32", "bf16"]
    for r in rows:
        assert re.search(rf"^{r['dtype']}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+", out, re.M), out
        assert r["matmul_gflops"] > 0 and r["seconds"] > 0 and r["extra_peak_mb"] >= 0
        # the recomputation of the logits counts as executed work, not as useful work
        assert r["executed_gflops"] == pytest.approx(r["useful_gflops"] * 8 / 6)
        assert r["executed_ratio"] > r["useful_ratio"] > 0


@pytest.mark.slow
def test_bench_train_and_decode_print_ratios_against_the_transformer(tmp_path):
    small = ["--embed-dim", "16", "--layers", "1", "--heads", "2", "--threads", "1"]
    models = ["transformer", "dhmm0:--lexicon-topk=2,--lexicon-dtype=bf16", "dhmm1:--lexicon-topk=1",
              "hnmc:--hnmc-states=3", "iohmm:--iohmm-states=3"]
    out = run(os.path.join(SCRIPTS, "bench_train.py"), "--updates", "1", "--warmup", "0", "--max-tokens", "300",
              "--models", *models, "--json", str(tmp_path / "train.json"), *small).stdout
    doc = json.loads((tmp_path / "train.json").read_text())
    rows = doc["models"]
    assert [r["model"] for r in rows] == models
    assert rows[0]["throughput_ratio"] == 1.0 and all(r["tok_per_s"] > 0 for r in rows)
    assert all(m in out for m in models)
    # the exact lexicon kernel against matmul, at the (i, j) rows of the same batches
    assert len({r["lexicon_rows_per_update"] for r in rows}) == 1 and rows[0]["lexicon_rows_per_update"] > 300
    kernel = doc["lexicon_kernel"]
    assert kernel["dtype"] == "fp32" and kernel["rows"] == round(rows[0]["lexicon_rows_per_update"])
    assert kernel["vocab"] == rows[0]["vocab"] and kernel["useful_ratio"] > 0
    assert re.search(rf"exact fp32 lexicon kernel at these sizes .*: {NUM} of plain matmul", out)
    run(os.path.join(SCRIPTS, "bench_decode.py"), "--max-batches", "1", "--batch-size", "4", "--length", "4",
        "--models", *models, "--json", str(tmp_path / "decode.json"), *small)
    rows = json.loads((tmp_path / "decode.json").read_text())
    assert [r["model"] for r in rows] == models
    assert rows[0]["speed_ratio"] == 1.0 and all(r["sentences"] == 4 for r in rows)


def test_bench_scripts_refuse_unknown_models():
    proc = run(os.path.join(SCRIPTS, "bench_train.py"), "--models", "lstm", check=False)
    assert proc.returncode != 0 and "unknown model 'lstm'" in proc.stderr


def test_topk_table_lists_rows_and_missing_configs(tmp_path):
    def result(name, bleu, tok_s, sent_s, arch="transformer_dhmm", extra=()):
        d = tmp_path / name
        d.mkdir()
        row = {"arch": arch, "extra_args": list(extra), "updates": 400, "bleu": bleu, "ter": 70.0, "chrf": 40.0,
               "train_tokens_per_second": tok_s, "decode_sentences_per_second": sent_s, "best_valid_nll_loss": 3.0}
        (d / "results.json").write_text(json.dumps({"complete": True, "results": {"de-en": [row]}}))

    result("o0-k4", 20.0, 500.0, 10.0, extra=["--lexicon-topk", "4"])
    result("transformer", 25.0, 1000.0, 20.0, arch="transformer")
    proc = run(os.path.join(SCRIPTS, "topk_table.py"), str(tmp_path), "o0-k4", "transformer", "o1-k4", check=False)
    assert proc.returncode == 1  # o1-k4 has no result
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("| o0-k4 | `transformer_dhmm` | --lexicon-topk 4 | 400 | 20.00 |")
    assert "| 500 | 0.50 | 10.00 | 0.50 |" in lines[2]  # ratios against the transformer row
    assert lines[4].startswith("| o1-k4 | missing")
    assert (tmp_path / "topk.md").read_text() == proc.stdout
    assert json.loads((tmp_path / "topk.json").read_text())["missing"] == ["o1-k4"]


def test_topk_sweep_refuses_bad_arguments(tmp_path):
    sweep = os.path.join(ROOT, "examples", "multi30k", "topk_sweep.sh")
    proc = subprocess.run(["bash", sweep, "--data", str(tmp_path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "no prepare.json" in proc.stderr
    (tmp_path / "prepare.json").write_text("{}")
    proc = subprocess.run(["bash", sweep, "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--configs", "o2-k1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "bad config 'o2-k1'" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_bench_decode_checkpoint_specs_are_checked(tmp_path):
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"not loaded: the specs are checked first")
    for spec, msg in ((f"k2={tmp_path}/missing.pt", "with an existing checkpoint file"),
                      (f"k2={ckpt},lexicon_topk", "model override 'lexicon_topk' is not KEY=VALUE"),
                      (str(ckpt), "expected NAME=PATH")):
        proc = run(os.path.join(SCRIPTS, "bench_decode.py"), "--checkpoint", spec, check=False)
        assert proc.returncode == 2 and msg in proc.stderr, proc.stderr
