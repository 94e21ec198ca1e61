#!/usr/bin/env python
"""CPU time of one VL-HMM training step (forward + backward) with and without state dropout, interleaved
on the same batches in one process (robust to a shared machine's load, unlike per-run timings).

    python scripts/vlhmm_step_time.py --raw RAW --bin BIN [--states-per-cluster 64] [--dim 256] [--steps 6]

RAW/BIN as for scripts/bench_lm.py (``RAW/brown64.txt``, ``RAW/train.txt``, ``BIN/dict.txt``).
"""
import argparse
import os
import statistics
import time

import torch

from hmm_nmt.hmm.vlhmm import VLHMM, Constraints, read_word_clusters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--clusters", default="brown64.txt")
    ap.add_argument("--states-per-cluster", type=int, default=64)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--sentences", type=int, default=90, help="sentences per batch")
    ap.add_argument("--steps", type=int, default=6, help="steps per setting (the first is dropped as warm-up)")
    ap.add_argument("--dropout", type=float, nargs="+", default=[0.0, 0.5])
    opts = ap.parse_args(argv)
    torch.set_num_threads(1)
    syms = ["<s>", "<pad>", "</s>", "<unk>"] + [line.split()[0] for line in open(os.path.join(opts.bin, "dict.txt"))]
    wc, m = read_word_clusters(os.path.join(opts.raw, opts.clusters), syms, never=[0, 1])
    idx = {s: i for i, s in enumerate(syms)}
    lines = [line.split() for line in open(os.path.join(opts.raw, "train.txt"))]
    torch.manual_seed(0)
    model = VLHMM(Constraints.brown(wc, m, opts.states_per_cluster), len(syms), dim=opts.dim)
    times = {p: [] for p in opts.dropout}
    for it in range(opts.steps):
        ls = lines[it * opts.sentences:(it + 1) * opts.sentences]
        x = torch.full((len(ls), max(len(s) for s in ls) + 1), 1)
        for i, s in enumerate(ls):
            x[i, :len(s) + 1] = torch.tensor([idx.get(w, 3) for w in s] + [2])
        mask = x.ne(1)
        for p in opts.dropout:
            t = time.process_time()
            (-model.log_likelihood(x, mask, model.restrict(p)).sum()).backward()
            times[p].append(time.process_time() - t)
            model.zero_grad()
    for p, ts in times.items():
        print(f"|Z| = {m * opts.states_per_cluster}, state dropout {p}: median {statistics.median(ts[1:]):.2f} s CPU "
              f"per training step ({len(ts) - 1} steps of {opts.sentences} sentences)")


if __name__ == "__main__":
    main()
