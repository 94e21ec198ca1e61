#!/usr/bin/env python3
"""Throughput of the fused chunked lexicon kernel against plain matmuls of the same shapes.

The exact zero-order lexicon of one update projects N = tokens x source-length rows of width d onto the
vocabulary V, forward and backward. Its useful work is three matmuls of N x d x V (logits, grad of the
hidden, grad of the weight): 6 N d V flop. Backward recomputes the logits instead of keeping N x V of them,
one more matmul (8 N d V executed flop in all).

For each dtype the script times, interleaved and best of ``--repeat``:
  * matmul: the kernel's three matmul shapes on one chunk (C x d @ d x V, C x V @ V x d, V x C @ C x d),
    scaled to N rows: the time an ideal kernel would need for the useful work;
  * lexicon: ``LexiconScores`` forward + backward on all N rows.
and prints GFLOP/s of both and two ratios: ``useful`` = 6NdV-time of the matmuls / lexicon time, and
``executed`` = 8NdV-time (recomputation included) / lexicon time, i.e. how close to matmul speed the kernel
runs while it works. Memory: the kernel keeps one chunk x V logits buffer alive (two in bf16: the matmul's
bf16 output and its fp32 copy), against N x V unchunked; ``extra peak MB`` is measured: the high-water mark
of the resident memory of a fresh child process during one forward + backward, minus its resident memory
with the inputs allocated.

Default shape: a small Multi30k model (d=256, joint BPE vocabulary ~9k, ~3.4k target tokens per update,
~14 source tokens per sentence), i.e. N = 3400 x 14 rows; ``--rows`` scales it down for quick runs. The
output projection of fairseq's decoder has no bias, so neither has the default benchmark (``--bias``).
"""
import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time

import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "alignment")]  # this checkout's packages
from hmm_nmt.hmm.lexicon import LEXICON_DTYPES, lexicon_scores  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402


def timed(fn, sync):
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _peak_child(opts, name, queue):
    """Extra peak resident memory (MB) of one forward + backward, in a fresh process (Linux)."""
    torch.set_num_threads(opts.threads)
    g = torch.Generator().manual_seed(0)
    n, d, v = opts.rows, opts.dim, opts.vocab
    hidden = torch.randn(n, d, generator=g).requires_grad_()
    weight = (torch.randn(v, d, generator=g) * d ** -0.5).requires_grad_()
    bias = torch.zeros(v, requires_grad=True) if opts.bias else None
    target = torch.randint(0, v, (n,), generator=g)
    hidden.grad, weight.grad = torch.zeros_like(hidden), torch.zeros_like(weight)  # gradients are not overhead
    base = _rss_mb()
    gold, mean = lexicon_scores(hidden, weight, bias, target, min(opts.chunk, n), LEXICON_DTYPES[name])
    (gold.sum() + 0.1 * mean.sum()).backward()
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base)


def peak_extra_mb(opts, name):
    if opts.device != "cpu" or not os.path.exists("/proc/self/statm"):
        return float("nan")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_child, args=(opts, name, queue))
    proc.start()
    proc.join()
    return queue.get() if proc.exitcode == 0 else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=3400 * 14, help="(i, j) rows N")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=9000)
    ap.add_argument("--chunk", type=int, default=1024, help="--lexicon-chunk-size")
    ap.add_argument("--bias", action="store_true", help="give the output projection a bias")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(LEXICON_DTYPES))
    ap.add_argument("--json", help="also write the results to this JSON file")
    opts = ap.parse_args(argv)
    if opts.rows < 1 or opts.chunk < 1 or opts.repeat < 1:
        ap.error("--rows, --chunk and --repeat must be positive")
    torch.set_num_threads(opts.threads)
    dev = torch.device(opts.device)
    sync = torch.cuda.synchronize if opts.device == "cuda" else (lambda: None)
    n, d, v = opts.rows, opts.dim, opts.vocab
    c = min(opts.chunk, n)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, d, generator=g).to(dev).requires_grad_()
    weight = (torch.randn(v, d, generator=g) * d ** -0.5).to(dev).requires_grad_()
    bias = torch.zeros(v, device=dev, requires_grad=True) if opts.bias else None
    target = torch.randint(0, v, (n,), generator=g).to(dev)
    print(f"N={n} rows, d={d}, V={v}, chunk={c}, bias={opts.bias}, threads={opts.threads}, device={opts.device}")
    print(f"{'dtype':<6} {'matmul GF/s':>12} {'useful GF/s':>12} {'executed GF/s':>14} {'useful':>7} {'executed':>9} "
          f"{'fwd+bwd s':>10} {'extra peak MB':>14} {'chunk MB':>9} {'unchunked MB':>13}")
    results = []
    for name in opts.dtypes:
        dtype = LEXICON_DTYPES[name]
        a = hidden.detach()[:c].to(dtype)
        w = weight.detach().to(dtype)
        p = torch.randn(c, v, generator=g).to(dev).to(dtype)

        def matmuls():
            torch.mm(a, w.t()), torch.mm(p, w), torch.mm(p.t(), a)

        def fwd_mm():
            torch.mm(a, w.t())

        def step():
            gold, mean = lexicon_scores(hidden, weight, bias, target, c, dtype)
            (gold.sum() + 0.1 * mean.sum()).backward()
            hidden.grad = weight.grad = None

        step()
        matmuls()
        t_mm = t_fwd = t_lex = float("inf")
        for _ in range(opts.repeat):
            t_mm = min(t_mm, timed(matmuls, sync))
            t_fwd = min(t_fwd, timed(fwd_mm, sync))
            t_lex = min(t_lex, timed(step, sync))
        ideal = t_mm * n / c  # three matmuls on all rows
        r = {"dtype": name, "rows": n, "dim": d, "vocab": v, "chunk": c, "threads": opts.threads,
             "matmul_gflops": 6.0 * c * d * v / t_mm / 1e9, "useful_gflops": 6.0 * n * d * v / t_lex / 1e9,
             "executed_gflops": 8.0 * n * d * v / t_lex / 1e9, "useful_ratio": ideal / t_lex,
             "executed_ratio": (t_mm + t_fwd) * n / c / t_lex, "seconds": t_lex,
             "extra_peak_mb": peak_extra_mb(opts, name), "chunk_mb": c * v * 4 / 2 ** 20,
             "unchunked_mb": n * v * 4 / 2 ** 20}
        results.append(r)
        print(f"{name:<6} {r['matmul_gflops']:>12.1f} {r['useful_gflops']:>12.1f} {r['executed_gflops']:>14.1f} "
              f"{r['useful_ratio']:>7.2f} {r['executed_ratio']:>9.2f} {t_lex:>10.2f} {r['extra_peak_mb']:>14.0f} "
              f"{r['chunk_mb']:>9.1f} {r['unchunked_mb']:>13.0f}")
    if opts.json:
        atomic_write(opts.json, json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
