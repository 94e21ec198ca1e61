"""The command behind interim_status.txt: the CPU convergence run's progress from its train.log and train_stats
(no decoding), with the report's own functions; run from the repository root:
``python docs/multi30k/cpu-conv/interim_status.py``."""
import sys

sys.path.insert(0, ".")
from benchmarks.common import read_json
from benchmarks.logs import parse_train_log
from benchmarks.stopping import first_reach, training_clock
from benchmarks.training import stats_files

rows = {}
for m in ("transformer", "dhmm0_fast"):
    j = f"runs/m30k-cpuconv/seed-1/de-en/{m}"
    log = parse_train_log(f"{j}/train.log")
    clock = training_clock([read_json(p) for p in stats_files(j, "train")])
    curve = []
    for v in log["valid_curve"]:
        u = v["updates"]
        c = clock["validations"].get(u, {})
        curve.append({"updates": u, "bleu": v.get("bleu"), "nll_loss": v.get("nll_loss"), "loss": v.get("loss"),
                      "train_wall_seconds": c.get("train_wall_seconds"), "wall_seconds": c.get("wall_seconds")})
    rows[m] = (log, clock, curve)
    best = max(curve, key=lambda p: p["bleu"] or 0)
    bestl = min(curve, key=lambda p: p["loss"])
    print(f"{m}: {log['updates']} updates, epoch {log['epoch']}, finished {log['finished']} ({log['stop_reason']}); "
          f"wall {clock['wall_seconds']/60:.1f} min, cpu {clock['cpu_seconds']/60:.1f} min, valid {clock['valid_seconds']/60:.1f} min; "
          f"best dev BLEU {best['bleu']} at {best['updates']}; best valid loss {bestl['loss']} (nll {bestl['nll_loss']}) at {bestl['updates']}")
ref = rows["transformer"][2]
target = max(p["bleu"] for p in ref if p["bleu"] is not None)
for m, (_, _, curve) in rows.items():
    upd, secs = first_reach(curve, "bleu", target, True)
    print(f"{m}: first reaches the transformer's best dev BLEU {target}: update {upd}, train wall {secs and secs/60:.2f} min"
          if upd else f"{m}: has not reached {target} (best so far {max(p['bleu'] or 0 for p in curve)})")
    for thr in (30, 32, 33, 34, 34.5, 35):
        u, s = first_reach(curve, "bleu", thr, True)
        print(f"   dev BLEU >= {thr}: update {u}, {s and round(s/60, 2)} min")
