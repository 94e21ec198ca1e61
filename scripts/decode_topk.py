#!/usr/bin/env python3
"""BLEU/TER/chrF and decoding speed of one ``transformer_dhmm`` checkpoint at several decode-time K.

    python scripts/decode_topk.py --data runs/multi30k/data --checkpoint CKPT --subset valid --k 0 1 2 4

``--lexicon-topk`` at decoding time need not be the training K (``--model-overrides "{'lexicon_topk': K}"``,
0 = the exact mixture): a smaller K scores fewer lexicon rows per beam step. Each K runs fairseq-generate
(beam search, the same flags as scripts/benchmark_translation.py) on ``--subset`` of a data directory made
by examples/multi30k/prepare.sh and is scored with sacrebleu (``-tok none -lc``); choose K on the dev set
(``valid``), then report the test set. Writes a Markdown table and a JSON file with ``--out``.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchmark_translation import (USER_DIR, atomic_write, parse_generate_output, parse_generate_speed,  # noqa: E402
                                   read_json, read_lines, score)


def decode(opts, k, tmp):
    src, tgt = opts.direction.split("-")
    cmd = [opts.python, "-m", "fairseq_cli.generate", os.path.join(opts.data, opts.prep["directions"][opts.direction]),
           "--user-dir", USER_DIR, "--task", "translation", "--source-lang", src, "--target-lang", tgt,
           "--path", opts.checkpoint, "--gen-subset", opts.subset, "--beam", str(opts.beam),
           "--batch-size", str(opts.batch_size), "--required-batch-size-multiple", "1",
           "--remove-bpe", opts.prep["remove_bpe"], "--num-workers", "0", "--seed", "1",
           "--model-overrides", repr({"lexicon_topk": k})] + shlex.split(opts.generate_args)
    if opts.cpu:
        cmd.append("--cpu")
    env = dict(os.environ, OMP_NUM_THREADS=str(opts.threads), MKL_NUM_THREADS=str(opts.threads))
    out, log = os.path.join(tmp, f"k{k}.out"), os.path.join(tmp, f"k{k}.log")
    with open(out, "w") as fo, open(log, "w") as fl:
        proc = subprocess.run(cmd, stdout=fo, stderr=fl, env=env)
    if proc.returncode != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-15:])
        raise SystemExit(f"decode_topk.py: fairseq-generate failed for K={k} (exit {proc.returncode}):\n{tail}")
    return out, log


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
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in opts.k:
            print(f"decode_topk.py: K={k} on {opts.subset} ({len(refs)} sentences, beam {opts.beam})",
                  file=sys.stderr, flush=True)
            out, log = decode(opts, k, tmp)
            res = score(parse_generate_output(out, len(refs)), refs)
            rows.append({"k": k, **{m: res[m] for m in ("bleu", "ter", "chrf", "length_ratio")},
                         **parse_generate_speed(out, log)})
    lines = [f"checkpoint `{opts.checkpoint}`, {opts.subset} ({len(refs)} sentences), beam {opts.beam}, "
             f"{opts.threads} thread(s)", "",
             "| decode K | BLEU | TER | chrF | len ratio | sent/s | tok/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['k'] or 'exact'} | {r['bleu']:.2f} | {r['ter']:.2f} | {r['chrf']:.2f} | "
                     f"{r['length_ratio']:.3f} | {r['decode_sentences_per_second']:.2f} | "
                     f"{r['decode_tokens_per_second']:.1f} |")
    table = "\n".join(lines) + "\n"
    sys.stdout.write(table)
    if opts.out:
        atomic_write(opts.out + ".md", table)
        atomic_write(opts.out + ".json", json.dumps({"checkpoint": opts.checkpoint, "subset": opts.subset,
                                                     "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
