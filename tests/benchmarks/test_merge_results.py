"""scripts/merge_translation_results.py: reports of separate benchmark runs joined into one table, the time to the
transformer's best dev BLEU recomputed across them, the summary over seeds; mismatched protocols refused."""
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from benchmarks.stopping import first_reach

MERGE = os.path.join(ROOT, "scripts", "merge_translation_results.py")
SETTINGS = {"data": "runs/m30k/data", "out": "x", "models": "", "embed_dim": 128, "ffn_dim": 512, "layers": 2,
            "heads": 4, "no_share_embeddings": False, "max_tokens": 2048, "lr": 0.002, "warmup_updates": 200,
            "dropout": 0.3, "label_smoothing": 0.1, "weight_decay": 1e-4, "clip_norm": 0.0, "seed": 1,
            "max_update": 1000, "budget_minutes": 0.0, "patience": 2, "dev_bleu": True, "dev_bleu_beam": 1,
            "validate_interval_updates": 100, "average_best": 1, "fp16": False, "train_args": "", "beam": 5,
            "lenpen": 1.0, "lenpen_grid": [], "eos_penalty_grid": [], "length_choice": "dev",
            "generate_args": "", "threads": 1}
HW = {"cpu": "Test CPU", "logical_cpus": 2, "threads": 1, "gpu": None, "device": "cpu", "python": "3.11",
      "torch": "2.13.0+cpu", "fairseq": "0.12.3", "platform": "Linux"}


def row(slot, bleus, seconds_per_validation, bleu=30.0, stop="patience"):
    curve = [{"updates": 100 * (i + 1), "epoch": i + 1, "loss": 5.0 - 0.1 * i, "nll_loss": 4.0 - 0.1 * i,
              "bleu": b, "train_wall_seconds": seconds_per_validation * (i + 1)} for i, b in enumerate(bleus)]
    best = max(range(len(bleus)), key=lambda i: bleus[i])
    return {"slot": slot, "label": slot, "arch": f"arch_{slot}", "criterion": "c", "extra_args": [],
            "direction": "de-en", "parameters": 1000, "updates": curve[-1]["updates"], "epochs": len(bleus),
            "train_wall_seconds": seconds_per_validation * len(bleus) + 10, "train_cpu_seconds": 50.0,
            "train_tokens_per_second": 100.0, "peak_train_rss_bytes": 2**20, "peak_train_cuda_bytes": None,
            "stop_reason": stop, "valid_curve": curve, "best_valid_loss": curve[-1]["loss"],
            "best_valid_nll_loss": curve[-1]["nll_loss"], "best_valid_updates": curve[-1]["updates"],
            "best_dev_bleu": bleus[best], "best_dev_bleu_updates": curve[best]["updates"], "lenpen": 1.0,
            "eos_penalty": 0.0, "decode_sentences_per_second": 5.0, "decode_tokens_per_second": 50.0,
            "peak_decode_rss_bytes": 2**20, "peak_decode_cuda_bytes": None, "bleu": bleu, "ter": 60.0 - bleu,
            "chrf": 50.0, "length_ratio": 1.0, "signatures": {"bleu": "b", "ter": "t", "chrf": "c"}}


def doc(rows, seed=1, complete=True, **settings):
    s = dict(SETTINGS, seed=seed, **settings)
    s["models"] = ",".join(r["slot"] for r in rows)
    return {"complete": complete, "created": "2026-11-27 10:00:00", "command": f"bench --models {s['models']}",
            "settings": s, "budget": "b", "hardware": HW,
            "data": {"config": "text=toy", "sentences": {"train": 10, "test": 2}}, "results": {"de-en": rows}}


def write(tmp_path, name, d):
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def merge(*args):
    return subprocess.run([sys.executable, MERGE, *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_two_runs_of_one_seed_share_a_table_and_the_time_to_quality_uses_the_other_runs_transformer(tmp_path):
    tr = row("transformer", [20.0, 25.0, 27.0, 26.0], 60.0, bleu=31.0)
    hmm = row("dhmm1_fast", [22.0, 27.5, 28.0], 90.0, bleu=33.0)
    a = write(tmp_path, "a.json", doc([tr]))
    b = write(tmp_path, "b.json", doc([hmm]))
    out = tmp_path / "joint"
    p = merge("--out", str(out), "--no-plots", b, a)
    assert p.returncode == 0, p.stderr
    merged = json.loads((out / "results.json").read_text())
    rows = merged["results"]["de-en"]
    assert [r["slot"] for r in rows] == ["transformer", "dhmm1_fast"]  # the benchmark's slot order
    # independent oracle: the HMM first reaches the transformer's best dev BLEU (27.0) at its 2nd validation
    upd, secs = first_reach(hmm["valid_curve"], "bleu", 27.0, True)
    assert (upd, secs) == (200, 180.0)
    assert rows[1]["time_to_quality"] == {"reference": "transformer", "metric": "dev BLEU", "target": 27.0,
                                          "updates": 200, "train_wall_seconds": 180.0}
    assert rows[0]["time_to_quality"]["updates"] == 300
    assert merged["budget"].startswith("converged (patience 2")
    md = (out / "results.md").read_text()
    assert "merged from 2 reports" in md and "`bench --models transformer`" in md
    assert "3.0 (update 200)" in md  # 180 s to the transformer's best, in the convergence table


def test_a_model_the_bound_stopped_keeps_the_table_from_saying_converged(tmp_path):
    a = write(tmp_path, "a.json", doc([row("transformer", [20.0, 21.0], 60.0)]))
    b = write(tmp_path, "b.json", doc([row("hnmc", [19.0, 22.0], 60.0, stop="max_update")]))
    p = merge("--out", str(tmp_path / "o"), "--no-plots", a, b)
    assert p.returncode == 0, p.stderr
    budget = json.loads((tmp_path / "o" / "results.json").read_text())["budget"]
    assert budget.startswith("early stopping") and "stopped by patience: 1 of 2" in budget


def test_reports_decoded_on_two_machines_name_both_and_warn_that_their_decode_speeds_differ(tmp_path):
    other = dict(HW, cpu="Other CPU")
    a = write(tmp_path, "a.json", doc([row("transformer", [20.0, 21.0], 60.0)]))
    b = write(tmp_path, "b.json", dict(doc([row("dhmm0_fast", [19.0, 22.0], 60.0)]), hardware=other))
    p = merge("--out", str(tmp_path / "o"), "--no-plots", a, b)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "o" / "results.md").read_text()
    assert "decoded on CPU Test CPU, 2 logical cores, 1 thread(s) per process and CPU Other CPU" in md
    assert "de-en dhmm0_fast on CPU Other CPU" in md and "compare rows of one machine only" in md
    # one machine: the report names it once, with no warning
    p = merge("--out", str(tmp_path / "one"), "--no-plots", a)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "one" / "results.md").read_text()
    assert "per process and CPU" not in md and "compare rows of one machine only" not in md
    # the summary over seeds names both machines too
    c = write(tmp_path, "c.json", doc([row("transformer", [20.0, 21.0], 60.0)], seed=2))
    p = merge("--out", str(tmp_path / "seeds"), "--no-plots", a, b, c)
    assert p.returncode == 0, p.stderr
    assert "CPU Other CPU" in (tmp_path / "seeds" / "summary.md").read_text()


def test_two_seeds_give_per_seed_tables_and_the_mean_time_to_quality(tmp_path):
    paths = []
    for seed, (hmm_bleus, sec) in {1: ([26.0, 27.0], 100.0), 2: ([27.5, 28.0], 50.0)}.items():
        paths.append(write(tmp_path, f"t{seed}.json", doc([row("transformer", [25.0, 27.0], 60.0)], seed=seed)))
        paths.append(write(tmp_path, f"h{seed}.json", doc([row("dhmm0_fast", hmm_bleus, sec)], seed=seed)))
    out = tmp_path / "o"
    p = merge("--out", str(out), "--no-plots", *paths)
    assert p.returncode == 0, p.stderr
    assert (out / "seed-1" / "results.md").exists() and (out / "seed-2" / "results.md").exists()
    summary = json.loads((out / "summary.json").read_text())
    hmm = next(r for r in summary["summary"]["de-en"] if r["slot"] == "dhmm0_fast")
    # seed 1 reaches 27.0 at its 2nd validation (200 s), seed 2 at its 1st (50 s): mean 125 s
    assert hmm["ttq_minutes"]["values"] == pytest.approx([200 / 60, 50 / 60])
    assert hmm["ttq_minutes"]["mean"] == pytest.approx(125 / 60)
    md = (out / "summary.md").read_text()
    assert "converged (patience 2" in md
    assert "| 2.1 ± 1.8 |" in md  # 200 s and 50 s: mean 2.08 min, sd 1.77


def test_a_model_run_on_one_seed_only_shows_its_value_without_a_spread(tmp_path):
    paths = [write(tmp_path, f"t{s}.json", doc([row("transformer", [25.0, 27.0], 60.0)], seed=s)) for s in (1, 2)]
    paths.append(write(tmp_path, "h1.json", doc([row("hnmc", [26.0, 27.5], 120.0, bleu=32.5)], seed=1)))
    p = merge("--out", str(tmp_path / "o"), "--no-plots", *paths)
    assert p.returncode == 0, p.stderr
    line = next(x for x in (tmp_path / "o" / "summary.md").read_text().splitlines() if x.startswith("| hnmc"))
    assert "| 1 | 200 | 32.50 |" in line and "±" not in line


def test_a_level_reached_on_some_seeds_only_says_so(tmp_path):
    paths = [write(tmp_path, f"t{s}.json", doc([row("transformer", [25.0, 27.0], 60.0)], seed=s)) for s in (1, 2)]
    paths += [write(tmp_path, "h1.json", doc([row("hnmc", [26.0, 27.5], 120.0)], seed=1)),
              write(tmp_path, "h2.json", doc([row("hnmc", [26.0, 26.5], 120.0)], seed=2))]  # never reaches 27.0
    p = merge("--out", str(tmp_path / "o"), "--no-plots", *paths)
    assert p.returncode == 0, p.stderr
    line = next(x for x in (tmp_path / "o" / "summary.md").read_text().splitlines() if x.startswith("| hnmc"))
    assert "| 4.0 (1 of 2 seeds) |" in line  # 240 s on seed 1 only


@pytest.mark.parametrize("case, message", [
    ("protocol", "another protocol than"),
    ("duplicate", "de-en transformer is in both"),
    ("partial", "a partial report"),
    ("data", "other data"),
    ("json", "not JSON (line 1"),
    ("missing", "cannot read"),
])
def test_reports_that_do_not_belong_together_are_refused_and_nothing_is_written(tmp_path, case, message):
    a = write(tmp_path, "a.json", doc([row("transformer", [20.0], 60.0)]))
    other = {
        "protocol": doc([row("dhmm0", [20.0], 60.0)], lr=0.001),
        "duplicate": doc([row("transformer", [21.0], 60.0)]),
        "partial": doc([row("dhmm0", [20.0], 60.0)], complete=False),
        "data": dict(doc([row("dhmm0", [20.0], 60.0)]), data={"config": "text=other", "sentences": {}}),
    }.get(case)
    if case == "json":
        b = str(tmp_path / "b.json")
        (tmp_path / "b.json").write_text("{not json")
    elif case == "missing":
        b = str(tmp_path / "absent.json")
    else:
        b = write(tmp_path, "b.json", other)
    out = tmp_path / "o"
    p = merge("--out", str(out), a, b)
    assert p.returncode == 1
    assert message in p.stderr
    assert "b.json" in p.stderr or "absent.json" in p.stderr  # the file at fault is named
    if case == "protocol":
        assert "lr=0.001 (not 0.002)" in p.stderr
    assert not out.exists()


def test_an_input_inside_out_is_refused(tmp_path):
    out = tmp_path / "o"
    (out / "seed-1").mkdir(parents=True)
    a = write(out / "seed-1", "results.json", doc([row("transformer", [20.0], 60.0)]))
    p = merge("--out", str(out), a)
    assert p.returncode == 1 and "would overwrite" in p.stderr


def test_a_larger_bound_that_did_not_bind_joins_the_table_under_the_smaller_one(tmp_path):
    # a job resumed with --max-update raised (1000 -> 1500) that patience still stopped by update 1000, on a
    # schedule that ignores the bound, trained as a job bounded at 1000 would have
    a = write(tmp_path, "a.json", doc([row("transformer", [20.0, 21.0], 60.0)]))
    b = write(tmp_path, "b.json", doc([row("iohmm", [19.0, 22.0, 22.5], 60.0)], max_update=1500))
    out = tmp_path / "o"
    p = merge("--out", str(out), "--no-plots", b, a)
    assert p.returncode == 0, p.stderr
    merged = json.loads((out / "results.json").read_text())
    assert merged["settings"]["max_update"] == 1000
    assert [s["max_update"] for s in merged["sources"]] == [1500, 1000]
    assert merged["budget"].startswith("converged (patience 2") and "at most 1000 updates" in merged["budget"]
    md = (out / "results.md").read_text()
    assert "bound 1500, but patience stopped every row by update 1000" in md


@pytest.mark.parametrize("change, message", [
    ({"stop_reason": "max_update"}, "stopped by max_update, not by patience"),
    ({"updates": 1200}, "trained 1200 updates, past 1000"),
    ({"extra_args": ["--lexicon-topk-schedule", "4@0,0@80%"]}, "a fraction of the bound (4@0,0@80%)"),
])
def test_a_larger_bound_that_may_have_changed_the_run_is_refused(tmp_path, change, message):
    a = write(tmp_path, "a.json", doc([row("transformer", [20.0, 21.0], 60.0)]))
    b = write(tmp_path, "b.json", doc([dict(row("dhmm0_fast", [19.0, 22.0], 60.0), **change)], max_update=1500))
    out = tmp_path / "o"
    p = merge("--out", str(out), "--no-plots", a, b)
    assert p.returncode == 1
    assert "b.json: another protocol: max_update=1500 (not 1000)" in p.stderr and message in p.stderr
    assert not out.exists()


def test_per_row_bounds_admit_a_model_that_needed_more_updates_and_name_its_bound(tmp_path):
    # patience stopped the HMM at update 1200, past the transformer's bound of 1000: refused by default (it
    # would have stopped at 1000 under that bound), kept with its own bound stated when asked
    a = write(tmp_path, "a.json", doc([row("transformer", [20.0, 21.0], 60.0)], seed=2))
    hmm = dict(row("hnmc", [19.0, 22.0], 60.0), updates=1200)
    b = write(tmp_path, "b.json", doc([hmm], seed=2, max_update=1500))
    out = tmp_path / "o"
    p = merge("--out", str(out), "--no-plots", a, b)
    assert p.returncode == 1 and "--per-row-bounds" in p.stderr and not out.exists()
    p = merge("--out", str(out), "--no-plots", "--per-row-bounds", a, b)
    assert p.returncode == 0, p.stderr
    merged = json.loads((out / "results.json").read_text())
    tr, hnmc = merged["results"]["de-en"]
    assert merged["settings"]["max_update"] == 1000 and "max_update" not in tr
    assert (hnmc["max_update"], hnmc["seed"]) == (1500, 2)
    assert [s["own_bound"] for s in merged["sources"]] == [[], ["hnmc"]]
    assert merged["budget"].startswith("converged (patience 2")
    assert "at most 1000 updates (hnmc seed 2: 1500 updates)" in merged["budget"]
    md = (out / "results.md").read_text()
    assert "bound 1500, kept by hnmc" in md
