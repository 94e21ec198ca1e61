"""Issue 26: early stopping on dev (fairseq's --patience, resumable), time to quality, and length choices that
transfer (chosen on half the dev set, confirmed on the other half), through the real benchmark command lines on
the toy corpus where fairseq-train runs, and with a monkeypatched scorer where the decision rule is tested."""
import argparse
import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, default_sigint
from test_benchmark_seeds import run, toy_data

from benchmarks import tuning
from benchmarks.stopping import Patience, first_reach
from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

BENCH = os.path.join(ROOT, "scripts", "benchmark_translation.py")
BENCH_LM = os.path.join(ROOT, "scripts", "bench_lm.py")


# ------------------------------------------------------------------------------------------- the rule itself
def test_patience_counts_validations_like_fairseq():
    from fairseq_cli.train import should_stop_early

    values = [3.0, 2.5, 2.5, 2.6, 2.4, 2.4, 2.4, 2.39, 2.5, 2.5]
    cfg = argparse.Namespace(checkpoint=argparse.Namespace(patience=2, maximize_best_checkpoint_metric=False))
    for attr in ("best", "num_runs"):
        if hasattr(should_stop_early, attr):
            delattr(should_stop_early, attr)
    fairseq_stop = next(i for i, v in enumerate(values) if should_stop_early(cfg, v))
    stop, p = Patience.replay(list(enumerate(values)), patience=2)
    assert stop == fairseq_stop == 3  # 2.5 equals the best: no improvement; 2.6: the second in a row
    assert p.best == 2.5 and p.best_step == 1
    resumed = Patience.from_state(Patience.replay(list(enumerate(values[:3])), 2)[1].state_dict())
    assert resumed.step(values[3], 3) is True  # the state dict carries the count across a resume
    assert Patience.replay([(0, 1.0), (1, 2.0), (2, 2.0)], 1, maximize=True)[0] == 2
    assert Patience.replay([(i, 1.0) for i in range(5)], 0)[0] is None  # 0: never stops
    curve = [{"updates": 2, "bleu": 1.0, "t": 5}, {"updates": 4, "bleu": 3.0, "t": 9}]
    assert first_reach(curve, "bleu", 2.0, True, clock="t") == (4, 9)
    assert first_reach(curve, "bleu", 4.0, True, clock="t") == (None, None)


# ------------------------------------------------------------------------------ length choice by halves (rule)
def _fake_tune(monkeypatch, tmp_path, table):
    """tuning.tune_halves over a fake decoder and scorer: ``table[(eos, lenpen)] = (choose, confirm)`` with each
    a (BLEU, TER) pair; refs are 'r0'..'r5', so the choose half is r0, r2, r4 and the held-out half r1, r3, r5."""
    refs = [f"r{i}" for i in range(6)]
    (tmp_path / "text").mkdir(exist_ok=True)
    (tmp_path / "text" / "valid.en").write_text("\n".join(refs) + "\n")
    (tmp_path / "prepare.json").write_text(json.dumps({"directions": {"de-en": "bin/de-en"}, "remove_bpe": "@@ ",
                                                       "references": {"valid": {"en": "text/valid.en"}}}))
    (tmp_path / "ckpt.pt").write_text("")
    monkeypatch.setattr(tuning, "decode_nbest", lambda opts, tmp, eos: eos)
    monkeypatch.setattr(tuning, "parse_nbest", lambda eos, n: [eos] * n)
    monkeypatch.setattr(tuning, "rerank", lambda nbest, used, lp: [f"{nbest[0]:g}/{lp:g}"] * len(nbest))

    def score(hyps, refs_):
        eos, lp = (float(x) for x in hyps[0].split("/"))
        half = {"r0": 0, "r1": 1}[refs_[0]] if len(refs_) == 3 else None
        bleu, ter = (20.0, 60.0) if half is None else table[(eos, lp)][half]
        return {"bleu": bleu, "ter": ter, "chrf": 40.0, "length_ratio": 1.0}

    monkeypatch.setattr(tuning, "score", score)


@pytest.mark.parametrize("confirm, adopted", [
    ((18.0, 59.0), False),  # the held-out half does not confirm: lower BLEU
    ((21.0, 61.0), False),  # higher BLEU but worse TER
    ((21.0, 59.5), True),   # higher BLEU, TER not worse: adopted
])
def test_length_choice_kept_only_when_the_held_out_half_confirms(monkeypatch, tmp_path, capsys, confirm, adopted):
    stock, other = (19.0, 60.0), (15.0, 70.0)
    table = {(0.0, 1.0): (stock, stock), (0.0, 1.4): (other, other), (1.0, 1.0): (other, other),
             (1.0, 1.4): ((25.0, 55.0), confirm)}  # the candidate: clearly best on the choose half
    _fake_tune(monkeypatch, tmp_path, table)
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import tune_lenpen

    tune_lenpen.main(["--data", str(tmp_path), "--checkpoint", str(tmp_path / "ckpt.pt"), "--lenpen", "1.4",
                      "--eos-penalty", "1", "--confirm-halves", "--out", str(tmp_path / "t")])
    doc = json.loads((tmp_path / "t.json").read_text())
    d = doc["decision"]
    assert (d["candidate"]["eos_penalty"], d["candidate"]["lenpen"]) == (1.0, 1.4)
    assert len(doc["rows"]) == 4  # the stock pair (0, 1.0) was added to the grid
    assert d["adopted"] is adopted
    assert (doc["eos_penalty"], doc["lenpen"]) == ((1.0, 1.4) if adopted else (0.0, 1.0))
    assert d["candidate"]["confirm"] == {"bleu": confirm[0], "ter": confirm[1], "chrf": 40.0, "length_ratio": 1.0}
    assert d["stock"]["confirm"]["bleu"] == stock[0]
    out = capsys.readouterr().out
    assert out.strip().endswith(f"eos-penalty {doc['eos_penalty']:g} lenpen {doc['lenpen']:g}")
    assert ("adopted" if adopted else "stock search kept") in out


def test_length_choice_stock_when_stock_is_best_on_the_choose_half(monkeypatch, tmp_path):
    table = {(0.0, 1.0): ((25.0, 50.0), (19.0, 60.0)), (0.0, 0.6): ((20.0, 60.0), (30.0, 40.0))}
    _fake_tune(monkeypatch, tmp_path, table)
    opts = argparse.Namespace(data=str(tmp_path), prep=json.loads((tmp_path / "prepare.json").read_text()),
                              subset="valid", direction="de-en", lenpen=[0.6], eos_penalty=[0.0])
    rows, d, n = tuning.tune_halves(opts)
    assert n == 6 and d["adopted"] is False and "also the best on the choose half" in d["reason"]
    assert (tuning.chosen_row(rows)["eos_penalty"], tuning.chosen_row(rows)["lenpen"]) == (0.0, 1.0)


# ------------------------------------------------------------------ translation benchmark: patience + resume
def _bench_cmd(data, out):
    # lr 0 after one warm-up update of 1e-7: the validation loss is flat from update 2 on, so --patience 3 with a
    # validation every 2 updates stops at update 8 (best at 2, then 4, 6, 8 without a strict improvement),
    # long before the bound of 60 updates
    return [sys.executable, BENCH, "--data", str(data), "--out", str(out), "--models", "transformer",
            "--embed-dim", "16", "--ffn-dim", "32", "--layers", "1", "--heads", "2", "--max-tokens", "300",
            "--lr", "0", "--warmup-updates", "1", "--max-update", "60", "--validate-interval-updates", "2",
            "--patience", "3", "--dev-bleu", "--log-interval", "1", "--threads", "1", "--gen-batch-size", "20",
            "--no-plots", "--generate-args", "--max-len-b 10", "--tune-lenpen", "0.5,1.0",
            "--length-choice", "halves"]


@pytest.mark.slow
def test_translation_benchmark_stops_on_a_flat_dev_curve_and_resumes_to_the_same_point(tmp_path):
    data = toy_data(tmp_path)
    whole = tmp_path / "whole"
    run(_bench_cmd(data, whole))
    doc = json.loads((whole / "results.json").read_text())
    r = doc["results"]["de-en"][0]
    assert r["stop_reason"] == "patience" and r["updates"] == 8 < 60
    assert [p["updates"] for p in r["valid_curve"]] == [2, 4, 6, 8]
    assert r["best_valid_updates"] == 2 and r["epochs"] == 1
    assert r["train_cpu_seconds"] > 0 and r["train_wall_seconds"] > 0
    assert all(p["bleu"] is not None and p["train_wall_seconds"] > 0 for p in r["valid_curve"])
    assert r["best_dev_bleu"] == max(p["bleu"] for p in r["valid_curve"])
    ttq = r["time_to_quality"]  # the transformer reaches its own best at its first best validation
    assert ttq["metric"] == "dev BLEU" and ttq["updates"] == r["best_dev_bleu_updates"]
    assert doc["budget"].startswith("converged (patience 3")  # every model stopped by patience
    md = (whole / "results.md").read_text()
    assert "converged (patience 3" in md and "| transformer | 8 | 1 | patience |" in md
    lc = r["length_choice"]  # both rows (stock and candidate) decoded on test, and the decision recorded
    assert set(lc["test"]) == {"stock", "candidate"} and lc["used"] in ("stock", "candidate")
    assert r["lenpen"] == lc[lc["used"]]["lenpen"] and "| stock |" in md and "| candidate |" in md
    fa = json.loads((whole / "de-en" / "transformer" / "train_command.json").read_text())["fairseq_args"]
    assert fa[fa.index("--patience") + 1] == "3" and "--eval-bleu" in fa

    # killed (simulated Ctrl-C) at update 7: the last checkpoint is update 6, two validations into the count
    cut = tmp_path / "cut"
    p = subprocess.run(
        _bench_cmd(data, cut), capture_output=True, text=True, timeout=900, cwd=ROOT, preexec_fn=default_sigint,
        env=dict(os.environ, OMP_NUM_THREADS="1", FAIRSEQ_INSTRUMENTED_INTERRUPT_AT="7",
                 PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")))
    assert p.returncode == 130, p.stderr[-3000:]
    p = run(_bench_cmd(data, cut))
    assert "resuming from" in p.stderr
    again = json.loads((cut / "results.json").read_text())["results"]["de-en"][0]
    assert again["fairseq_runs"] == 2 and again["resumed_at_updates"] == [6]
    assert again["stop_reason"] == "patience" and again["updates"] == 8  # the same stop as without the kill
    assert [(v["updates"], v["loss"]) for v in again["valid_curve"]] == \
        [(v["updates"], v["loss"]) for v in r["valid_curve"]]


@pytest.mark.slow
def test_a_plateau_starts_the_exact_phase_before_patience_stops_and_survives_a_resume(tmp_path):
    # dhmm0_fast is 4@0,0@80%: exact from update 48 of 60. The flat curve plateaus at 8 (best at 2): instead of
    # stopping, the exact phase starts there, the count restarts, and patience stops at 14
    data = toy_data(tmp_path)

    def cmd(out):
        c = _bench_cmd(data, out)
        c[c.index("--models") + 1] = "dhmm0_fast"
        return c

    run(cmd(tmp_path / "whole"))
    r = json.loads((tmp_path / "whole" / "results.json").read_text())["results"]["de-en"][0]
    assert r["stop_reason"] == "patience" and r["updates"] == 14 and r["topk_switches"] == [8]
    assert [p["updates"] for p in r["valid_curve"]] == [2, 4, 6, 8, 10, 12, 14]
    log = (tmp_path / "whole" / "de-en" / "dhmm0_fast" / "train.log").read_text()
    assert "its next step starts at update 8; training goes on" in log and log.count("early stop since") == 1
    assert "patience; next top-k step at 8 (plateau)" in (tmp_path / "whole" / "results.md").read_text()

    # killed at update 11: resumed from update 10, the switch comes back from the checkpoint (without it the
    # model would be pruned again, switch at 14 and stop at 20)
    cut = tmp_path / "cut"
    p = subprocess.run(
        cmd(cut), capture_output=True, text=True, timeout=900, cwd=ROOT, preexec_fn=default_sigint,
        env=dict(os.environ, OMP_NUM_THREADS="1", FAIRSEQ_INSTRUMENTED_INTERRUPT_AT="11",
                 PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")))
    assert p.returncode == 130, p.stderr[-3000:]
    run(cmd(cut))
    again = json.loads((cut / "results.json").read_text())["results"]["de-en"][0]
    assert again["resumed_at_updates"] == [10] and again["topk_switches"] == [8]
    assert again["stop_reason"] == "patience" and again["updates"] == 14


# ------------------------------------------------------------------------------ bench_lm: patience + resume
def _lm_data(tmp_path):
    src = tmp_path / "toy"
    run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(src), "--train", "200",
         "--valid", "20", "--test", "20"])
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "valid", "test"):
        (raw / f"{split}.txt").write_text((src / f"{split}.tgt").read_text())
    run([sys.executable, "-m", "fairseq_cli.preprocess", "--only-source", "--trainpref", str(raw / "train.txt"),
         "--validpref", str(raw / "valid.txt"), "--testpref", str(raw / "test.txt"), "--destdir",
         str(tmp_path / "bin"), "--workers", "1"])
    return raw, tmp_path / "bin"


@pytest.mark.slow
def test_bench_lm_patience_stops_and_resumes(tmp_path):
    raw, bin_ = _lm_data(tmp_path)

    def cmd(out):  # lr 0: a flat dev curve, so patience 2 stops at epoch 3 of at most 20
        return [sys.executable, BENCH_LM, "--raw", str(raw), "--bin", str(bin_), "--out", str(out), "--models",
                "lstm", "--epochs", "20", "--patience", "2", "--lr", "0", "--max-tokens", "400"]

    p = run(cmd(tmp_path / "lm"))
    r = json.loads((tmp_path / "lm" / "results.json").read_text())["lstm"]
    assert r["stop_reason"] == "patience" and r["stopped_at_epoch"] == 3 and r["best_dev_epoch"] == 1
    assert r["train_cpu_s"] > 0 and r["train_wall_s"] > 0 and r["dev_ppl"] > 1
    assert "converged (patience 2" in p.stdout and "| patience |" in p.stdout
    per_epoch = r["stopped_at_update"] // 3
    # interrupted in epoch 3: resumes from the checkpoint of epoch 2 and stops at epoch 3 all the same
    p = subprocess.run(cmd(tmp_path / "cut"), capture_output=True, text=True, timeout=900, cwd=ROOT,
                       preexec_fn=default_sigint, env=dict(os.environ, OMP_NUM_THREADS="1",
                                                           FAIRSEQ_INSTRUMENTED_INTERRUPT_AT=str(2 * per_epoch + 1)))
    assert p.returncode == 130, p.stderr[-3000:]
    p = run(cmd(tmp_path / "cut"))
    assert "resuming from" in p.stderr
    again = json.loads((tmp_path / "cut" / "results.json").read_text())["lstm"]
    assert again["fairseq_runs"] == 2 and again["resumed_at_updates"] == [2 * per_epoch]
    assert (again["stop_reason"], again["stopped_at_epoch"], again["stopped_at_update"]) == \
        ("patience", 3, r["stopped_at_update"])
    assert again["dev_ppl"] == r["dev_ppl"]
    # the same command again has nothing to train; another command line on the same --out is refused
    p = run(cmd(tmp_path / "cut"))
    assert "resuming" not in p.stderr
    bad = run(cmd(tmp_path / "cut")[:-2] + ["--max-tokens", "500"], check=False)
    assert bad.returncode == 1 and "another command line" in bad.stderr


@pytest.mark.slow
def test_train_only_then_decode_elsewhere_from_the_best_checkpoint_alone(tmp_path):
    """--train-only trains and stops before decoding; the same command without it decodes from a copy of --out
    that keeps only the best checkpoint's parameters (what comes back from a GPU machine), without retraining,
    and the report names the machine that trained."""
    import torch

    data = toy_data(tmp_path)
    out = tmp_path / "out"
    cmd = [c for c in _bench_cmd(data, out) if c != "--dev-bleu"]
    p = run(cmd + ["--train-only"])
    assert "--train-only" in p.stderr
    jdir = out / "de-en" / "transformer"
    done = json.loads((jdir / "train_done.json").read_text())
    assert done["stop_reason"] == "patience" and done["train_hardware"]["device"] == "cpu"
    assert not (out / "results.json").exists() and not list(jdir.glob("decode*_done.json"))

    ckpts = jdir / "checkpoints"
    best = load_checkpoint_state(ckpts / "checkpoint_best.pt")
    for f in ckpts.iterdir():
        f.unlink()
    best.pop("last_optimizer_state")  # the parameters are all that decoding needs
    torch.save(best, ckpts / "checkpoint_best.pt")
    done["train_hardware"].update(device="cuda", gpu="NVIDIA H200")  # as if it had trained on a GPU
    (jdir / "train_done.json").write_text(json.dumps(done))

    p = run(cmd)
    assert "training already done (8 updates), skipped" in p.stderr
    doc = json.loads((out / "results.json").read_text())
    r = doc["results"]["de-en"][0]
    assert r["updates"] == 8 and r["bleu"] >= 0 and r["train_hardware"]["gpu"] == "NVIDIA H200"
    assert not (ckpts / "checkpoint_last.pt").exists()  # nothing was trained again
    md = (out / "results.md").read_text()
    assert "trained on GPU NVIDIA H200" in md and ", decoded on CPU" in md


def test_raised_bound_is_recognised_only_for_a_larger_limit():
    from benchmarks.training import raised_bound

    base = ["data", "--lr", "0.1", "--max-update", "4", "--stop-time-hours", "0.12"]
    assert raised_bound(base, ["data", "--lr", "0.1", "--max-update", "8", "--stop-time-hours", "0.12"])
    assert raised_bound(base, ["data", "--lr", "0.1", "--max-update", "4", "--stop-time-hours", "0.2"])
    assert raised_bound(base, ["data", "--lr", "0.1", "--stop-time-hours", "0.12"])  # no update limit
    assert not raised_bound(base, base)
    assert not raised_bound(base, ["data", "--lr", "0.1", "--max-update", "3", "--stop-time-hours", "0.12"])
    assert not raised_bound(base, ["data", "--lr", "0.2", "--max-update", "8", "--stop-time-hours", "0.12"])
    assert not raised_bound(["data", "--max-update", "4"], ["data", "--max-update", "4", "--stop-time-hours", "1"])


def test_a_command_recorded_before_the_slots_named_the_softmax_lexicon_is_the_same_command():
    from benchmarks.training import raised_bound, with_softmax_named

    old = ["data", "--arch", "transformer_dhmm", "--max-update", "4", "--seed", "1"]
    new = ["data", "--arch", "transformer_dhmm", "--max-update", "4", "--lexicon", "softmax", "--seed", "1"]
    assert with_softmax_named(old, new) == new  # softmax was the default then: the same model
    raised = new[:4] + ["8"] + new[5:]
    assert raised_bound(with_softmax_named(old, raised), raised)
    # another lexicon, a recorded lexicon, another place or another flag: not the same command
    sep = new[:6] + ["separable"] + new[7:]
    assert with_softmax_named(old, sep) == old
    assert with_softmax_named(new[:6] + ["class"] + new[7:], new) != new
    assert with_softmax_named(old[:-1] + ["2"], new) != new


def test_a_raised_bound_names_what_it_does_to_a_percentage_topk_schedule():
    from benchmarks.training import rescaled_schedule

    old = ["data", "--lexicon-topk-schedule", "4@0,0@80%", "--max-update", "12000"]
    new = ["data", "--lexicon-topk-schedule", "4@0,0@80%", "--max-update", "24000"]
    note = rescaled_schedule(old, new)
    assert "K=4 from 0, K=0 from 19200" in note and "(was K=4 from 0, K=0 from 9600)" in note
    absolute = ["data", "--lexicon-topk-schedule", "4@0,0@9600", "--max-update", "24000"]
    assert rescaled_schedule(old[:1] + absolute[1:3] + old[3:], absolute) is None  # update counts do not move
    assert rescaled_schedule(["data", "--max-update", "4"], ["data", "--max-update", "8"]) is None


def test_a_converged_model_is_kept_and_a_copy_without_its_last_checkpoint_is_refused(tmp_path):
    from benchmarks.common import BenchmarkError
    from benchmarks.training import continue_past_bound

    assert continue_past_bound(str(tmp_path), "x") is True  # never finished: trains on as it would have
    (tmp_path / "train_done.json").write_text(json.dumps({"stop_reason": "patience", "updates": 8}))
    (tmp_path / "test.hyp").write_text("a\n")
    assert continue_past_bound(str(tmp_path), "x") is False
    assert (tmp_path / "test.hyp").exists() and (tmp_path / "train_done.json").exists()
    (tmp_path / "train_done.json").write_text(json.dumps({"stop_reason": "time budget", "updates": 8}))
    with pytest.raises(BenchmarkError, match="no .*checkpoint_last.pt to continue from"):
        continue_past_bound(str(tmp_path), "x")


@pytest.mark.slow
def test_raising_the_bound_continues_training_from_the_last_checkpoint_and_decodes_again(tmp_path):
    data = toy_data(tmp_path)
    out = tmp_path / "out"

    def cmd(max_update):
        c = [x for x in _bench_cmd(data, out) if x not in ("--dev-bleu", "--length-choice", "halves")]
        i = c.index("--patience")
        del c[i:i + 2]
        c[c.index("--max-update") + 1] = str(max_update)
        c[c.index("--tune-lenpen") + 1] = "1.0"
        return c

    run(cmd(4))
    first = json.loads((out / "results.json").read_text())["results"]["de-en"][0]
    assert first["updates"] == 4 and first["stop_reason"] == "max_update"
    p = run(cmd(8))
    assert "bound raised: training continues from checkpoint_last.pt (4 updates)" in p.stderr
    assert "resuming from" in p.stderr
    doc = json.loads((out / "results.json").read_text())
    again = doc["results"]["de-en"][0]
    assert again["updates"] == 8 and again["fairseq_runs"] == 2 and again["resumed_at_updates"] == [4]
    assert [v["updates"] for v in again["valid_curve"]] == [2, 4, 6, 8] and doc["budget"] == "8 updates"
    old = out / "de-en" / "transformer" / "superseded-4"
    assert (old / "test.hyp").exists() and (old / "decode_done.json").exists() and (old / "train_done.json").exists()
    p = run(cmd(6), check=False)  # a lower bound would mix two trainings: refused
    assert p.returncode == 1 and "other training settings" in p.stderr


def test_tables_say_converged_only_when_patience_stopped_every_model():
    from types import SimpleNamespace

    from benchmarks.translation import Benchmark

    bench = SimpleNamespace(args=argparse.Namespace(max_update=100, budget_minutes=7.2, patience=8))
    text = lambda *why: Benchmark.budget_text(bench, {"de-en": [{"stop_reason": w} for w in why]})  # noqa: E731
    assert text("patience", "patience").startswith("converged (patience 8")
    mixed = text("patience", "time budget", "max_update")
    assert mixed.startswith("early stopping (patience 8") and "at most 100 updates or 7.2 minutes" in mixed
    assert mixed.endswith("stopped by patience: 1 of 3, the others by the bound (not converged)")
    assert Benchmark.budget_text(SimpleNamespace(args=argparse.Namespace(max_update=0, budget_minutes=5,
                                                                         patience=0))) == "5 minutes"


def test_the_fairseq_child_stops_on_sigint_even_when_started_in_the_background():
    # nohup cmd & (and batch systems) start processes with SIGINT ignored, and Python keeps it ignored; the
    # benchmark stops fairseq with SIGINT, so the wrapper must take it back or the child is killed uncleanly
    code = ("import os, signal, sys; sys.path.insert(0, '.'); from benchmarks import fairseq_instrumented as f\n"
            "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
            "f.restore_ctrl_c()\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT)\n    import time; time.sleep(5); print('ignored')\n"
            "except KeyboardInterrupt:\n    print('interrupted')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert p.returncode == 0 and p.stdout.strip() == "interrupted", p.stderr


def test_a_row_trained_on_other_hardware_is_named_in_the_report():
    from benchmarks.report import describe_machine, training_machines

    cpu = {"device": "cpu", "cpu": "AMD EPYC", "logical_cpus": 2, "threads": 1, "gpu": None}
    gpu = dict(cpu, device="cuda", gpu="NVIDIA H200", cpu="Intel Xeon", logical_cpus=16)
    doc = {"hardware": cpu, "results": {"de-en": [
        {"slot": "transformer", "train_hardware": cpu},
        {"slot": "dhmm1_fast", "train_hardware": gpu}]}}
    assert training_machines(doc) == [describe_machine(cpu), describe_machine(gpu)]
    doc["results"]["de-en"].pop()  # trained on the report's hardware alone: nothing to name
    assert training_machines(doc) == []


def test_a_job_whose_saved_checkpoints_are_gone_is_refused_instead_of_silently_restarting(tmp_path):
    # what a fairseq-train log holds after a run whose checkpoints were deleted (fairseq would start again
    # at update 0, and the report would add the lost run's time to the new run's)
    from benchmarks.common import BenchmarkError
    from benchmarks.logs import parse_train_log
    from benchmarks.training import check_resumable

    log = tmp_path / "train.log"
    log.write_text(
        "2026-11-27 13:40:00 | INFO | fairseq_cli.train | num. shared model params: 1,263,936 "
        "(num. trained: 1,263,936)\n"
        "2026-11-27 13:46:34 | INFO | fairseq.checkpoint_utils | Saved checkpoint /x/checkpoints/"
        "checkpoint_15_4250.pt (epoch 15 @ 4250 updates, score 4.04) (writing took 0.07 seconds)\n"
        "2026-11-27 13:46:47 | INFO | fairseq.checkpoint_utils | Saved checkpoint /x/checkpoints/"
        "checkpoint_best.pt (epoch 15 @ 4365 updates, score 4.04) (writing took 0.07 seconds)\n")
    prior = parse_train_log(str(log))
    assert prior["saved_updates"] == 4365 and prior["runs"] == 1
    with pytest.raises(BenchmarkError, match=r"saved checkpoints up to update 4365, but .*checkpoint_last.pt is "
                                             r"missing.*put the checkpoint back.*to train this model"):
        check_resumable(str(tmp_path), prior)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    check_resumable(str(tmp_path), prior)  # resumable: nothing to say
    # interrupted before its first save: nothing was lost, it starts again as it would have anyway
    (tmp_path / "checkpoints" / "checkpoint_last.pt").unlink()
    log.write_text(log.read_text().splitlines(keepends=True)[0])
    check_resumable(str(tmp_path), parse_train_log(str(log)))
