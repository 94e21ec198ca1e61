#!/usr/bin/env python
"""Peak memory of ``hmm-nmt-align-corpus`` against the corpus size: the same text repeated to N pairs, the
command run end to end on each, its process tree's resident memory sampled from ``/proc`` (Linux).

    python scripts/corpus_memory.py --src train.en --tgt train.fr --pairs 300000 3000000 --work runs/mem \\
        --results results/alignment/corpus-memory.json [-- hmm-nmt-align-corpus options]

For each N, ``WORK/N.{src,tgt}`` are the input lines cycled to N pairs; the command runs with ``--model-dir
WORK/N.model -o WORK/N.align`` and the options after ``--`` (a small model and few updates keep a run of millions
of pairs short: the memory that grows with the corpus is in reading, segmenting, binarizing and aligning, which
do not depend on the model's size). Every ``--interval`` seconds the sampler reads the resident set of the
command (the driver: reading, BPE, segmenting, the first-pass links and the alignment run in it) and of each of
its descendants (fairseq-preprocess, the trainers). Each stage is known from the command's log lines. Reported
per N and stage: the driver's peak, the largest single descendant's and the tree's summed peak, in MB. A rerun
skips the N whose results are there.
"""
import argparse
import itertools
import json
import os
import shlex
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment"), os.path.join(ROOT, "scripts")]
from align_benchmark import BIN, hardware, log  # noqa: E402
from alignment_tables import memory_table  # noqa: E402

from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2 ** 20
# the beginnings of the command's log lines (hmm_nmt_align.corpus) that open each stage
STAGES = (("segmenting and binarizing", "prepare"), ("training the first-order", "train"), ("aligning the", "links"),
          ("training on toward", "guide"), ("aligning ", "align"))


def repeat(src: str, tgt: str, pairs: int, prefix: str) -> None:
    """``prefix.src``/``prefix.tgt``: the lines of ``src``/``tgt`` cycled to ``pairs`` lines, streamed."""
    if os.path.exists(prefix + ".tgt"):
        return
    for path, out in ((src, prefix + ".src"), (tgt, prefix + ".tgt")):
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            lines = itertools.cycle(_read(path))
            for _ in range(pairs):
                f.write(next(lines))
        os.replace(out + ".tmp", out)


def _read(path):
    while True:
        with open(path, encoding="utf-8") as f:
            yield from f


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):  # gone between the listing and the read
        return 0.0


def descendants(pid: int):
    """The pids below ``pid`` in the process tree, from /proc/*/stat."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


def measure(cmd, log_path: str, interval: float):
    """Run ``cmd``; returns (exit status, wall seconds, {stage: {driver, child, tree}} peaks in MB)."""
    stage = ["read"]  # before the first stage: reading and checking the input

    def follow(stream, out):
        for line in stream:
            out.write(line)
            out.flush()
            message = line.partition(": ")[2]
            stage[0] = next((name for start, name in STAGES if message.startswith(start)), stage[0])

    peaks = {}
    start = time.time()
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        reader = threading.Thread(target=follow, args=(proc.stderr, out), daemon=True)
        reader.start()
        while proc.poll() is None:
            driver = _rss_mb(proc.pid)
            kids = [_rss_mb(p) for p in descendants(proc.pid)]
            p = peaks.setdefault(stage[0], {"driver": 0.0, "child": 0.0, "tree": 0.0})
            p["driver"] = max(p["driver"], driver)
            p["child"] = max(p["child"], max(kids, default=0.0))
            p["tree"] = max(p["tree"], driver + sum(kids))
            time.sleep(interval)
        reader.join()
    wall = time.time() - start
    return proc.returncode, wall, {k: {m: round(v, 1) for m, v in p.items()} for k, p in peaks.items()}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--pairs", type=int, nargs="+", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    p.add_argument("--command", default=os.path.join(BIN, "hmm-nmt-align-corpus"), help=argparse.SUPPRESS)
    opts = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    os.makedirs(opts.work, exist_ok=True)
    results = {"name": "corpus-memory", "command": "python scripts/corpus_memory.py " + shlex.join(argv),
               "hardware": hardware(), "date": time.strftime("%Y-%m-%d"),
               "data": f"{os.path.basename(opts.src)}, {os.path.basename(opts.tgt)} cycled to each size",
               "options": extra, "runs": []}
    if os.path.exists(opts.results):
        with open(opts.results, encoding="utf-8") as f:
            old = json.load(f)
        if old.get("options") == extra:
            results["runs"] = [r for r in old["runs"] if r["pairs"] in opts.pairs]
    for n in opts.pairs:
        if any(r["pairs"] == n for r in results["runs"]):
            continue
        prefix = os.path.join(opts.work, str(n))
        repeat(opts.src, opts.tgt, n, prefix)
        cmd = [opts.command, "-s", prefix + ".src", "-t", prefix + ".tgt", "--model-dir", prefix + ".model", "-o",
               prefix + ".align", "--no-progress", *extra]
        log(f"{n} pairs: {shlex.join(cmd)}")
        code, wall, peaks = measure(cmd, prefix + ".log", opts.interval)
        if code:
            raise SystemExit(f"corpus_memory: the command failed on {n} pairs (exit {code}; log: {prefix}.log)")
        results["runs"].append({"pairs": n, "wall_s": round(wall, 1), "peaks": peaks,
                                "max": {m: max(p[m] for p in peaks.values()) for m in ("driver", "child", "tree")}})
        results["runs"].sort(key=lambda r: r["pairs"])
        atomic_write(opts.results, json.dumps(results, indent=1) + "\n")
    print(memory_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
