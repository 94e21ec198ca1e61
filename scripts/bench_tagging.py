#!/usr/bin/env python3
"""Side-by-side sequence labelling benchmark of the HNMC family and the RNN baselines (paper Tables 1-3).

Trains the seven taggers (``rnn birnn hnmc hnmc2 hnmc_cn`` as in the paper, plus ``bilstm bigru``) with
the same embedding size, hidden size, optimiser, learning rate, batch size and number of epochs, for
several seeds, on a CoNLL file (default: CoNLL-2000, chunking = column 2 and POS = column 1, the dev split
carved from the training file with a fixed seed), and prints for every architecture a table

    task | RNN | BiRNN | HNMC | HNMC2 | HNMC-CN | BiLSTM | BiGRU

with mean and 95 % confidence half-width (Student t over the seeds) of chunk F1 (chunking, seqeval) or
tag accuracy (POS) on the dev split, then the training and tagging speed (tokens/s, mean over runs) and
the parameter counts. Every run is stored in ``--out`` (JSON), and runs already there are reused, so an
interrupted benchmark resumes.

    python scripts/bench_tagging.py --train-sentences 1000 --epochs 5 --seeds 1 2 3 --out bench.json
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

import torch
from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from hmm_nmt_io import atomic_write  # noqa: E402

MODELS = [("rnn", "RNN"), ("birnn", "BiRNN"), ("hnmc", "HNMC"), ("hnmc2", "HNMC2"), ("hnmc_cn", "HNMC-CN"),
          ("bilstm", "BiLSTM"), ("bigru", "BiGRU")]
TASKS = {"chunk": (2, "chunk F1"), "pos": (1, "accuracy")}
# t_{0.975, df} for the 95 % interval of a mean over few seeds
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def parse_args(argv=None):
    default_data = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2000", "train.txt.gz")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=default_data, help="CoNLL training file (dev carved from it)")
    p.add_argument("--tasks", nargs="+", default=["chunk", "pos"],
                   help="chunk, pos, or NAME=COLUMN for another tag column of --data")
    p.add_argument("--models", nargs="+", default=[m for m, _ in MODELS], choices=[m for m, _ in MODELS])
    p.add_argument("--architectures", nargs="+", type=int, default=[2], choices=[1, 2, 3])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--train-sentences", type=int, default=0, help="first N training sentences (0: all)")
    p.add_argument("--dev-fraction", type=float, default=0.1)
    p.add_argument("--dev-seed", type=int, default=1)
    p.add_argument("--embed-dim", type=int, default=50)
    p.add_argument("--embed-path", default=None, help="pretrained word vectors (text), same for all models")
    p.add_argument("--hidden-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", default="bench_tagging.json", help="JSON file of all runs (resumed if present)")
    return p.parse_args(argv)


def ci95(values):
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, float("nan")
    return mean, T975.get(n - 1, 1.96) * statistics.stdev(values) / math.sqrt(n)


def run_key(task, model, arch, seed):
    return f"{task}|{model}|{arch}|{seed}"


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from fairseq import tasks as fairseq_tasks

    from benchmarks.tagging import make_args, train_and_evaluate

    runs = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            runs = json.load(f)["runs"]
    task_specs = []
    for t in args.tasks:
        name, _, col = t.partition("=")
        if col:
            task_specs.append((name, int(col), "accuracy"))
        elif name in TASKS:
            task_specs.append((name, TASKS[name][0], TASKS[name][1]))
        else:
            sys.exit(f"error: unknown task {t!r} (chunk, pos or NAME=COLUMN)")
    todo = [(t, m, a, s) for t in task_specs for a in args.architectures for m in args.models for s in args.seeds]
    workdir = tempfile.mkdtemp(prefix="bench_tagging.")
    bar = tqdm(todo, desc="runs", unit="run", file=sys.stderr)
    loaded = {}
    for (name, col, metric), model, arch, seed in bar:
        key = run_key(name, model, arch, seed)
        bar.set_postfix_str(key)
        if key in runs:
            continue
        extra = ["--train-file", args.data, "--tag-column", str(col), "--dev-fraction", str(args.dev_fraction),
                 "--dev-seed", str(args.dev_seed), "--train-subset-sentences", str(args.train_sentences),
                 "--embed-dim", str(args.embed_dim), "--hidden-size", str(args.hidden_size),
                 "--tagger-architecture", str(arch)]
        if args.embed_path:
            extra += ["--embed-path", args.embed_path]
        fargs = make_args(f"{model}_tagger", workdir, extra)
        if name not in loaded:  # the data and dictionaries are the same for every model of a task
            task = fairseq_tasks.setup_task(fargs)
            task.load_dataset("train")
            task.load_dataset("valid")
            loaded[name] = task
        task = loaded[name]
        task.args = fargs
        t0 = time.time()
        res = train_and_evaluate(fargs, seed=seed, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, task=task)
        res["score"] = res["chunk_f1"] if metric == "chunk F1" else res["accuracy"]
        res["metric"] = metric
        res["wall"] = time.time() - t0
        res["train_tokens"] = int(task.dataset("train").src_sizes.sum())
        res["dev_tokens"] = int(task.dataset("valid").src_sizes.sum())
        runs[key] = {k: (float(v) if isinstance(v, (int, float)) or hasattr(v, "item") else v) for k, v in res.items()
                     if v is not None}
        atomic_write(args.out, json.dumps({"config": vars(args), "runs": runs}, indent=1))
        tqdm.write(f"{key}: {metric} {res['score']:.2f}  train {res['train_tok_s']:.0f} tok/s  ({res['wall']:.0f} s)",
                   file=sys.stderr)
    print(report(runs, task_specs, args))


def report(runs, task_specs, args):
    models = [(m, label) for m, label in MODELS if m in args.models]
    lines = [f"data: {args.data}; first {args.train_sentences or 'all'} training sentences after carving "
             f"{args.dev_fraction:.0%} dev (seed {args.dev_seed}); embed {args.embed_dim}, hidden {args.hidden_size}, "
             f"Adam lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, seeds {args.seeds}", ""]
    for arch in args.architectures:
        lines.append(f"Architecture {arch}: dev score, mean ± 95% CI half-width over {len(args.seeds)} seeds")
        lines.append("")
        lines.append("| task | " + " | ".join(label for _, label in models) + " |")
        lines.append("|---" * (len(models) + 1) + "|")
        for name, _, metric in task_specs:
            cells = []
            for m, _ in models:
                vals = [runs[run_key(name, m, arch, s)]["score"] for s in args.seeds if run_key(name, m, arch, s) in runs]
                if not vals:
                    cells.append("-")
                    continue
                mean, half = ci95(vals)
                cells.append(f"{mean:.2f} ± {half:.2f}" if not math.isnan(half) else f"{mean:.2f}")
            lines.append(f"| {name} ({metric}) | " + " | ".join(cells) + " |")
        for label_key, label in (("train_tok_s", "train tokens/s"), ("tag_tok_s", "tagging tokens/s"),
                                 ("params", "parameters (mean over tasks)")):
            cells = []
            for m, _ in models:
                vals = [runs[k][label_key] for k in runs if k.split("|")[1] == m and k.split("|")[2] == str(arch)]
                cells.append(f"{statistics.fmean(vals):.0f}" if vals else "-")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
