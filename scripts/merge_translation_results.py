#!/usr/bin/env python
"""Join ``results.json`` reports of ``scripts/benchmark_translation.py`` into one, without retraining or decoding.

    python scripts/merge_translation_results.py --out runs/joint \\
        runs/a/results.json runs/b/results.json \\
        runs/c/results.json

Models trained as separate jobs (one per GPU or core, or one added later to a finished comparison) share a
table only through this: it checks that the reports used the same data and protocol (sizes, optimiser, seed,
stopping rule and bound, decoding and length choice; ``benchmarks/merge.py``; ``--per-row-bounds`` admits a
model that needed a larger bound and names it), refuses a model present twice,
and recomputes each model's time to the transformer's best dev score against the transformer of the same
seed.  One seed: ``OUT/results.{json,md}`` and plots.  Several: ``OUT/seed-S/results.*`` per seed and
``OUT/summary.{json,md}`` (mean ± sd over seeds), as ``--seeds`` writes them.  Nothing is written unless every
input is valid.
"""
import argparse
import json
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]

from benchmarks import report  # noqa: E402
from benchmarks import seeds as seed_stats  # noqa: E402
from benchmarks.common import BenchmarkError  # noqa: E402
from benchmarks.merge import merge_all  # noqa: E402


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise BenchmarkError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise BenchmarkError(f"{path}: not JSON (line {e.lineno}: {e.msg})") from None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("results", nargs="+", help="results.json files of scripts/benchmark_translation.py")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--per-row-bounds", action="store_true",
                   help="admit a row trained under a larger --max-update than the others that would have trained "
                        "differently under the smallest one (stopped past it): it keeps its own bound, which the "
                        "table's budget names (default: refused)")
    args = p.parse_args(argv)
    out = os.path.abspath(args.out)
    try:
        for path in args.results:
            if os.path.dirname(os.path.abspath(path)) == out or \
                    os.path.dirname(os.path.dirname(os.path.abspath(path))) == out:
                raise BenchmarkError(f"{path}: lies in --out {args.out}, which the merge would overwrite")
        command = shlex.join([sys.executable] + sys.argv)
        merged = merge_all([(path, load(path)) for path in args.results], command, args.per_row_bounds)
    except BenchmarkError as e:
        print(f"merge_translation_results.py: error: {e}", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    if len(merged) == 1:
        (doc,) = merged.values()
        report.write_outputs(doc, out, plots=not args.no_plots)
        print(f"merge_translation_results.py: {os.path.join(out, 'results.md')}")
        return 0
    for seed, doc in merged.items():
        d = os.path.join(out, f"seed-{seed}")
        os.makedirs(d, exist_ok=True)
        report.write_outputs(doc, d, plots=not args.no_plots)
    seed_stats.write_summary(out, merged, f"`{command}`")
    print(f"merge_translation_results.py: seeds {','.join(map(str, merged))}: {os.path.join(out, 'summary.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
