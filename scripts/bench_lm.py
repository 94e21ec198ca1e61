#!/usr/bin/env python
"""Language-model benchmark: ``hmm_lm`` (VL-HMM) configurations against a Kneser-Ney 5-gram (NLTK) and fairseq's
``lstm_lm`` / ``transformer_lm``, side by side in one run on the same data (``examples/wsj_lm``).

Every neural model is trained by ``fairseq-train`` in its own child process (sentence mode, ``--sample-break-mode
eos``, the same epochs, batch size and seed, optionally the same time limit) and scored on the dev and test
split by stock ``fairseq-validate`` (checkpoint_best; the exact NLL of the criterion, which for ``hmm_lm`` equals
what ``fairseq-eval-lm`` reports, tested, at a fraction of the cost). The 5-gram is NLTK's interpolated Kneser-Ney (discount 0.75) over the same sentences
(``<s>`` padding, ``</s>`` scored, like the neural models' EOS; NLTK's continuation counts are looked up in an
index instead of rescanned per query, same values, spot-checked at every run). Columns: dev / test perplexity, parameters, seconds per training epoch
(training tokens over fairseq's words per second), peak resident memory of the training process. A tqdm bar runs over the models;
each child's log is kept in ``OUT/NAME.train.log``. Writes ``OUT/results.json`` and prints a markdown table.

    python scripts/bench_lm.py --raw RAW --bin BIN --out OUT [--models kn5,lstm,transformer,hmm-4k,...] [--epochs 4]

Early stopping: ``--patience P`` stops a model after P validations (here: epochs) in a row without a lower
dev loss (fairseq's ``--patience``), with ``--epochs`` / ``--max-epoch`` and ``--stop-minutes`` as the bound;
the table then says "converged (patience P)" and reports per model the epoch and update it stopped at and why,
its best dev loss and epoch, the training wall clock and CPU time (``benchmarks/fairseq_instrumented.py``).
Interrupting is safe: the same command resumes a model from its ``checkpoint_last.pt`` (and stops at the same
epoch), skips models already trained and refuses to mix command lines in one ``--out``.

``RAW`` holds {train,valid,test}.txt and the Brown cluster files (``examples/wsj_lm/prepare.py``), ``BIN`` the
``fairseq-preprocess --only-source`` directory of the same text. ``--list`` prints the model names.
"""
import argparse
import json
import os
import sys
import time

from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]
from benchmarks.common import BenchmarkError  # noqa: E402
from benchmarks.fairseq_runner import interrupt_on_sigterm  # noqa: E402
from benchmarks.lm import DEFAULT, MODELS, collect, kn5, plot_dev_curves, run_fairseq  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", help="prepared text: {train,valid,test}.txt, brown*.txt")
    ap.add_argument("--bin", help="fairseq-preprocess --only-source output of the same text")
    ap.add_argument("--out", help="output directory (logs, checkpoints, results.json)")
    ap.add_argument("--models", default=DEFAULT, help=f"comma-separated (default {DEFAULT})")
    ap.add_argument("--epochs", "--max-epoch", dest="epochs", type=int, default=4,
                    help="upper bound on the epochs of every model (fairseq --max-epoch)")
    ap.add_argument("--patience", type=int, default=0,
                    help="stop a model after P validations (one per epoch) in a row without a lower dev loss "
                         "(fairseq --patience; 0: train to the bound)")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="OMP/MKL threads of every child")
    ap.add_argument("--stop-minutes", type=float, default=0, help="also stop any training after this long")
    ap.add_argument("--reuse", action="store_true",
                    help="models with a checkpoint_best.pt and training log in OUT are only scored, not retrained")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    ap.add_argument("--collect", nargs="+", metavar="OUT",
                    help="no training: merge the results.json of these --out directories (models run in parallel, "
                         "one --out each, or one --out per seed) into one table; with --plot PNG also the dev curves")
    ap.add_argument("--plot", help="with --collect: write the per-epoch dev perplexity curves to this PNG")
    opts = ap.parse_args(argv)
    if opts.list:
        print("kn5", *MODELS)
        return
    if opts.collect:
        try:
            merged = collect(opts.collect)
        except BenchmarkError as e:
            print(f"bench_lm.py: error: {e}", file=sys.stderr)
            return 1
        print(collected_table(merged))
        if opts.plot:
            plot_dev_curves(merged, opts.plot, "dev perplexity per epoch (first run of each model)")
        return 0
    if opts.plot:
        ap.error("--plot goes with --collect")
    for flag in ("raw", "bin", "out"):
        if not getattr(opts, flag):
            ap.error(f"--{flag} is required")
    names = [n for n in opts.models.split(",") if n]
    unknown = [n for n in names if n != "kn5" and n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown} (--list)")
    for path in (os.path.join(opts.raw, "train.txt"), os.path.join(opts.bin, "dict.txt")):
        if not os.path.isfile(path):
            ap.error(f"{path}: no such file (run examples/wsj_lm/prepare.sh)")
    os.makedirs(opts.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(opts.threads), MKL_NUM_THREADS=str(opts.threads),
               PYTHONPATH=ROOT + os.pathsep + os.path.join(ROOT, "alignment") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    results_path = os.path.join(opts.out, "results.json")
    results = json.load(open(results_path)) if os.path.isfile(results_path) else {}
    if opts.patience < 0 or opts.epochs < 1:
        ap.error("--patience must be >= 0 and --epochs >= 1")
    interrupt_on_sigterm()
    try:
        for name in tqdm(names, desc="models"):
            t0 = time.time()
            if name == "kn5":
                dev, test, entries, secs = kn5(opts.raw)
                res = {"dev_ppl": dev, "test_ppl": test, "params": entries, "s_per_epoch": None, "peak_rss_mb": None,
                       "note": "NLTK KneserNeyInterpolated order 5, discount 0.75; params = stored n-gram entries"}
            else:
                res = run_fairseq(name, MODELS[name], opts, env)
            res["wall_s"] = time.time() - t0
            results[name] = res
            atomic_write(results_path, json.dumps(results, indent=1))
            tqdm.write(f"{name}: {json.dumps(res)}")
    except BenchmarkError as e:
        print(f"bench_lm.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbench_lm.py: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    print(table(names, results, opts))
    return 0


def budget_text(opts):
    bound = f"at most {opts.epochs} epochs" + (f" or {opts.stop_minutes:g} minutes" if opts.stop_minutes else "")
    if opts.patience:
        return (f"converged (patience {opts.patience}: stopped after {opts.patience} epochs in a row without a lower "
                f"dev loss), {bound}")
    return f"budget: {bound}"


def table(names, results, opts):
    """The markdown table: dev / test perplexity, size, speed, and where and why each model stopped."""
    lines = [f"\n{budget_text(opts)}; wall / CPU: training processes, minutes\n",
             "| model | params | dev ppl | test ppl | s/epoch | peak RSS MB | stopped at epoch (update) | why | "
             "best dev epoch | train wall min | train CPU min |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in names:
        r = results[name]
        spe = "-" if r.get("s_per_epoch") is None else f"{r['s_per_epoch']:.0f}"
        mem = "-" if r.get("peak_rss_mb") is None else f"{r['peak_rss_mb']:.0f}"
        stop = "-" if r.get("stopped_at_epoch") is None else f"{r['stopped_at_epoch']} ({r['stopped_at_update']:,})"
        wall = "-" if r.get("train_wall_s") is None else f"{r['train_wall_s'] / 60:.1f}"
        cpu = "-" if r.get("train_cpu_s") is None else f"{r['train_cpu_s'] / 60:.1f}"
        lines.append(f"| {name} | {r['params']:,} | {r['dev_ppl']:.1f} | {r['test_ppl']:.1f} | {spe} | {mem} | {stop} | "
                     f"{r.get('stop_reason', '-')} | {r.get('best_dev_epoch', '-')} | {wall} | {cpu} |")
    return "\n".join(lines)


def collected_table(merged):
    """One row per model over its runs (seeds): dev / test perplexity of each run and their mean, where each run
    stopped and why, its best dev epoch and training minutes."""
    def each(runs, key, fmt):
        vals = [r.get(key) for r in runs]
        return " / ".join("-" if v is None else fmt.format(v) for v in vals)

    lines = ["| model | runs | params | dev ppl | test ppl | mean dev | mean test | stopped at epoch (update) | why | "
             "best dev epoch | train ppl (last epoch) | train wall min |",
             "| --- | ---: | ---: | --- | --- | ---: | ---: | --- | --- | --- | --- | --- |"]
    for name, runs in merged.items():
        mean = {k: sum(r[k] for r in runs) / len(runs) for k in ("dev_ppl", "test_ppl")}
        stop = " / ".join("-" if r.get("stopped_at_epoch") is None else
                          f"{r['stopped_at_epoch']} ({r['stopped_at_update']:,})" for r in runs)
        wall = " / ".join("-" if r.get("train_wall_s") is None else f"{r['train_wall_s'] / 60:.1f}" for r in runs)
        lines.append(f"| {name} | {len(runs)} | {runs[0]['params']:,} | {each(runs, 'dev_ppl', '{:.1f}')} | "
                     f"{each(runs, 'test_ppl', '{:.1f}')} | {mean['dev_ppl']:.1f} | {mean['test_ppl']:.1f} | {stop} | "
                     f"{each(runs, 'stop_reason', '{}')} | {each(runs, 'best_dev_epoch', '{}')} | "
                     f"{each(runs, 'train_ppl_last_epoch', '{:.1f}')} | {wall} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
