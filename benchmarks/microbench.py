"""Shared by the micro-benchmarks ``scripts/bench_train.py`` and ``scripts/bench_decode.py``: model specs,
the embedded toy corpus, and one spawned child process per model (so that peak memory is per model)."""
import multiprocessing as mp
import os
import subprocess
import sys

from benchmarks.common import REPO as ROOT

BASE_ARCH = {"transformer": ("transformer", "label_smoothed_cross_entropy", []),
             # the softmax lexicon, named (the default is separable): dhmm0:--lexicon=separable for the other
             "dhmm0": ("transformer_dhmm", "dhmm_label_smoothed_cross_entropy",
                       ["--alignment-order", "0", "--lexicon", "softmax"]),
             "dhmm1": ("transformer_dhmm", "dhmm_label_smoothed_cross_entropy",
                       ["--alignment-order", "1", "--lexicon", "softmax"]),
             # chain decoders (docs/translation.md): over a transformer decoder, and chain-only
             "hnmc": ("transformer_hnmc", "label_smoothed_cross_entropy", ["--hnmc-decoder", "transformer"]),
             "iohmm": ("transformer_iohmm", "label_smoothed_cross_entropy", ["--iohmm-decoder", "transformer"]),
             "hnmc_chain": ("transformer_hnmc", "label_smoothed_cross_entropy", ["--hnmc-decoder", "chain"]),
             "iohmm_chain": ("transformer_iohmm", "label_smoothed_cross_entropy", ["--iohmm-decoder", "chain"])}


TOPK_SWEEP = (["transformer"] + [f"dhmm{o}" + (f":--lexicon-topk={k}" if k else "") for o in (0, 1)
                                  for k in (0, 1, 2, 4, 8)] + ["dhmm0:--lexicon-topk=4,--lexicon-dtype=bf16"])


def expand_models(specs):
    """``topk`` -> :data:`TOPK_SWEEP`; other specs unchanged (and checked)."""
    out = [m for s in specs for m in (TOPK_SWEEP if s == "topk" else [s])]
    for spec in out:
        model_flags(spec)
    return out


def model_flags(spec):
    name, _, extra = spec.partition(":")
    if name not in BASE_ARCH:
        raise SystemExit(f"bench_train.py: unknown model '{name}' in --models (choose from {', '.join(BASE_ARCH)})")
    arch, criterion, flags = BASE_ARCH[name]
    extra_flags = [f for e in extra.split(",") if e for f in e.split("=", 1)]
    return arch, criterion, flags + extra_flags


def toy_data_bin(workdir):
    """Generate and binarise the embedded toy corpus (examples/toy) into ``workdir``."""
    raw, out = os.path.join(workdir, "raw"), os.path.join(workdir, "bin")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", raw], check=True)
    subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--destdir", out,
                    "--joined-dictionary", "--workers", "1"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return out


def run_children(prog, specs, target, opts, describe):
    """Run ``target(spec, opts, queue)`` for each spec in its own spawned child, one after the other.

    A fresh process per model makes peak memory (RSS) per model and keeps one model's allocator and
    thread state from colouring the next one's timing. Returns the dicts the children put on the queue.
    """
    ctx = mp.get_context("spawn")
    results = []
    for spec in specs:
        queue = ctx.Queue()
        proc = ctx.Process(target=target, args=(spec, opts, queue))
        proc.start()
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"{prog}: {spec} failed (exit code {proc.exitcode})")
        results.append(queue.get())
        print(f"{spec:<40} {describe(results[-1])}", file=sys.stderr, flush=True)
    return results
