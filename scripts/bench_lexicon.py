#!/usr/bin/env python3
"""Throughput of the fused chunked lexicon kernel against a plain matmul of the same shape.

The exact zero-order lexicon of one update projects N = tokens x source-length rows of width d onto the
vocabulary V, forward and backward: three matmuls of N x d x V (logits, grad of the hidden, grad of the
weight), 6 N d V flop, plus one recomputation of the logits in backward (2 N d V more, not counted as
useful work). The script times ``LexiconScores`` forward+backward and reports its useful GFLOP/s
(6 N d V / time) next to the GFLOP/s of plain ``torch.mm`` on a chunk of the same shape, for fp32 and bf16,
and the peak extra memory of each (tracemalloc cannot see torch's allocator, so we report the size of the
logits the kernel keeps alive: chunk x V, against the N x V an unchunked version would hold).

Default shape: a small Multi30k model (d=256, joint BPE vocabulary ~9k, ~3.4k target tokens per update,
~14 source tokens per sentence), i.e. N = 3400 x 14 rows; ``--rows`` scales it down for quick runs.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hmm_nmt.hmm.lexicon import LEXICON_DTYPES, lexicon_scores  # noqa: E402


def best_time(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=3400 * 14, help="(i, j) rows N")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=9000)
    ap.add_argument("--chunk", type=int, default=1024, help="--lexicon-chunk-size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(LEXICON_DTYPES))
    opts = ap.parse_args(argv)
    torch.set_num_threads(opts.threads)
    n, d, v = opts.rows, opts.dim, opts.vocab
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, d, generator=g).requires_grad_()
    weight = (torch.randn(v, d, generator=g) * d ** -0.5).requires_grad_()
    bias = torch.zeros(v, requires_grad=True)
    target = torch.randint(0, v, (n,), generator=g)
    useful = 6.0 * n * d * v
    print(f"N={n} rows, d={d}, V={v}, chunk={opts.chunk}, threads={opts.threads}")
    print(f"{'dtype':<6} {'matmul GFLOP/s':>15} {'lexicon GFLOP/s':>16} {'ratio':>6} {'fwd+bwd s':>10} "
          f"{'logits kept MB':>15} {'unchunked MB':>13}")
    for name in opts.dtypes:
        dtype = LEXICON_DTYPES[name]
        a = hidden.detach()[: opts.chunk].to(dtype)
        w = weight.detach().to(dtype)
        mm = best_time(lambda: torch.mm(a, w.t()), opts.repeat)
        mm_gflops = 2.0 * a.size(0) * d * v / mm / 1e9

        def step():
            gold, mean = lexicon_scores(hidden, weight, bias, target, opts.chunk, dtype)
            (gold.sum() + 0.1 * mean.sum()).backward()

        t = best_time(step, opts.repeat)
        lex_gflops = useful / t / 1e9
        print(f"{name:<6} {mm_gflops:>15.1f} {lex_gflops:>16.1f} {lex_gflops / mm_gflops:>6.2f} {t:>10.2f} "
              f"{opts.chunk * v * 4 / 2 ** 20:>15.1f} {n * v * 4 / 2 ** 20:>13.0f}")


if __name__ == "__main__":
    main()
