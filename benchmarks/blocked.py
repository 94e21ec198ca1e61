"""The blocked products of hmm_nmt.hmm.blocked against the unblocked layers, in one invocation, one thread.

For each source length L of ``--lengths``, a batch that fills ``--max-tokens`` (B = max_tokens // L sentences of
L target and L source pieces, as the aligner's training batches are) at width ``--dim`` and ``--heads`` heads:
the first order's transitions (:func:`trilinear_log_softmax`) and Eq. 6's weighted ReLU sum
(:func:`relu_weighted_sum`), each blocked and unblocked (the ``reference_*`` expressions, the layers as they were),
forward alone (the alignment stage) and forward with backward (training), the median of ``--repeats`` timings; and
the bytes autograd keeps for the backward pass. Prints a table and writes ``--out`` as JSON.

    OMP_NUM_THREADS=1 python -m benchmarks.blocked --out results/alignment/blocked-products.json
"""
import argparse
import statistics
import sys
import time

import torch

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.blocked import (
    reference_relu_weighted_sum,
    reference_trilinear_log_softmax,
    relu_weighted_sum,
    trilinear_log_softmax,
)


def _inputs(kind: str, bsz: int, length: int, dim: int, heads: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if kind == "first order":
        base = torch.randn(bsz, length, length, generator=g)
        jump = torch.randn(bsz, length, length, generator=g)
        jump[0, :, -3:] = direct.MASKED  # a sentence with padding, as in every length-sorted batch
        q, p, r = (torch.randn(bsz, length, dim, generator=g) / dim ** 0.25 for _ in range(3))
        return [base, jump, q, p, r]
    alpha = torch.softmax(torch.randn(bsz, heads, length, length, generator=g), -1)
    v = torch.randn(bsz, heads, length, dim // heads, generator=g)
    t = torch.randn(length, bsz, heads, dim // heads, generator=g)
    return [alpha, v, t]


FUNCTIONS = {"first order": (trilinear_log_softmax, reference_trilinear_log_softmax),
             "eq6": (relu_weighted_sum, reference_relu_weighted_sum)}


def _time(fn, inputs, backward: bool, repeats: int) -> float:
    grad = None
    times = []
    for k in range(repeats + 2):  # two untimed runs first
        xs = [x.detach().requires_grad_(backward) for x in inputs]
        t0 = time.perf_counter()
        if backward:
            out = fn(*xs)
            if grad is None:
                grad = torch.randn_like(out)
            out.backward(grad)
        else:
            with torch.no_grad():
                fn(*xs)
        if k >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _kept_bytes(fn, inputs) -> int:
    """Bytes of the tensors autograd saves for the backward pass (the inputs themselves not counted)."""
    xs = [x.detach().requires_grad_() for x in inputs]
    own = {x.data_ptr() for x in xs}
    kept = {}

    def pack(t):
        if t.data_ptr() not in own:
            kept[t.data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*xs)
    return sum(kept.values())


def measure(lengths, max_tokens: int, dim: int, heads: int, repeats: int):
    rows = []
    for kind, (blocked, plain) in FUNCTIONS.items():
        for length in lengths:
            bsz = max(1, max_tokens // length)
            inputs = _inputs(kind, bsz, length, dim, heads)
            row = {"layer": kind, "batch": bsz, "length": length}
            for name, fn in (("blocked", blocked), ("unblocked", plain)):
                row[f"{name}_forward_ms"] = 1e3 * _time(fn, inputs, False, repeats)
                row[f"{name}_train_ms"] = 1e3 * _time(fn, inputs, True, repeats)
                row[f"{name}_kept_mb"] = _kept_bytes(fn, inputs) / 2 ** 20
            rows.append(row)
    return rows


def table(doc) -> str:
    """The figures as a Markdown table and its provenance line (scripts/alignment_tables.py renders it in docs)."""
    out = ["| layer | B x L | forward ms, unblocked | blocked | speed-up | forward + backward ms, unblocked | blocked | "
           "speed-up | kept for backward MB, unblocked | blocked |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["rows"]:
        out.append(f"| {r['layer']} | {r['batch']} x {r['length']} | {r['unblocked_forward_ms']:.1f} | "
                   f"{r['blocked_forward_ms']:.1f} | {r['unblocked_forward_ms'] / r['blocked_forward_ms']:.2f}x | "
                   f"{r['unblocked_train_ms']:.1f} | {r['blocked_train_ms']:.1f} | "
                   f"{r['unblocked_train_ms'] / r['blocked_train_ms']:.2f}x | {r['unblocked_kept_mb']:.1f} | "
                   f"{r['blocked_kept_mb']:.1f} |")
    out += ["", f"d = {doc['dim']}, {doc['heads']} heads, batches of {doc['max_tokens']} tokens (B sentences of L "
                f"pieces a side), median of {doc['repeats']}; {doc['cpu']['cpu']}, torch {doc['torch']}, 1 thread, "
                f"float32; {doc['date']}. Command: `{doc['command']}`."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.blocked", description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64], help="pieces per sentence, both sides")
    p.add_argument("--max-tokens", type=int, default=2048, help="tokens per batch (B = max_tokens // length)")
    p.add_argument("--dim", type=int, default=128, help="the alignment model's and Eq. 6's width")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", help="write the figures as JSON here")
    a = p.parse_args(argv)
    if min(a.lengths) < 1 or a.max_tokens < 1 or a.repeats < 1 or a.dim % a.heads:
        p.error("--lengths, --max-tokens and --repeats must be positive, and --heads must divide --dim")
    from benchmarks.align_flops import _torch_version, cpu_info
    from benchmarks.common import publish, stamped

    torch.set_num_threads(1)
    doc = {"kind": "blocked-products", "cpu": cpu_info(), "torch": _torch_version(), "torch_threads": 1, "dim": a.dim, "heads": a.heads,
           "max_tokens": a.max_tokens, "repeats": a.repeats,
           "rows": measure(a.lengths, a.max_tokens, a.dim, a.heads, a.repeats)}
    publish(stamped(doc, "python -m benchmarks.blocked", argv), table, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
