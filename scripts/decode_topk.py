#!/usr/bin/env python3
"""BLEU/TER/chrF and decoding speed of one ``transformer_dhmm`` checkpoint at several decode-time K.

    python scripts/decode_topk.py --data runs/multi30k/data --checkpoint CKPT --subset valid --k 0 1 2 4

``--lexicon-topk`` at decoding time need not be the training K (``--model-overrides "{'lexicon_topk': K}"``,
0 = the exact mixture): a smaller K scores fewer lexicon rows per beam step. Each K runs fairseq-generate
(beam search, the same flags as scripts/benchmark_translation.py) on ``--subset`` of a data directory made
by examples/multi30k/prepare.sh and is scored with sacrebleu (``-tok none -lc``); choose K on the dev set
(``valid``), then report the test set. Writes a Markdown table and a JSON file with ``--out``. The work is ``benchmarks/topk.py``'s.
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]

from benchmarks.common import atomic_write, read_json, read_lines  # noqa: E402
from benchmarks.topk import decode_sweep, decode_table  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="directory made by examples/multi30k/prepare.sh")
    ap.add_argument("--checkpoint", required=True, help="transformer_dhmm checkpoint")
    ap.add_argument("--k", type=int, nargs="+", default=[0, 1, 2, 4], help="decode-time K values (0: exact)")
    ap.add_argument("--subset", default="valid", choices=["valid", "test"])
    ap.add_argument("--direction", default="de-en")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--generate-args", default="--max-len-a 1.5 --max-len-b 10",
                    help="extra fairseq-generate arguments (default: those of examples/multi30k/topk_sweep.sh)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpu", action="store_true", help="pass --cpu to fairseq-generate")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", help="write OUT.md and OUT.json")
    opts = ap.parse_args(argv)
    prep_path = os.path.join(opts.data, "prepare.json")
    if not os.path.isfile(prep_path):
        ap.error(f"--data {opts.data}: no prepare.json (run examples/multi30k/prepare.sh)")
    if not os.path.isfile(opts.checkpoint):
        ap.error(f"--checkpoint {opts.checkpoint}: no such file")
    if any(k < 0 for k in opts.k):
        ap.error("--k values must be >= 0 (0: exact)")
    opts.prep = read_json(prep_path)
    if opts.direction not in opts.prep["directions"]:
        ap.error(f"--direction {opts.direction}: not in {prep_path} ({', '.join(opts.prep['directions'])})")
    refs = read_lines(os.path.join(opts.data, opts.prep["references"][opts.subset][opts.direction.split("-")[1]]))
    with tempfile.TemporaryDirectory() as tmp:
        rows = decode_sweep(opts, refs, tmp)
    table = decode_table(opts, rows, len(refs))
    sys.stdout.write(table)
    if opts.out:
        atomic_write(opts.out + ".md", table)
        atomic_write(opts.out + ".json", json.dumps({"checkpoint": opts.checkpoint, "subset": opts.subset,
                                                     "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
