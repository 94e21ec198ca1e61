"""The command behind interim_status.txt: the CPU convergence run's progress from its train.log and train_stats
(no decoding), with the report's own functions; run from the repository root:
``python docs/multi30k/cpu-conv/interim_status.py [--png PATH]``.  Also draws seed 1's curves (default
``curves.seed-1.png`` beside this file).  ``--root runs/m30k-ladder`` reads the ladder (ladder.sh: one ``--out``
per model, ``seed-S/MODEL/de-en/MODEL``) and draws no curves unless ``--png`` is given.

A model whose job directory is gone (a session on a new machine starts without ``runs/``) is read from the
committed report ``seed-S.results.json`` beside this file, when that report has it: its validation curve with
the training clock of each validation, measured on the machine that trained it, which need not be this one."""
import argparse
import json
import os
import sys

sys.path.insert(0, ".")
from benchmarks.common import read_json
from benchmarks.logs import parse_train_log
from benchmarks.stopping import first_reach, training_clock
from benchmarks.training import machines_of, stats_files

ROOT = "runs/m30k-cpuconv"
MODELS = ("transformer", "dhmm0_fast", "dhmm0", "dhmm1_fast", "hnmc", "iohmm")
LEVELS = (30, 32, 33, 34, 35, 36, 36.5, 37)
EQUAL_UPDATES = (2000, 4000, 6000, 8000, 10000, 12000, 14000, 16000, 18000)


HERE = os.path.dirname(os.path.abspath(__file__))


def from_report(seed_dir, model):
    """(log, clock, curve) of ``model`` from a committed report of ``seed_dir`` (``seed-S.results.json``, or
    ``seed-S.MODEL.results.json`` for a model decoded by its own run), or None."""
    rows, path = [], None
    for name in (f"{seed_dir}.results.json", f"{seed_dir}.{model}.results.json"):
        path = os.path.join(HERE, name)
        if os.path.exists(path):
            with open(path) as f:
                rows = [r for r in json.load(f)["results"].get("de-en", []) if r["slot"] == model]
            if rows:
                break
    if not rows or not rows[0].get("valid_curve"):
        return None
    r = rows[0]
    log = {"updates": r["updates"], "epoch": r["epochs"], "finished": True, "stop_reason": r["stop_reason"],
           "source": f"report {os.path.basename(path)}"}
    clock = {"wall_seconds": r["train_wall_seconds"], "cpu_seconds": r["train_cpu_seconds"],
             "valid_seconds": r["train_valid_seconds"]}
    curve = [{"updates": v["updates"], "bleu": v.get("bleu"), "nll_loss": v.get("nll_loss"), "loss": v.get("loss"),
              "train_wall_seconds": v.get("train_wall_seconds")} for v in r["valid_curve"]]
    return log, clock, curve


def curve_of(jdir):
    log = parse_train_log(f"{jdir}/train.log")
    clock = training_clock([read_json(p) for p in stats_files(jdir, "train")])
    curve = []
    for v in log["valid_curve"]:
        c = clock["validations"].get(v["updates"], {})
        curve.append({"updates": v["updates"], "bleu": v.get("bleu"), "nll_loss": v.get("nll_loss"),
                      "loss": v.get("loss"), "train_wall_seconds": c.get("train_wall_seconds")})
    machines = machines_of(jdir)
    if len(machines) > 1:  # a leg on another machine: the clock adds up both machines' times
        log["machines"] = "; ".join(f"{m['updates']:,} updates on {m['machine']}" for m in machines)
    return log, clock, curve



def job_dir(root, seed_dir, model):
    """The job directory of ``model`` under go.sh's layout (one --out per seed) or ladder.sh's (one per model)."""
    for jdir in (f"{root}/{seed_dir}/de-en/{model}", f"{root}/{seed_dir}/{model}/de-en/{model}"):
        if os.path.exists(f"{jdir}/train.log"):
            return jdir
    return None


def plot(rows, path, title, recipe_size):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for m, (_, _, curve) in rows.items():
        a.plot([p["updates"] for p in curve], [p["loss"] for p in curve], label=m)
        pts = [p for p in curve if p["bleu"] is not None and p["train_wall_seconds"] is not None]
        b.plot([p["train_wall_seconds"] / 60 for p in pts], [p["bleu"] for p in pts], label=m)
    a.set(xlabel="updates", ylabel="validation loss (label-smoothed, bits)")
    b.set(xlabel="training wall clock without validations (min)", ylabel="dev BLEU (greedy)")
    if recipe_size:  # the committed curves.seed-1.png's frame
        a.set_ylim(3.5, 4.6)
        b.set_ylim(28, 39)
    for ax in (a, b):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


opts = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
opts.add_argument("--root", default=ROOT, help=f"the run's directory (default {ROOT}; the ladder: runs/m30k-ladder)")
opts.add_argument("--png", help="seed 1's curves (default: curves.seed-1.png beside this file for the default root, "
                  "none otherwise)")
opts = opts.parse_args()
recipe = os.path.normpath(opts.root) == ROOT
png = opts.png or (os.path.join(HERE, "curves.seed-1.png") if recipe else None)
title = ("Multi30k de-en, d=128 2+2, CPU (1 thread per model), seed 1" if recipe else
         f"Multi30k de-en, {opts.root}, CPU (1 thread per model), seed 1")
for seed_dir in sorted(d for d in os.listdir(opts.root) if d.startswith("seed-")):
    rows = {}
    for m in MODELS:
        jdir = job_dir(opts.root, seed_dir, m)
        if jdir:
            rows[m] = curve_of(jdir)
        else:  # the committed reports are the recipe size's
            rows[m] = from_report(seed_dir, m) if recipe else None
        if not rows[m] or not rows[m][2]:  # not run, or no validation yet
            del rows[m]
    print(f"== {seed_dir}")
    for m, (log, clock, curve) in rows.items():
        best = max(curve, key=lambda p: p["bleu"] or 0)
        bestl = min(curve, key=lambda p: p["loss"])
        print(f"{m}: {log['updates']} updates, epoch {log['epoch']}, finished {log['finished']} "
              f"({log['stop_reason']}); wall {clock['wall_seconds'] / 60:.1f} min, cpu {clock['cpu_seconds'] / 60:.1f} "
              f"min, valid {clock['valid_seconds'] / 60:.1f} min; best dev BLEU {best['bleu']} at {best['updates']}; "
              f"best valid loss {bestl['loss']} (nll {bestl['nll_loss']}) at {bestl['updates']}"
              + (f" [from the {log['source']}: another machine's clock]" if "source" in log else "")
              + (f" [trained on several machines, {log['machines']}: the clock adds up their times]"
                 if "machines" in log else ""))
    if seed_dir == "seed-1" and png and rows:
        plot(rows, png, title, recipe)
    if "transformer" not in rows:
        continue
    ref = rows["transformer"][2]
    target = max(p["bleu"] for p in ref if p["bleu"] is not None)
    _, ref_secs = first_reach(ref, "bleu", target, True)
    for m, (_, _, curve) in rows.items():
        upd, secs = first_reach(curve, "bleu", target, True)
        print(f"{m}: first reaches the transformer's best dev BLEU {target}: update {upd}, train wall "
              f"{secs / 60:.2f} min, {secs / ref_secs:.2f}x the transformer's" if upd else
              f"{m}: has not reached {target} (best so far {max(p['bleu'] or 0 for p in curve)})")
        for thr in LEVELS:
            u, s = first_reach(curve, "bleu", thr, True)
            if u is None:
                break
            print(f"   dev BLEU >= {thr}: update {u}, {s and round(s / 60, 2)} min")
    print("valid loss (label-smoothed, bits) / dev BLEU (greedy) at equal updates:")
    for u in EQUAL_UPDATES:
        cells = []
        for m, (_, _, curve) in rows.items():
            p = next((p for p in curve if p["updates"] == u), None)
            cells.append(f"{m} {p['loss']} / {p['bleu']}" if p else f"{m} -")
        print(f"   {u}: " + "; ".join(cells))
