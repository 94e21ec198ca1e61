#!/usr/bin/env python3
"""Choose fairseq-generate's ``--lenpen`` (and ``--eos-penalty``) on the dev set, one beam search per EOS penalty.

    python scripts/tune_lenpen.py --data runs/multi30k/data --checkpoint CKPT --lenpen 0.6 0.8 1.0 1.2 1.4
    python scripts/tune_lenpen.py ... --eos-penalty 0 0.5 1 --lenpen 0.6 1.0 1.4   # a joint grid

fairseq's beam search ranks finished hypotheses by score / length^lenpen, but which hypotheses finish does not
depend on lenpen: candidates are expanded by their raw log-probability, and a sentence stops after ``--beam``
hypotheses have ended. So one decode with ``--nbest`` = beam, re-ranked offline, gives for every lenpen exactly
the output of decoding with that lenpen (tested against fairseq-generate). Each lenpen is scored with sacrebleu
(``-tok none -lc``, as scripts/benchmark_translation.py does); the best by ``--metric`` on ``--subset`` (dev by
default) is printed last. ``--out`` writes OUT.md and OUT.json. The work is ``benchmarks/tuning.py``'s.

Lenpen cannot lengthen the output of a model that ends too early: it only re-orders the finished hypotheses.
``--eos-penalty`` values (``--task translation_eos_penalty``, hmm_nmt/tasks/translation_eos_penalty.py) change
the search itself, so each costs one decode; the lenpen grid is re-ranked within each, and the best pair wins
(ties: the smallest |penalty|, then the lenpen nearest 1.0).

``--confirm-halves``: a choice that transfers.  The candidate is the best pair by BLEU on the even lines
(0, 2, 4, ...) of the subset; it is kept only if on the odd lines its BLEU is higher than the stock search's
(lenpen 1.0, EOS penalty 0, added to the grid when missing) and its TER not worse; otherwise the stock search
is printed.  The same searches serve both halves.
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]

from benchmarks.common import atomic_write, read_json  # noqa: E402
from benchmarks.tuning import chosen_row, markdown_table, tune, tune_halves  # noqa: E402


def get_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="directory made by examples/multi30k/prepare.sh")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--lenpen", type=float, nargs="+", default=[0.6, 0.8, 1.0, 1.2, 1.4, 1.6])
    ap.add_argument("--eos-penalty", type=float, nargs="+", default=[0.0],
                    help="EOS penalties to try (one decode each; --task translation_eos_penalty); default: 0 only")
    ap.add_argument("--metric", choices=["bleu", "ter", "chrf"], default="bleu", help="what the choice maximises "
                    "(TER: minimises)")
    ap.add_argument("--subset", default="valid", choices=["valid", "test"], help="tune on dev (valid), not test")
    ap.add_argument("--direction", default="de-en")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--generate-args", default="--max-len-a 1.5 --max-len-b 10",
                    help="extra fairseq-generate arguments (default: those of examples/multi30k/run.sh)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--confirm-halves", action="store_true",
                    help="choose by BLEU on the even lines of --subset and keep the choice only if, on the odd lines, "
                         "its BLEU is higher than the stock search's (lenpen 1, no EOS penalty) and its TER not "
                         "worse; otherwise the stock search (benchmarks/tuning.py)")
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    return ap


def check(ap, opts):
    prep_path = os.path.join(opts.data, "prepare.json")
    if not os.path.isfile(prep_path):
        ap.error(f"--data {opts.data}: no prepare.json (run examples/multi30k/prepare.sh)")
    if not os.path.isfile(opts.checkpoint):
        ap.error(f"--checkpoint {opts.checkpoint}: no such file")
    if opts.beam < 1 or any(not math.isfinite(x) for x in opts.lenpen + opts.eos_penalty):
        ap.error("--beam must be >= 1 and --lenpen / --eos-penalty values finite")
    opts.prep = read_json(prep_path)
    if opts.direction not in opts.prep["directions"]:
        ap.error(f"--direction {opts.direction}: not in {prep_path} ({', '.join(opts.prep['directions'])})")


def main(argv=None):
    ap = get_parser()
    opts = ap.parse_args(argv)
    check(ap, opts)
    joint = opts.eos_penalty != [0.0]
    print(f"tune_lenpen.py: {len(opts.eos_penalty)} beam search(es) (beam {opts.beam}, {opts.beam}-best) of "
          f"{opts.subset}", file=sys.stderr, flush=True)
    decision = None
    if opts.confirm_halves:
        rows, decision, n = tune_halves(opts)
        chosen = chosen_row(rows)["lenpen"]
    else:
        rows, chosen, n = tune(opts)
    best = chosen_row(rows)
    table = markdown_table(opts, rows, n, joint, decision)
    sys.stdout.write(table)
    print((f"eos-penalty {best['eos_penalty']:g} " if joint else "") + f"lenpen {chosen:g}")
    if opts.out:
        atomic_write(opts.out + ".md", table)
        atomic_write(opts.out + ".json", json.dumps({"checkpoint": opts.checkpoint, "subset": opts.subset,
                                                     "metric": "bleu" if decision else opts.metric, "rows": rows,
                                                     "lenpen": chosen, "eos_penalty": best["eos_penalty"],
                                                     "decision": decision},
                                                    indent=1))


if __name__ == "__main__":
    main()
