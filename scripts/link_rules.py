#!/usr/bin/env python
"""How a finished ``hmm-nmt-align-corpus`` model's merged posteriors should become links, scored on a gold set:
the mean of the two directions above a threshold T (the command's ``--links threshold:T``; default 0.5) for a
range of T, and thresholds set without gold from the corpus itself, each T the one that gives the corpus a
target number of links.

    python scripts/link_rules.py --work runs/align/europarl-deen --model-dir runs/align/europarl-deen/hmm.1 \\
        --gold gold.talp --gold-one-based --dev-pairs 100 --results results/alignment/europarl-deen-links.json

``--work`` is a folder of ``scripts/align_benchmark.py`` (``corpus.src``/``corpus.tgt``, the gold pairs first).
The gold pairs are aligned once by the command itself (``--align-only --links threshold:FLOOR --scores``: every
word link with its merged probability), and each rule keeps the links above its threshold. The rule with the
best dev AER is reported with its test score; the command's default is one of the rows.

Gold-free targets (``min words``: as many links as the smaller side of each pair has words, summed over the
pairs; ``mean words``: the mean of the two sides) are counted on the aligned pairs, which need no gold; a user
would count them on the whole corpus.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment"), os.path.join(ROOT, "scripts")]
from align_benchmark import BIN, Gold, _command, hardware  # noqa: E402
from alignment_tables import links_table  # noqa: E402

from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
FLOOR = 0.05  # the lowest probability kept from the command (every threshold and count target lies above it)


def read_scored(links_path, scores_path, n):
    """Per pair, [(i, j, p)] of the command's ``-o`` and ``--scores`` files (first ``n`` lines)."""
    out = []
    with open(links_path, encoding="utf-8") as fl, open(scores_path, encoding="utf-8") as fs:
        for k, (line, sline) in enumerate(zip(fl, fs)):
            if k >= n:
                break
            links = [tuple(map(int, x.split("-"))) for x in line.split()]
            probs = [float(x) for x in sline.split()]
            if len(links) != len(probs):
                raise SystemExit(f"link_rules: {scores_path}:{k + 1}: {len(probs)} scores for {len(links)} links")
            out.append([(i, j, p) for (i, j), p in zip(links, probs)])
    return out


def keep_above(scored, t):
    return [[(i, j) for i, j, p in sent if p > t] for sent in scored]


def threshold_for_count(scored, count):
    """The threshold that keeps the ``count`` most probable links of the corpus (ties kept together)."""
    probs = sorted((p for sent in scored for _, _, p in sent), reverse=True)
    if not probs:
        return 1.0
    count = int(round(count))
    if count >= len(probs):
        return FLOOR
    return probs[max(count, 1) - 1] - 1e-12


def rules(scored, src_lens, tgt_lens):
    """[(name, threshold)]: the fixed thresholds, then the gold-free ones."""
    out = [(f"threshold {t:g}", t) for t in THRESHOLDS]
    for name, count in (("min words", sum(min(a, b) for a, b in zip(src_lens, tgt_lens))),
                        ("mean words", sum((a + b) / 2 for a, b in zip(src_lens, tgt_lens)))):
        out.append((f"count = {name}", threshold_for_count(scored, count)))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--model-dir", required=True, help="a finished model directory of hmm-nmt-align-corpus")
    p.add_argument("--gold", required=True)
    p.add_argument("--gold-one-based", action="store_true")
    p.add_argument("--gold-reverse", action="store_true")
    p.add_argument("--dev-pairs", type=int, required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--name", default="")
    opts = p.parse_args(argv)
    with open(opts.gold, encoding="utf-8") as f:
        n_gold = sum(1 for _ in f)
    sides = {}
    for side in ("src", "tgt"):
        with open(os.path.join(opts.work, f"corpus.{side}"), encoding="utf-8") as f:
            sides[side] = [next(f) for _ in range(n_gold)]
    src_lens = [len(x.split()) for x in sides["src"]]
    tgt_lens = [len(x.split()) for x in sides["tgt"]]
    gold = Gold(opts, src_lens, tgt_lens)
    tmp = os.path.join(opts.work, "link-rules")
    os.makedirs(tmp, exist_ok=True)
    for side, lines in sides.items():
        atomic_write(os.path.join(tmp, f"gold.{side}"), "".join(lines))
    out, scores = os.path.join(tmp, "gold.align"), os.path.join(tmp, "gold.scores")
    subprocess.run([os.path.join(BIN, "hmm-nmt-align-corpus"), "-s", os.path.join(tmp, "gold.src"), "-t",
                    os.path.join(tmp, "gold.tgt"), "--model-dir", opts.model_dir, "--align-only", "--links",
                    f"threshold:{FLOOR}", "--scores", scores, "-o", out, "--no-progress"], check=True)
    scored = read_scored(out, scores, n_gold)
    rows = [{"rule": name, "threshold": round(t, 4), "links": sum(len(s) for s in keep_above(scored, t)),
             "scores": gold.score(keep_above(scored, t))} for name, t in rules(scored, src_lens, tgt_lens)]
    best = min(rows, key=lambda r: r["scores"]["dev"]["AER"])
    with open(os.path.join(opts.model_dir, "manifest.json"), encoding="utf-8") as f:
        config = json.load(f)["config"]
    results = {"name": opts.name, "command": _command(), "hardware": hardware(), "date": time.strftime("%Y-%m-%d"),
               "data": {"gold_pairs": n_gold, "dev_pairs": opts.dev_pairs}, "model_dir": opts.model_dir,
               "config": config, "dev_best": best["rule"], "rules": rows}
    os.makedirs(os.path.dirname(os.path.abspath(opts.results)), exist_ok=True)
    atomic_write(opts.results, json.dumps(results, indent=1) + "\n")
    print(links_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
