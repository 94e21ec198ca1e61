#!/usr/bin/env python
"""The alignment stage of ``hmm-nmt-align-corpus`` on a CPU: worker processes against threads of one process.

    python scripts/align_workers.py --model-dir runs/hs/hmm.1 --src runs/hs/corpus.src --tgt runs/hs/corpus.tgt \\
        --lines 50000 --work runs/align-workers --results results/alignment/hansards-enfr-align-workers.json

Aligns the first ``--lines`` pairs with a finished model directory (``--align-only -o -f -r``), once with
``--align-workers 0`` (the ``--threads`` in one process, a direction per thread) and once with the default (one
worker process of one thread per ``--threads``, each aligning a share of the pairs with both directions), in
the order given by ``--order``, and reports each run's wall clock, CPU seconds (the command and every process it
waited for), cores busy (CPU / wall) and largest resident set, the speed-up, and how many lines of each output
differ between the two runs. Shares batch other pairs together than one process's chunks do, so float32 rounds
differently: a posterior at the merge's threshold can fall either side. With ``--gold`` (its pairs the first lines
of the corpus, as in ``align_benchmark.py``) each run's merged links are scored, and the runs must agree within
0.1 AER on every part (else exit 1). Each run is timed by ``align_benchmark.Times``; a rerun with the same
``--work`` reuses the finished runs.
"""
import argparse
import filecmp
import itertools
import json
import os
import shlex
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment"), os.path.join(ROOT, "scripts")]
from align_benchmark import Gold, Times, _read_links, _tool, log  # noqa: E402
from alignment_tables import workers_table  # noqa: E402

from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402

VARIANTS = {"threads": ["--align-workers", "0"], "workers": []}
OUTPUTS = (".align", ".fwd", ".rev")
TOLERANCE = 0.1  # AER points: the runs may round differently, never align differently


def head(path: str, n: int, out: str) -> int:
    """The first ``n`` lines of ``path`` into ``out`` (kept when it is there); how many there are."""
    if not os.path.exists(out):
        with open(path, encoding="utf-8") as f, open(out + ".tmp", "w", encoding="utf-8") as g:
            for k, line in enumerate(f):
                if k >= n:
                    break
                g.write(line)
        os.replace(out + ".tmp", out)
    with open(out, encoding="utf-8") as f:
        return sum(1 for _ in f)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", required=True, help="a finished model directory of hmm-nmt-align-corpus")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--lines", type=int, default=50000, help="pairs aligned (the first of --src/--tgt)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--order", default="threads,workers", help="the runs, in this order (default threads,workers)")
    p.add_argument("--gold", help="gold links of the corpus's first lines (Pharaoh i-j, p for Possible)")
    p.add_argument("--gold-one-based", action="store_true", help="the gold counts words from 1")
    p.add_argument("--gold-reverse", action="store_true", help="the gold's links are target-source")
    p.add_argument("--dev-pairs", type=int, default=0, help="the gold's first pairs that are its dev part")
    p.add_argument("--work", required=True, help="inputs, outputs, logs and times.json of the runs")
    p.add_argument("--results", help="the results JSON (default WORK/results.json)")
    opts = p.parse_args(argv)
    order = opts.order.split(",")
    if sorted(order) != sorted(VARIANTS):
        p.error(f"--order must name each of {', '.join(VARIANTS)} once")
    if opts.threads < 2:
        p.error("--threads must be at least 2 (one thread has no workers to compare)")
    exe = _tool("hmm-nmt-align-corpus")
    if exe is None:
        raise SystemExit("align_workers: hmm-nmt-align-corpus not found (make install)")
    os.makedirs(opts.work, exist_ok=True)
    src, tgt = os.path.join(opts.work, "input.src"), os.path.join(opts.work, "input.tgt")
    pairs = head(opts.src, opts.lines, src)
    if head(opts.tgt, opts.lines, tgt) != pairs:
        raise SystemExit(f"align_workers: {opts.src} and {opts.tgt} differ in their first {opts.lines} lines' count")
    gold, n_gold = None, 0
    if opts.gold:
        with open(opts.gold, encoding="utf-8") as f:
            n_gold = sum(1 for _ in f)
        if not 0 <= opts.dev_pairs < n_gold <= pairs:
            raise SystemExit(f"align_workers: --gold has {n_gold} lines: it needs 0 <= --dev-pairs < its lines <= "
                             f"--lines ({pairs})")
        with open(src, encoding="utf-8") as f, open(tgt, encoding="utf-8") as g:
            lens = [(len(x.split()), len(y.split())) for x, y in itertools.islice(zip(f, g), n_gold)]
        gold = Gold(opts, [a for a, _ in lens], [b for _, b in lens])
    times = Times(os.path.join(opts.work, "times.json"))
    for name in order:
        out = os.path.join(opts.work, name)
        if os.path.exists(out + ".align") and name in times.data:
            continue
        log(f"{name}: aligning {pairs:,} pairs")
        times.run(name, [exe, "-s", src, "-t", tgt, "--model-dir", opts.model_dir, "--align-only", "-o", out + ".align",
                         "-f", out + ".fwd", "-r", out + ".rev", "--threads", str(opts.threads), "--no-progress",
                         *VARIANTS[name]], os.path.join(opts.work, f"{name}.log"))
    differ = {ext[1:]: _differing(os.path.join(opts.work, "threads" + ext), os.path.join(opts.work, "workers" + ext))
              for ext in OUTPUTS}
    runs = {name: {**{k: times.data[name][k] for k in ("wall_s", "cpu_s", "max_rss_mb", "code", "cpu")
                      if k in times.data[name]},
                   "pairs_per_s": round(pairs / times.data[name]["wall_s"], 1)} for name in order}
    ok = True
    if gold is not None:
        for name in order:
            runs[name]["scores"] = gold.score(_read_links(os.path.join(opts.work, name + ".align"), n_gold))
        gaps = [abs(runs["threads"]["scores"][part]["AER"] - runs["workers"]["scores"][part]["AER"])
                for part in runs["threads"]["scores"]]
        ok = max(gaps) <= TOLERANCE
    results = {"kind": "align-workers", "model_dir": opts.model_dir, "pairs": pairs, "threads": opts.threads,
               "order": order, "runs": runs, "lines_differing": differ, "gold": opts.gold and os.path.basename(opts.gold),
               "speedup": round(runs["threads"]["wall_s"] / runs["workers"]["wall_s"], 3),
               "hardware": times.hardware, "date": time.strftime("%Y-%m-%d"),
               "command": "python scripts/align_workers.py " + shlex.join(argv if argv is not None else sys.argv[1:])}
    path = opts.results or os.path.join(opts.work, "results.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, json.dumps(results, indent=1) + "\n")
    print(workers_table(results))
    if not ok:
        print(f"align_workers: the two runs' AER differ by more than {TOLERANCE}", file=sys.stderr)
        return 1
    return 0


def _differing(a: str, b: str) -> int:
    """Lines of ``a`` and ``b`` (as long as each other) that differ."""
    if filecmp.cmp(a, b, shallow=False):
        return 0
    with open(a, encoding="utf-8") as f, open(b, encoding="utf-8") as g:
        return sum(x != y for x, y in zip(f, g))


if __name__ == "__main__":
    sys.exit(main())
