#!/usr/bin/env python3
"""Choose fairseq-generate's ``--lenpen`` (and ``--eos-penalty``) on the dev set, one beam search per EOS penalty.

    python scripts/tune_lenpen.py --data runs/multi30k/data --checkpoint CKPT --lenpen 0.6 0.8 1.0 1.2 1.4
    python scripts/tune_lenpen.py ... --eos-penalty 0 0.5 1 --lenpen 0.6 1.0 1.4   # a joint grid

fairseq's beam search ranks finished hypotheses by score / length^lenpen, but which hypotheses finish does not
depend on lenpen: candidates are expanded by their raw log-probability, and a sentence stops after ``--beam``
hypotheses have ended. So one decode with ``--nbest`` = beam, re-ranked offline, gives for every lenpen exactly
the output of decoding with that lenpen (tested against fairseq-generate). Each lenpen is scored with sacrebleu
(``-tok none -lc``, as scripts/benchmark_translation.py does); the best by ``--metric`` on ``--subset`` (dev by
default) is printed last. ``--out`` writes OUT.md and OUT.json.

Lenpen cannot lengthen the output of a model that ends too early: it only re-orders the finished hypotheses.
``--eos-penalty`` values (``--task translation_eos_penalty``, hmm_nmt/tasks/translation_eos_penalty.py) change
the search itself, so each costs one decode; the lenpen grid is re-ranked within each, and the best pair wins
(ties: the smallest |penalty|, then the lenpen nearest 1.0).
"""
import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchmark_translation import USER_DIR, atomic_write, read_json, read_lines, score, task_args  # noqa: E402

H_RE = re.compile(r"^H-(\d+)\t(\S+)\t?(.*)$")
P_RE = re.compile(r"^P-(\d+)\t(.*)$")


def parse_nbest(path, n_expected):
    """fairseq-generate's H-/P- lines -> per sentence a list of (text, normalised score, length incl. EOS)."""
    nbest, pending = {}, {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = H_RE.match(line)
            if m:
                pending[int(m.group(1))] = (m.group(3), float(m.group(2)))
                continue
            m = P_RE.match(line)
            if m:
                i = int(m.group(1))
                text, sc = pending.pop(i)
                nbest.setdefault(i, []).append((text, sc, len(m.group(2).split())))
    missing = [i for i in range(n_expected) if i not in nbest]
    if missing or len(nbest) != n_expected:
        raise SystemExit(f"tune_lenpen.py: {path}: expected n-best lists for sentences 0..{n_expected - 1}, "
                         f"missing {missing[:10]} ({len(missing)} in all)")
    return [nbest[i] for i in range(n_expected)]


def rerank(nbest, lenpen_used, lenpen):
    """The 1-best of every sentence under ``lenpen``: fairseq's score = raw / length^lenpen."""
    out = []
    for hyps in nbest:
        best = max(hyps, key=lambda h: h[1] * h[2] ** lenpen_used / h[2] ** lenpen)
        out.append(best[0])
    return out


def decode_nbest(opts, tmp, eos_penalty=0.0):
    src, tgt = opts.direction.split("-")
    cmd = [opts.python, "-m", "fairseq_cli.generate", os.path.join(opts.data, opts.prep["directions"][opts.direction]),
           "--user-dir", USER_DIR, *task_args(eos_penalty), "--source-lang", src, "--target-lang", tgt,
           "--path", opts.checkpoint, "--gen-subset", opts.subset, "--beam", str(opts.beam),
           "--nbest", str(opts.beam), "--lenpen", "1.0",
           "--batch-size", str(opts.batch_size), "--required-batch-size-multiple", "1",
           "--remove-bpe", opts.prep["remove_bpe"], "--num-workers", "0", "--seed", "1"] \
        + shlex.split(opts.generate_args)
    env = dict(os.environ, OMP_NUM_THREADS=str(opts.threads), MKL_NUM_THREADS=str(opts.threads))
    out, log = os.path.join(tmp, f"nbest{eos_penalty!r}.out"), os.path.join(tmp, f"nbest{eos_penalty!r}.log")
    with open(out, "w") as fo, open(log, "w") as fl:
        proc = subprocess.run(cmd, stdout=fo, stderr=fl, env=env)
    if proc.returncode != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-15:])
        raise SystemExit(f"tune_lenpen.py: fairseq-generate failed (exit {proc.returncode}):\n{tail}")
    return out


def tune(opts):
    """Rows (EOS penalty, lenpen, BLEU, TER, chrF, length ratio), the chosen lenpen and the number of sentences;
    the chosen EOS penalty is ``chosen_row(rows)``'s (always 0 without ``opts.eos_penalty``)."""
    refs = read_lines(os.path.join(opts.data, opts.prep["references"][opts.subset][opts.direction.split("-")[1]]))
    rows = []
    for eos_penalty in getattr(opts, "eos_penalty", None) or [0.0]:
        with tempfile.TemporaryDirectory() as tmp:
            nbest = parse_nbest(decode_nbest(opts, tmp, eos_penalty), len(refs))
        for lp in opts.lenpen:
            res = score(rerank(nbest, 1.0, lp), refs)
            rows.append({"eos_penalty": eos_penalty, "lenpen": lp,
                         **{m: res[m] for m in ("bleu", "ter", "chrf", "length_ratio")}})
    sign = -1.0 if opts.metric == "ter" else 1.0
    # ties go to stock settings: no EOS penalty, then the lenpen nearest fairseq's default 1.0
    best = max(rows, key=lambda r: (round(sign * r[opts.metric], 6), -abs(r["eos_penalty"]),
                                    -abs(r["lenpen"] - 1.0)))
    best["chosen"] = True
    return rows, best["lenpen"], len(refs)


def chosen_row(rows):
    return next(r for r in rows if r.get("chosen"))


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
    rows, chosen, n = tune(opts)
    best = chosen_row(rows)
    head = "| eos penalty | lenpen | BLEU | TER | chrF | len ratio |" if joint else \
        "| lenpen | BLEU | TER | chrF | len ratio |"
    lines = [f"checkpoint `{opts.checkpoint}`, {opts.subset} ({n} sentences), beam {opts.beam}; chosen by "
             f"{opts.metric}", "", head, "|---:" * head.count("|", 1) + "|"]
    for r in rows:
        mark = " **(chosen)**" if r is best else ""
        pen = f"{r['eos_penalty']:g} | " if joint else ""
        lines.append(f"| {pen}{r['lenpen']:g}{mark} | {r['bleu']:.2f} | {r['ter']:.2f} | {r['chrf']:.2f} | "
                     f"{r['length_ratio']:.3f} |")
    table = "\n".join(lines) + "\n"
    sys.stdout.write(table)
    print((f"eos-penalty {best['eos_penalty']:g} " if joint else "") + f"lenpen {chosen:g}")
    if opts.out:
        atomic_write(opts.out + ".md", table)
        atomic_write(opts.out + ".json", json.dumps({"checkpoint": opts.checkpoint, "subset": opts.subset,
                                                     "metric": opts.metric, "rows": rows, "lenpen": chosen,
                                                     "eos_penalty": best["eos_penalty"]},
                                                    indent=1))


if __name__ == "__main__":
    main()
