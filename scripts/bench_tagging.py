#!/usr/bin/env python3
"""Side-by-side sequence labelling benchmark of the HNMC family and the RNN baselines (paper Tables 1-3).

Trains the seven taggers (``rnn birnn hnmc hnmc2 hnmc_cn`` as in the paper, plus ``bilstm bigru``) with
the same embedding size, hidden size, optimiser, learning rate, batch size and number of epochs, for
several seeds, on a CoNLL file (default: CoNLL-2000, chunking = column 2 and POS = column 1, the dev split
carved from the training file with a fixed seed), and prints for every architecture a table

    task | RNN | BiRNN | HNMC | HNMC2 | HNMC-CN | BiLSTM | BiGRU

with mean and 95 % confidence half-width (Student t over the seeds) of chunk F1 (chunking, seqeval) or
tag accuracy (POS) on the dev split, then the training and tagging speed (tokens/s, mean over runs) and
the parameter counts. Every run is stored in ``--out`` (JSON) as soon as it ends, and runs already there are
reused, so an interrupted benchmark resumes with the run it was in (the same command; more seeds, models, tasks
or architectures may be added to one ``--out``, other training settings are refused).

    python scripts/bench_tagging.py --train-sentences 1000 --epochs 5 --seeds 1 2 3 --out bench.json

Tasks (``--tasks``, alias ``--task``): ``chunk`` and ``pos`` (CoNLL-2000 chunk / WSJ POS columns of
``--data``, dev carved from it), ``ud_upos`` (UD English EWT UPOS, CoNLL-U, its own dev file), ``ner``
(CoNLL-2003 English NER: IOB1 files, trained in ``--ner-scheme``, BIOES by default, scored in IOB1 with
seqeval strict on eng.testa), ``wnut17`` (WNUT-17, IOB2), or ``NAME=COLUMN`` for another column of ``--data``.
Models: the paper's five, ``bilstm bigru`` and ``lstm gru bilstm_crf``. ``--patience P`` evaluates the dev
metric after every epoch, stops after P epochs without improvement (at most ``--max-epochs``) and keeps the
best epoch; the table then has a row with the epoch each model stopped at. Speeds are measured with
``--threads`` torch threads (default 1); the CPU (``lscpu``'s model name) is printed with the tables.
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
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402

MODELS = [("rnn", "RNN"), ("birnn", "BiRNN"), ("hnmc", "HNMC"), ("hnmc2", "HNMC2"), ("hnmc_cn", "HNMC-CN"),
          ("bilstm", "BiLSTM"), ("bigru", "BiGRU"), ("lstm", "LSTM"), ("gru", "GRU"), ("bilstm_crf", "BiLSTM-CRF")]
DEFAULT_MODELS = ["rnn", "birnn", "hnmc", "hnmc2", "hnmc_cn", "bilstm", "bigru"]
TASKS = {"chunk": (2, "chunk F1"), "pos": (1, "accuracy")}
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
# name -> (metric, fairseq task options); files of the shared data
DATASETS = {
    "ud_upos": ("accuracy", ["--data-format", "conllu", "--tag-column", "upos",
                             "--train-file", os.path.join(SHARED, "ud_en_ewt", "en_ewt-ud-train.conllu.gz"),
                             "--valid-file", os.path.join(SHARED, "ud_en_ewt", "en_ewt-ud-dev.conllu.gz")]),
    "ner": ("entity F1", ["--tag-column", "3", "--data-tag-scheme", "iob1",
                          "--train-file", os.path.join(SHARED, "conll2003", "eng.train.gz"),
                          "--valid-file", os.path.join(SHARED, "conll2003", "eng.testa.gz")]),
    "wnut17": ("entity F1", ["--tag-column", "1", "--data-tag-scheme", "iob2",
                             "--train-file", os.path.join(SHARED, "wnut17", "train.conll.gz"),
                             "--valid-file", os.path.join(SHARED, "wnut17", "dev.conll.gz")]),
}
# --test: each data set's test split (CoNLL-2000 here has no test file: chunk/pos report dev only)
TEST_FILES = {
    "ud_upos": os.path.join(SHARED, "ud_en_ewt", "en_ewt-ud-test.conllu.gz"),
    "ner": os.path.join(SHARED, "conll2003", "eng.testb.gz"),
    "wnut17": os.path.join(SHARED, "wnut17", "test.conll.gz"),
}


def cpu_name():
    """lscpu's model name (or the platform's processor string)."""
    import platform
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or "unknown CPU"
# t_{0.975, df} for the 95 % interval of a mean over few seeds
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def parse_args(argv=None):
    default_data = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2000", "train.txt.gz")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=default_data, help="CoNLL training file (dev carved from it)")
    p.add_argument("--tasks", "--task", nargs="+", default=["chunk", "pos"],
                   help="chunk, pos, ud_upos, ner, wnut17, or NAME=COLUMN for another tag column of --data")
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS, choices=[m for m, _ in MODELS])
    p.add_argument("--ner-scheme", default="bioes", help="tag scheme the entity tasks are trained in")
    p.add_argument("--decoding", choices=["argmax", "viterbi"], default="argmax", help="dev predictions")
    p.add_argument("--char-embed-dim", type=int, default=0, help="char BiLSTM features for every model (0: none)")
    p.add_argument("--char-hidden", type=int, default=25)
    p.add_argument("--patience", type=int, default=None,
                   help="early stopping: epochs without a better dev score (default: none, train --epochs)")
    p.add_argument("--max-epochs", type=int, default=None, help="alias of --epochs (the cap with --patience)")
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
    p.add_argument("--test", action="store_true",
                   help="also score each run's kept (dev-best) parameters once on the data set's test split "
                        "(ud_upos, ner, wnut17); a separate table")
    p.add_argument("--out", default="bench_tagging.json", help="JSON file of all runs (resumed if present)")
    return p.parse_args(argv)


def ci95(values):
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, float("nan")
    return mean, T975.get(n - 1, 1.96) * statistics.stdev(values) / math.sqrt(n)


# options that choose which runs to make, or how to run them, not what a run computes
NOT_TRAINING = ("out", "tasks", "models", "architectures", "seeds", "threads", "max_epochs")


def training_settings(config):
    return {k: v for k, v in config.items() if k not in NOT_TRAINING}


def run_key(task, model, arch, seed):
    return f"{task}|{model}|{arch}|{seed}"


def check_inputs(args, task_specs):
    """Every file the tasks read, before any run: a missing one is one line naming it and its option, exit 2."""
    where = "see docs/tagging.md, 'Where the data come from'"
    for name, _, _ in task_specs:
        if name not in DATASETS:
            if not os.path.isfile(args.data):
                print(f"bench_tagging.py: error: --data {args.data}: no such file (task {name}; {where})",
                      file=sys.stderr)
                sys.exit(2)
            continue
        opts = DATASETS[name][1]
        files = [opts[opts.index(flag) + 1] for flag in ("--train-file", "--valid-file")]
        for path in files + ([TEST_FILES[name]] if args.test else []):
            if not os.path.isfile(path):
                print(f"bench_tagging.py: error: --tasks {name} reads {path}: no such file ({where})", file=sys.stderr)
                sys.exit(2)


def main(argv=None):
    args = parse_args(argv)
    if args.max_epochs:
        args.epochs = args.max_epochs
    torch.set_num_threads(args.threads)
    runs = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            saved = json.load(f)
        runs = saved["runs"]
        # runs are reused by (task, model, architecture, seed): refuse to mix them with runs of other settings
        diff = sorted(k for k in training_settings(vars(args))
                      if k in saved.get("config", {}) and saved["config"][k] != vars(args)[k])
        if diff:
            details = ", ".join(f"--{k.replace('_', '-')} {saved['config'][k]!r} -> {vars(args)[k]!r}" for k in diff)
            sys.exit(f"error: {args.out} holds runs made with other settings ({details}); use another --out, "
                     "or delete it to start over")
    task_specs = []
    for t in args.tasks:
        name, _, col = t.partition("=")
        if col:
            task_specs.append((name, int(col), "accuracy"))
        elif name in TASKS:
            task_specs.append((name, TASKS[name][0], TASKS[name][1]))
        elif name in DATASETS:
            task_specs.append((name, None, DATASETS[name][0]))
        else:
            sys.exit(f"error: unknown task {t!r} (chunk, pos, {', '.join(DATASETS)} or NAME=COLUMN)")
    check_inputs(args, task_specs)
    from fairseq import tasks as fairseq_tasks  # after the checks: importing fairseq logs

    from benchmarks.tagging import make_args, train_and_evaluate

    todo = [(t, m, a, s) for t in task_specs for a in args.architectures for m in args.models for s in args.seeds]
    workdir = tempfile.mkdtemp(prefix="bench_tagging.")
    bar = tqdm(todo, desc="runs", unit="run", file=sys.stderr)
    loaded = {}
    for (name, col, metric), model, arch, seed in bar:
        key = run_key(name, model, arch, seed)
        bar.set_postfix_str(key)
        if key in runs:
            continue
        if name in DATASETS:
            extra = list(DATASETS[name][1])
            if DATASETS[name][0] == "entity F1":
                extra += ["--tag-scheme", args.ner_scheme]
        else:
            extra = ["--train-file", args.data, "--tag-column", str(col), "--dev-fraction", str(args.dev_fraction),
                     "--dev-seed", str(args.dev_seed)]
        extra += ["--train-subset-sentences", str(args.train_sentences),
                  "--embed-dim", str(args.embed_dim), "--hidden-size", str(args.hidden_size),
                  "--tagger-architecture", str(arch)]
        if args.test and name in TEST_FILES:
            extra += ["--test-file", TEST_FILES[name]]
        if args.char_embed_dim:
            extra += ["--char-embed-dim", str(args.char_embed_dim), "--char-hidden", str(args.char_hidden)]
        if args.embed_path:
            extra += ["--embed-path", args.embed_path]
        fargs = make_args(f"{model}_tagger", workdir, extra)
        if name not in loaded:  # the data and dictionaries are the same for every model of a task
            task = fairseq_tasks.setup_task(fargs)
            task.load_dataset("train")
            task.load_dataset("valid")
            if args.test and name in TEST_FILES:
                task.load_dataset("test")
            loaded[name] = task
        task = loaded[name]
        task.args = fargs
        t0 = time.time()
        res = train_and_evaluate(fargs, seed=seed, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, task=task,
                                 patience=args.patience, decoding=args.decoding,
                                 metric="accuracy" if metric == "accuracy" else "chunk_f1",
                                 test=args.test and name in TEST_FILES)
        res["score"] = res["accuracy"] if metric == "accuracy" else res["chunk_f1"]
        if "test_accuracy" in res:
            res["test_score"] = res["test_accuracy"] if metric == "accuracy" else res["test_chunk_f1"]
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


def data_description(name, args):
    """Which files a task reads (its dev split, and its test split with --test)."""
    if name not in DATASETS:
        return f"{name}: {args.data}, dev {args.dev_fraction:.0%} carved (seed {args.dev_seed})"
    opts = DATASETS[name][1]
    files = [os.path.basename(opts[opts.index(flag) + 1]) for flag in ("--train-file", "--valid-file")]
    if args.test and name in TEST_FILES:
        files.append(os.path.basename(TEST_FILES[name]))
    return f"{name}: " + ", ".join(files)


def report(runs, task_specs, args):
    models = [(m, label) for m, label in MODELS if m in args.models]
    lines = [f"CPU: {cpu_name()}; {args.threads} torch thread(s); decoding {args.decoding}"
             + (f"; early stopping: patience {args.patience}, at most {args.epochs} epochs" if args.patience else ""),
             "data: " + "; ".join(data_description(name, args) for name, _, _ in task_specs),
             f"first {args.train_sentences or 'all'} training sentences; embed {args.embed_dim}, hidden {args.hidden_size}, "
             f"Adam lr {args.lr}, batch {args.batch_size}, {args.epochs} epochs, seeds {args.seeds}", ""]
    def score_rows(arch, field):
        rows = []
        for name, _, metric in task_specs:
            cells = []
            for m, _ in models:
                keys = [run_key(name, m, arch, s) for s in args.seeds]
                vals = [runs[k][field] for k in keys if k in runs and field in runs[k]]
                if not vals:
                    cells.append("-")
                    continue
                mean, half = ci95(vals)
                cells.append(f"{mean:.2f} ± {half:.2f}" if not math.isnan(half) else f"{mean:.2f}")
            if field == "score" or any(c != "-" for c in cells):
                rows.append(f"| {name} ({metric}) | " + " | ".join(cells) + " |")
        return rows

    for arch in args.architectures:
        lines.append(f"Architecture {arch}: dev score, mean ± 95% CI half-width over {len(args.seeds)} seeds")
        lines.append("")
        lines.append("| task | " + " | ".join(label for _, label in models) + " |")
        lines.append("|---" * (len(models) + 1) + "|")
        lines.extend(score_rows(arch, "score"))
        stop_rows = (("epochs_run", "stopped at epoch (mean)"),) if args.patience else ()
        for label_key, label in (("train_tok_s", "train tokens/s"), ("tag_tok_s", "tagging tokens/s"),
                                 ("params", "parameters (mean over tasks)")) + stop_rows:
            cells = []
            for m, _ in models:
                vals = [runs[k][label_key] for k in runs if k.split("|")[1] == m and k.split("|")[2] == str(arch)
                        and label_key in runs[k]]
                cells.append(f"{statistics.fmean(vals):.0f}" if vals else "-")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
        test_rows = score_rows(arch, "test_score")
        if test_rows:
            lines.append(f"Architecture {arch}: test score of the same runs (dev-best epoch), evaluated once")
            lines.append("")
            lines.append("| task | " + " | ".join(label for _, label in models) + " |")
            lines.append("|---" * (len(models) + 1) + "|")
            lines.extend(test_rows)
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
