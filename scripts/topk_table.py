#!/usr/bin/env python3
"""Table of a ``--lexicon-topk`` sweep (examples/multi30k/topk_sweep.sh): one row per configuration.

    python scripts/topk_table.py OUT CONFIG [CONFIG ...]

reads ``OUT/CONFIG/results.json`` (scripts/benchmark_translation.py), prints a Markdown table with BLEU, TER,
chrF, training tokens/s, decoding sentences/s and the ratios of both speeds against the transformer
reference (the first configuration when the sweep has none), and writes ``OUT/topk.md`` and ``OUT/topk.json``.
A configuration without a complete result is listed as missing and makes the exit status 1.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]
from benchmarks.topk import load_result, sweep_table  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: topk_table.py OUT CONFIG [CONFIG ...]")
    out, names = argv[0], argv[1:]
    rows, missing = [], []
    for name in names:
        row = load_result(out, name)
        (rows.append(row) if row else missing.append(name))
    table = sweep_table(out, rows, missing)
    sys.stdout.write(table)
    atomic_write(os.path.join(out, "topk.md"), table)
    atomic_write(os.path.join(out, "topk.json"), json.dumps({"rows": rows, "missing": missing}, indent=1))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
