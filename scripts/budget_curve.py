#!/usr/bin/env python
"""A time-to-quality curve of ``hmm-nmt-align-corpus``'s first pass: AER on a gold set's dev and test parts
against training updates and seconds, with no second pass (what the default budget is chosen on).

    python scripts/budget_curve.py --work runs/align/europarl-deen --gold gold.talp --gold-one-based \\
        --dev-pairs 100 --max-update 4800 --every 600 --results results/alignment/europarl-deen-budget.json

``--work`` is a folder of ``scripts/align_benchmark.py`` (``corpus.src``/``corpus.tgt``: the gold pairs first).
The first pass is trained as the command trains it (its BPE, dictionary, fairseq-train command line, both
directions side by side, one thread each), with every ``--every`` updates' checkpoint kept, in ``WORK/curve``;
a rerun resumes. Each kept point is scored by the command's default merge (``hmm-nmt-align --method posterior
--symmetrize mean --links threshold:0.5 --pool words``) on the gold pairs. Under the linear schedule the
learning rate reaches 0 only at ``--max-update``: a point before it is the model mid-schedule, a lower bound on
what a run of that many updates would reach.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment"), os.path.join(ROOT, "scripts")]
from align_benchmark import BIN, Gold, _command, _read_links, hardware, log  # noqa: E402
from alignment_tables import curve_table  # noqa: E402

from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402
from hmm_nmt_align.corpus.budget import resolve  # noqa: E402
from hmm_nmt_align.corpus.cli import _settle_manifest  # noqa: E402
from hmm_nmt_align.corpus.cli import build_parser as corpus_parser  # noqa: E402
from hmm_nmt_align.corpus.inputs import Corpus  # noqa: E402
from hmm_nmt_align.corpus.model_dir import ModelDir  # noqa: E402
from hmm_nmt_align.corpus.prepare import prepare  # noqa: E402
from hmm_nmt_align.corpus.train import _train_cmd  # noqa: E402

WALL = re.compile(r'"num_updates": "(\d+)".*?"wall": "([\d.]+)"')


def train(opts, md_path):
    """Both directions' first pass, every ``--every`` updates kept; returns the model directory."""
    work = opts.work
    copts = corpus_parser().parse_args(["-s", f"{work}/corpus.src", "-t", f"{work}/corpus.tgt", "--model-dir", md_path,
                                        "-o", os.devnull, "--max-update", str(opts.max_update), "--guide-updates", "0",
                                        "--threads", "2", *opts.corpus_args])
    corpus = Corpus(copts.src, copts.tgt, None)
    resolve(copts, corpus.src_len, corpus.tgt_len)
    os.makedirs(md_path, exist_ok=True)
    md = ModelDir(md_path)
    _settle_manifest(md, copts, corpus.digest, len(corpus))
    if not md.done("bin"):
        prepare(md, copts, corpus)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs = []
    for name in ("fwd", "rev"):
        if os.path.exists(md.file(name, f"checkpoint_{opts.max_update}.pt")) or _done(md, name, opts.max_update):
            continue
        os.makedirs(md.file(name), exist_ok=True)
        cmd = _train_cmd(md, copts, name, opts.max_update) + [
            "--save-interval-updates", str(opts.every), "--keep-interval-updates", "-1"]
        procs.append(subprocess.Popen(cmd, stdout=open(md.file(name, "train.log"), "a", encoding="utf-8"),
                                      stderr=subprocess.STDOUT, env=env))
    if procs:
        log(f"training both directions to {opts.max_update} updates (log: {md.file('fwd', 'train.log')})")
    if any(p.wait() for p in procs):
        raise SystemExit(f"budget_curve: training failed (logs in {md_path}/fwd, rev)")
    return md, copts


def _done(md, name, n):
    return any(f.endswith(f"_{n}.pt") for f in os.listdir(md.file(name))) if os.path.isdir(md.file(name)) else False


def points(md, every):
    """{updates: (fwd checkpoint, rev checkpoint, training seconds)} of the kept intervals."""
    out = {}
    walls = {}
    for name in ("fwd", "rev"):
        with open(md.file(name, "train.log"), encoding="utf-8", errors="replace") as f:
            walls[name] = {int(u): float(w) for u, w in WALL.findall(f.read())}
    for f in sorted(os.listdir(md.file("fwd"))):
        m = re.match(r"checkpoint_\d+_(\d+)\.pt$", f)
        if not m or int(m.group(1)) % every:
            continue
        n = int(m.group(1))
        rev = [g for g in os.listdir(md.file("rev")) if g.endswith(f"_{n}.pt")]
        if rev:
            secs = max(walls[d].get(n, 0.0) for d in ("fwd", "rev"))
            out[n] = (md.file("fwd", f), md.file("rev", rev[0]), secs)
    return dict(sorted(out.items()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--gold", required=True)
    p.add_argument("--gold-one-based", action="store_true")
    p.add_argument("--gold-reverse", action="store_true")
    p.add_argument("--gold-src", help="the gold pairs' source text (default: the corpus's first lines)")
    p.add_argument("--dev-pairs", type=int, required=True)
    p.add_argument("--max-update", type=int, default=4800)
    p.add_argument("--every", type=int, default=600)
    p.add_argument("--results", required=True)
    p.add_argument("--name", default="")
    p.add_argument("--note", default="", help="a sentence for the results file (e.g. what else ran on the cores)")
    p.add_argument("corpus_args", nargs=argparse.REMAINDER, help="-- then hmm-nmt-align-corpus model options")
    opts = p.parse_args(argv)
    opts.corpus_args = opts.corpus_args[1:] if opts.corpus_args[:1] == ["--"] else opts.corpus_args
    with open(opts.gold, encoding="utf-8") as f:
        n_gold = sum(1 for _ in f)
    with open(os.path.join(opts.work, "corpus.src"), encoding="utf-8") as f:
        src_lens = [len(next(f).split()) for _ in range(n_gold)]
    with open(os.path.join(opts.work, "corpus.tgt"), encoding="utf-8") as f:
        tgt_lens = [len(next(f).split()) for _ in range(n_gold)]
    gold = Gold(opts, src_lens, tgt_lens)
    md, copts = train(opts, os.path.join(opts.work, "curve"))
    gold_src, gold_tgt = md.file("gold.src"), md.file("gold.tgt")
    for side, path in (("src", gold_src), ("tgt", gold_tgt)):
        with open(os.path.join(opts.work, f"corpus.{side}"), encoding="utf-8") as f:
            atomic_write(path, "".join(next(f) for _ in range(n_gold)))
    rows = []
    for n, (fwd, rev, secs) in points(md, opts.every).items():
        out = md.file(f"gold.{n}.align")
        if not os.path.exists(out):
            cmd = [os.path.join(BIN, "hmm-nmt-align"), "--path", fwd, "--rev-path", rev, "--data", md.file("bin"),
                   "--bpe-codes", md.file("codes"), "--src-text", gold_src, "--tgt-text", gold_tgt, "--method",
                   "posterior", "--symmetrize", "mean", "--links", "threshold:0.5", "--pool", "words",
                   "--no-progress", "-o", out]
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        rows.append({"updates": n, "train_s": round(secs, 1), "scores": gold.score(_read_links(out, n_gold))})
        log(f"{n} updates, {secs:.0f} s: dev {rows[-1]['scores']['dev']['AER']} test {rows[-1]['scores']['test']['AER']}")
    command = _command()
    if opts.note:  # the note is the file's own field, not part of the command
        command = command.replace(" " + shlex.quote(opts.note), "").replace(" --note", "", 1)
    results = {"name": opts.name, "command": command, "hardware": hardware(),
               "data": {"gold_pairs": n_gold, "dev_pairs": opts.dev_pairs,
                        "training_pairs": md.data["done"]["bin"]["train_pairs"]},
               "config": md.data["config"], "merge": "mean, threshold:0.5, pooled to words (the default)",
               "date": time.strftime("%Y-%m-%d"), "note": opts.note, "points": rows}
    os.makedirs(os.path.dirname(os.path.abspath(opts.results)), exist_ok=True)
    atomic_write(opts.results, json.dumps(results, indent=1) + "\n")
    print(curve_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
