"""The training stage of the translation benchmark: one fairseq-train run per (direction, slot).

Resumable: the command line is recorded (a rerun with another refuses to mix them), an interrupted run
resumes from ``checkpoint_last.pt``, and ``train_done.json`` marks a finished stage.  A tqdm bar follows
the updates (or the time budget) with the ETA of the whole benchmark.  The functions take the running
``benchmarks.translation.Benchmark`` as ``bench``.
"""
import contextlib
import glob
import json
import os
import shlex
import sys
import time

from tqdm import tqdm

from benchmarks import report
from benchmarks.common import USER_DIR, BenchmarkError, read_json, write_json
from benchmarks.fairseq_runner import run_fairseq
from benchmarks.logs import LOADED_RE, RECORD_RE, num, parse_train_log
from benchmarks.progress import say
from benchmarks.stopping import stop_reason, training_clock


def train_args(bench, direction, slot):
    a, c = bench.args, bench.slot_cfg[slot]
    src, tgt = direction.split("-")
    save_dir = os.path.join(bench.job_dir(direction, slot), "checkpoints")
    sizes = []
    for side in ("encoder", "decoder"):
        sizes += [f"--{side}-embed-dim", str(a.embed_dim), f"--{side}-ffn-embed-dim", str(a.ffn_dim),
                  f"--{side}-layers", str(a.layers), f"--{side}-attention-heads", str(a.heads)]
    cmd = [
        os.path.join(bench.data, bench.prep["directions"][direction]),
        "--user-dir", USER_DIR, "--task", "translation", "--source-lang", src, "--target-lang", tgt,
        "--arch", c["arch"], *sizes,
        "--dropout", str(a.dropout),
        "--criterion", c["criterion"], "--label-smoothing", str(a.label_smoothing),
        "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", str(a.clip_norm),
        "--weight-decay", str(a.weight_decay),
        "--lr", str(a.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(a.warmup_updates),
        "--warmup-init-lr", "1e-07",
        "--max-tokens", str(a.max_tokens),
        # fairseq 0.12 drops the last batch of a length-sorted epoch unless it is a multiple of this
        # (facebookresearch/fairseq#5036): it would silently skip the longest sentences
        "--required-batch-size-multiple", "1",
        "--seed", str(a.seed),
        "--save-dir", save_dir, "--no-epoch-checkpoints",
        "--log-format", "json", "--log-interval", str(a.log_interval),
        "--num-workers", str(a.num_workers),
    ]
    if not a.no_share_embeddings:
        cmd.append("--share-all-embeddings")
    if a.max_update:
        cmd += ["--max-update", str(a.max_update)]
    if a.budget_minutes:
        cmd += ["--stop-time-hours", repr(a.budget_minutes / 60.0)]
    if a.validate_interval_updates:
        v = str(a.validate_interval_updates)
        cmd += ["--validate-interval-updates", v, "--save-interval-updates", v, "--keep-interval-updates", "1"]
    if a.average_best > 1:
        cmd += ["--keep-best-checkpoints", str(a.average_best)]
    if getattr(a, "patience", 0):
        # fairseq counts validations (every --validate-interval-updates and every epoch end) without an
        # improvement of the validation loss; the wrapper makes the count survive a resume
        cmd += ["--patience", str(a.patience)]
    if getattr(a, "dev_bleu", False):
        # BLEU of the valid set at every validation (fairseq's --eval-bleu): stock search, beam --dev-bleu-beam,
        # on the BPE-free tokenised text without further tokenisation (what the test scores use, but no -lc:
        # the default data are lowercased already)
        gen = {"beam": a.dev_bleu_beam, "max_len_a": 1.5, "max_len_b": 10}
        cmd += ["--eval-bleu", "--eval-bleu-args", json.dumps(gen), "--eval-bleu-remove-bpe",
                bench.prep["remove_bpe"], "--eval-tokenized-bleu"]
    if a.fp16:
        cmd.append("--fp16")
    return cmd + c["extra_args"] + shlex.split(a.train_args or "")


def train(bench, direction, slot, pos):
    jdir = bench.job_dir(direction, slot)
    os.makedirs(jdir, exist_ok=True)
    done_path = os.path.join(jdir, "train_done.json")
    cmd_path = os.path.join(jdir, "train_command.json")
    log_path = os.path.join(jdir, "train.log")
    args = train_args(bench, direction, slot)
    extended = False
    if os.path.exists(cmd_path):
        old = with_softmax_named(read_json(cmd_path)["fairseq_args"], args)
        if old != args:
            if not raised_bound(old, args):
                raise BenchmarkError(f"{jdir} was trained with another command line; delete it or use another --out"
                                     f"\n  was: {shlex.join(old)}\n  now: {shlex.join(args)}")
            extended = continue_past_bound(jdir, f"[{pos}] {direction} {slot}")
            note = rescaled_schedule(old, args)
            if extended and note:
                say(f"[{pos}] {direction} {slot}: {note}")
            write_json(cmd_path, {"fairseq_args": args})
    else:
        write_json(cmd_path, {"fairseq_args": args})
    if os.path.exists(done_path):
        summary = read_json(done_path)
        bench.measured.setdefault((direction, slot), {})["train"] = summary["train_wall_seconds"]
        say(f"[{pos}] {direction} {slot}: training already done ({summary['updates']} updates), skipped")
        return summary

    prior = parse_train_log(log_path)
    if prior["finished"] and not extended and os.path.exists(os.path.join(jdir, "checkpoints", "checkpoint_best.pt")):
        say(f"[{pos}] {direction} {slot}: fairseq-train had finished; collecting its results")
    else:
        check_resumable(jdir, prior)
        _train_process(bench, direction, slot, pos, args, log_path, prior)
    summary = summarize_training(jdir)
    # the machine that trained, which need not be the one that decodes (--train-only, then decode elsewhere)
    summary["train_hardware"] = report.hardware(getattr(bench, "software", {}), bench.args.threads)
    write_json(done_path, summary)
    bench.measured.setdefault((direction, slot), {})["train"] = summary["train_wall_seconds"]
    return summary


BOUND_FLAGS = ("--max-update", "--stop-time-hours")
# what the decoding stage derived from the checkpoints of a training that a raised bound continues
DERIVED = ("train_done.json", "lenpen.json", "decode*_done.json", "test*.hyp", "generate*")


def _split_bounds(args):
    rest, bounds, i = [], {}, 0
    while i < len(args):
        if args[i] in BOUND_FLAGS and i + 1 < len(args):
            bounds[args[i]] = float(args[i + 1])
            i += 2
        else:
            rest.append(args[i])
            i += 1
    return rest, bounds


def with_softmax_named(old, new):
    """``old`` with the ``--lexicon softmax`` of ``new`` where ``new`` names it and ``old`` names no lexicon: a
    direct-HMM slot recorded when softmax was fairseq-train's default trained the model the slot now names."""
    if "--lexicon" in old or "--lexicon" not in new:
        return old
    k = new.index("--lexicon")
    return old[:k] + new[k:k + 2] + old[k:] if new[k + 1:k + 2] == ["softmax"] else old


def raised_bound(old, new):
    """Whether the fairseq-train command lines ``old`` and ``new`` differ only by a raised bound: a larger
    ``--max-update`` / ``--stop-time-hours``, or one dropped (no limit)."""
    (rest_old, b_old), (rest_new, b_new) = _split_bounds(old), _split_bounds(new)
    if rest_old != rest_new or b_old == b_new:
        return False
    return all(f not in b_new or (f in b_old and b_new[f] >= b_old[f]) for f in BOUND_FLAGS)


def rescaled_schedule(old, new):
    """What a raised ``--max-update`` does to a ``--lexicon-topk-schedule`` with percentage points: they refer
    to the new bound, as if training had started with it (a pruned phase may come back), or None."""
    flag = "--lexicon-topk-schedule"
    if flag not in new or "%" not in new[new.index(flag) + 1]:
        return None
    from hmm_nmt.models.topk_schedule import parse_topk_schedule  # only here: it loads fairseq

    text = new[new.index(flag) + 1]
    b_old, b_new = (int(_split_bounds(a)[1].get("--max-update", 0)) for a in (old, new))
    if not b_old or not b_new or b_old == b_new:
        return None

    def points(bound):
        return ", ".join(f"K={k} from {u}" for u, k in parse_topk_schedule(text, bound))

    return (f"{flag} {text} now refers to --max-update {b_new}: {points(b_new)} "
            f"(was {points(b_old)}), as if training had started with the new bound")


def check_resumable(jdir, prior):
    """Refuse a job whose earlier runs saved checkpoints that are gone (deleted, or a copy made without them):
    fairseq-train would silently start again at update 0, and the
    report would add the lost runs' time and updates to the new one's.  A run interrupted before its first save
    left nothing to resume and starts again as it would have anyway."""
    last = os.path.join(jdir, "checkpoints", "checkpoint_last.pt")
    if prior.get("saved_updates") and not os.path.exists(last):
        raise BenchmarkError(
            f"{jdir}: its earlier runs saved checkpoints up to update {prior['saved_updates']}, but {last} is "
            "missing, so training cannot resume; put the checkpoint back, or delete {jdir} to train this model "
            "from scratch")


def continue_past_bound(jdir, what):
    """Prepare the job ``jdir`` for a raised bound.  A model stopped by patience has converged and keeps its
    results (False).  Otherwise fairseq-train continues from ``checkpoint_last.pt`` (its time budget counts the
    earlier runs too) and the outputs derived from the earlier checkpoints move to ``superseded-UPDATES/`` (True)."""
    done_path = os.path.join(jdir, "train_done.json")
    done = read_json(done_path) if os.path.exists(done_path) else None
    if done and done.get("stop_reason") == "patience":
        say(f"{what}: converged at {done['updates']} updates (patience); the raised bound changes nothing")
        return False
    if done is None:  # never finished (interrupted): the next run resumes or starts as it would have anyway
        return True
    last = os.path.join(jdir, "checkpoints", "checkpoint_last.pt")
    if not os.path.exists(last):
        raise BenchmarkError(f"{jdir}: the bound was raised, but there is no {last} to continue from (a copy with "
                             "only checkpoint_best.pt can be decoded, not trained further); use another --out")
    updates = done["updates"]
    old = os.path.join(jdir, f"superseded-{updates}")
    stale = sorted({p for pattern in DERIVED for p in glob.glob(os.path.join(jdir, pattern))})
    if stale:
        os.makedirs(old, exist_ok=True)
        for p in stale:
            os.replace(p, os.path.join(old, os.path.basename(p)))
    say(f"{what}: bound raised: training continues from checkpoint_last.pt ({updates} updates)"
        + (f"; the earlier results moved to {old}" if stale else ""))
    return True


def stats_files(jdir, kind):
    return sorted(glob.glob(os.path.join(jdir, f"{kind}_stats.*.json")),
                  key=lambda p: int(p.rsplit(".", 2)[-2]))


def _train_process(bench, direction, slot, pos, args, log_path, prior):
    a = bench.args
    jdir = bench.job_dir(direction, slot)
    runs = stats_files(jdir, "train")
    stats_path = os.path.join(jdir, f"train_stats.{len(runs)}.json")
    # time already spent in earlier (interrupted) runs, for the progress bar of a budgeted run
    spent = 0.0
    for p in runs:
        with contextlib.suppress(Exception):
            s = read_json(p)
            spent += (s.get("finished") or s.get("updated") or s["started"]) - s["started"]
    budget_s = a.budget_minutes * 60.0 if a.budget_minutes else None
    by_time = budget_s is not None
    total = budget_s if by_time else a.max_update
    what = f"[{pos}] {direction} {slot} ({bench.slot_cfg[slot]['arch']})"
    if prior["runs"]:
        say(f"{what}: resuming from {os.path.join(jdir, 'checkpoints', 'checkpoint_last.pt')}")
    bar = tqdm(total=round(total), desc=f"{what} train", unit="s" if by_time else "upd",
               dynamic_ncols=True, mininterval=1.0, file=sys.stderr)
    state = {"start": time.time(), "updates": prior["updates"], "valid": None, "loss": None,
             "start_updates": None}

    def refresh():
        elapsed = time.time() - state["start"]
        if by_time:
            done = min(spent + elapsed, budget_s)
            left = max(budget_s - done, 0.0)
            if a.max_update and state["updates"] and state["start_updates"] is not None:
                rate = (state["updates"] - state["start_updates"]) / max(elapsed, 1e-9)
                if rate > 0:
                    left = min(left, (a.max_update - state["updates"]) / rate)
        else:
            done = state["updates"]
            base = state["start_updates"] or 0
            rate = (state["updates"] - base) / max(elapsed, 1e-9)
            left = (a.max_update - state["updates"]) / rate if rate > 0 else None
        bar.n = round(done)
        post = {"upd": state["updates"]}
        if state["loss"] is not None:
            post["loss"] = state["loss"]
        if state["valid"] is not None:
            post["valid_nll"] = state["valid"]
        total_est = None if left is None else spent + elapsed + left
        post["ETA all"] = bench.eta_text((direction, slot), left or 0.0, total_est) if left is not None else "?"
        bar.set_postfix(post, refresh=False)
        bar.refresh()

    def on_line(line):
        m = LOADED_RE.search(line)
        if m:
            state["updates"] = int(m.group(2))
            state["start_updates"] = int(m.group(2))
        m = RECORD_RE.search(line)
        if not m:
            return
        with contextlib.suppress(json.JSONDecodeError):
            rec = json.loads(m.group(2))
            if m.group(1) == "train_inner":
                state["updates"] = int(num(rec.get("num_updates")) or state["updates"])
                state["loss"] = rec.get("loss")
                if state["start_updates"] is None:
                    state["start_updates"] = 0
            elif m.group(1) == "valid":
                state["valid"] = rec.get("valid_nll_loss")
            refresh()

    try:
        run_fairseq(bench.python, bench.env, "train", stats_path, args, log_path, on_line=on_line)
    finally:
        refresh()
        bar.close()


def summarize_training(jdir):
    """The stage's results from the job directory ``jdir``: its train.log, checkpoints and training stats."""
    log = parse_train_log(os.path.join(jdir, "train.log"))
    ckpt_dir = os.path.join(jdir, "checkpoints")
    for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
        if not os.path.exists(os.path.join(ckpt_dir, name)):
            raise BenchmarkError(f"fairseq-train left no {name} in {ckpt_dir} (see {jdir}/train.log)")
    if not log["valid_curve"]:
        raise BenchmarkError(f"{jdir}/train.log has no validation record; was the budget too small to finish an epoch?")
    if log["params"] is None:
        raise BenchmarkError(f"{jdir}/train.log does not state the number of parameters")
    tokens = step_s = wall = 0.0
    updates_measured = 0
    rss, cuda = [], []
    runs = [read_json(p) for p in stats_files(jdir, "train")]
    clock = training_clock(runs)
    for s in runs:
        tokens += s["train_tokens"]
        step_s += s["train_step_seconds"]
        updates_measured += s["updates"]
        wall += (s.get("finished") or s.get("updated") or s["started"]) - s["started"]
        if s.get("max_rss_bytes"):
            rss.append(s["max_rss_bytes"])
        if s.get("cuda_max_allocated_bytes"):
            cuda.append(s["cuda_max_allocated_bytes"])
    curve = [dict(r, **{k: clock["validations"].get(r["updates"], {}).get(k)
                        for k in ("wall_seconds", "train_wall_seconds", "cpu_seconds")})
             for r in log["valid_curve"]]
    best = min(curve, key=lambda r: r["loss"])
    bleus = [r for r in curve if r.get("bleu") is not None]
    best_bleu = max(bleus, key=lambda r: r["bleu"]) if bleus else None
    return {
        "parameters": log["params"],
        "parameters_trained": log["params_trained"],
        "updates": max(log["updates"], log["valid_curve"][-1]["updates"]),
        "epochs": log["valid_curve"][-1]["epoch"],
        "fairseq_runs": log["runs"],
        "resumed_at_updates": log["resumed_from"],
        "train_wall_seconds": wall,
        "train_step_seconds": step_s,
        "train_tokens_measured": int(tokens),
        "updates_measured": updates_measured,
        "train_tokens_per_second": tokens / step_s if step_s > 0 else None,
        "peak_train_rss_bytes": max(rss) if rss else None,
        "peak_train_cuda_bytes": max(cuda) if cuda else None,
        "train_cpu_seconds": clock["cpu_seconds"],
        "train_valid_seconds": clock["valid_seconds"],
        "stop_reason": stop_reason(log, runs),
        # updates where a validation plateau started the next --lexicon-topk-schedule step
        "topk_switches": sorted({u for s in runs for u in s.get("topk_switches") or []}),
        "valid_curve": curve,
        "best_valid_loss": best["loss"],
        "best_valid_nll_loss": best["nll_loss"],
        "best_valid_updates": best["updates"],
        "best_valid_epoch": best["epoch"],
        "best_valid_wall_seconds": best.get("wall_seconds"),
        "best_dev_bleu": best_bleu["bleu"] if best_bleu else None,
        "best_dev_bleu_updates": best_bleu["updates"] if best_bleu else None,
    }
