"""Choose fairseq-generate's ``--lenpen`` (and ``--eos-penalty``) on the dev set, one beam search per EOS penalty.

fairseq's beam search ranks finished hypotheses by score / length^lenpen, but which hypotheses finish does not
depend on lenpen: candidates are expanded by their raw log-probability, and a sentence stops after ``--beam``
hypotheses have ended. So one decode with ``--nbest`` = beam, re-ranked offline, gives for every lenpen exactly
the output of decoding with that lenpen (tested against fairseq-generate). Each lenpen is scored with sacrebleu
(``-tok none -lc``); the best by the metric wins. ``--eos-penalty`` values (``--task translation_eos_penalty``)
change the search itself, so each costs one decode; the lenpen grid is re-ranked within each, and the best pair
wins (ties: the smallest |penalty|, then the lenpen nearest 1.0).

:func:`tune` is ``scripts/tune_lenpen.py``'s work; :func:`choose_for_benchmark` the translation benchmark's
``--tune-lenpen`` / ``--tune-eos-penalty`` stage (cached in the job directory).
"""
import argparse
import os
import shlex
import subprocess
import tempfile

from benchmarks.common import USER_DIR, read_json, read_lines, write_json
from benchmarks.fairseq_runner import task_args
from benchmarks.logs import parse_nbest
from benchmarks.progress import say
from benchmarks.scoring import score

__all__ = ["parse_nbest", "rerank", "decode_nbest", "tune", "chosen_row", "markdown_table", "choose_for_benchmark"]


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


def markdown_table(opts, rows, n, joint):
    """The table ``scripts/tune_lenpen.py`` prints: one row per (EOS penalty,) lenpen, the chosen one marked."""
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
    return "\n".join(lines) + "\n"


def choose_for_benchmark(bench, direction, slot, ckpt, pos):
    """``--tune-lenpen`` / ``--tune-eos-penalty``: the (lenpen, EOS penalty) of the best dev BLEU (one n-best
    beam search of valid per EOS penalty, re-ranked: :func:`tune`) and the dev rows; ``(--lenpen, 0, None)``
    without them.  ``bench`` is the running ``benchmarks.translation.Benchmark``."""
    a = bench.args
    if not (a.lenpen_grid or a.eos_penalty_grid):
        return a.lenpen, 0.0, None
    jdir = bench.job_dir(direction, slot)
    path = os.path.join(jdir, "lenpen.json")
    key = {"checkpoint": ckpt, "grid": a.tune_lenpen, "beam": a.beam, "generate_args": a.generate_args}
    if a.eos_penalty_grid:
        key["eos_penalty_grid"] = a.eos_penalty_grid
        if not a.lenpen_grid:
            key["lenpen"] = a.lenpen
    if os.path.exists(path) and read_json(path)["key"] == key:
        doc = read_json(path)
        return doc["lenpen"], doc.get("eos_penalty", 0.0), doc["rows"]
    eos_grid = a.eos_penalty_grid or [0.0]
    lenpens = a.lenpen_grid or [a.lenpen]
    say(f"[{pos}] {direction} {slot}: choosing lenpen {lenpens} x EOS penalty {eos_grid} on valid "
        f"({len(eos_grid)} {a.beam}-best search(es))")
    opts = argparse.Namespace(data=bench.data, prep=bench.prep, checkpoint=ckpt, subset="valid",
                              direction=direction, beam=a.beam, batch_size=a.gen_batch_size,
                              generate_args=a.generate_args, threads=a.threads or 1, python=bench.python,
                              lenpen=lenpens, eos_penalty=eos_grid, metric="bleu")
    rows, chosen, _ = tune(opts)
    eos_penalty = chosen_row(rows)["eos_penalty"]
    write_json(path, {"key": key, "lenpen": chosen, "eos_penalty": eos_penalty, "rows": rows})
    return chosen, eos_penalty, rows
