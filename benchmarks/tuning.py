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

**Choices that transfer** (``halves``: ``tune_lenpen.py --confirm-halves``, the benchmark's ``--length-choice
halves``, the default of ``examples/multi30k/run.sh``).  A choice made on the whole dev set can fit dev and lose
on unseen data (issue 26: on held-out Flickr sets the dev-chosen pair lowered BLEU and raised TER).  So the dev
set is split deterministically by line: the *choose* half is the even lines (0, 2, 4, ... counted from 0), the
*confirm* half the odd lines.  The grid's best pair by BLEU on the choose half (ties as above) is the candidate;
the stock search S = (EOS penalty 0, lenpen 1.0), added to the grid when missing, is the reference.  The
candidate C is **adopted** only if C differs from S and, on the confirm half (corpus-level sacrebleu over the
odd lines), BLEU(C) > BLEU(S) strictly and TER(C) <= TER(S); otherwise the stock search is kept
(:func:`decide`).  The same beam searches serve both halves: nothing is decoded twice.
"""
import argparse
import os
import shlex
import tempfile

from benchmarks.common import USER_DIR, read_json, read_lines, write_json
from benchmarks.fairseq_runner import generate_to_file, task_args
from benchmarks.logs import parse_nbest
from benchmarks.progress import say
from benchmarks.scoring import score

__all__ = ["parse_nbest", "rerank", "decode_nbest", "tune", "chosen_row", "markdown_table", "choose_for_benchmark",
           "split_halves", "tune_halves", "decide", "decision_text", "STOCK"]

STOCK = (0.0, 1.0)  # (EOS penalty, lenpen) of fairseq's stock search
METRICS = ("bleu", "ter", "chrf", "length_ratio")


def split_halves(items):
    """(choose half, confirm half): the even and the odd lines (0-based), in order."""
    return items[0::2], items[1::2]


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
    out, log = os.path.join(tmp, f"nbest{eos_penalty!r}.out"), os.path.join(tmp, f"nbest{eos_penalty!r}.log")
    generate_to_file(cmd, out, log, opts.threads, "tune_lenpen.py: fairseq-generate failed")
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


def tune_halves(opts):
    """The grid scored on both halves of the dev set (module docstring): (rows, decision, number of sentences).

    Each row has the pair, ``choose`` / ``confirm`` (scores on each half) and the scores on the whole set; the
    stock pair is always in the grid.  ``decision`` is :func:`decide`'s."""
    refs = read_lines(os.path.join(opts.data, opts.prep["references"][opts.subset][opts.direction.split("-")[1]]))
    if len(refs) < 2:
        raise SystemExit(f"tune_lenpen.py: {opts.subset} has {len(refs)} sentence(s): too few to split in halves")
    eos_grid = list(getattr(opts, "eos_penalty", None) or [0.0])
    lenpens = list(opts.lenpen)
    if STOCK[0] not in eos_grid:
        eos_grid.insert(0, STOCK[0])
    if STOCK[1] not in lenpens:
        lenpens.append(STOCK[1])
    ref_c, ref_h = split_halves(refs)
    rows = []
    for eos_penalty in eos_grid:
        with tempfile.TemporaryDirectory() as tmp:
            nbest = parse_nbest(decode_nbest(opts, tmp, eos_penalty), len(refs))
        for lp in lenpens:
            hyps = rerank(nbest, 1.0, lp)
            hyp_c, hyp_h = split_halves(hyps)
            full, c, h = score(hyps, refs), score(hyp_c, ref_c), score(hyp_h, ref_h)
            rows.append({"eos_penalty": eos_penalty, "lenpen": lp, **{m: full[m] for m in METRICS},
                         "choose": {m: c[m] for m in METRICS}, "confirm": {m: h[m] for m in METRICS}})
    return rows, decide(rows), len(refs)


def decide(rows):
    """The rule of the module docstring over rows with ``choose`` / ``confirm`` scores: marks the candidate
    (``candidate``) and the adopted row (``chosen``) and returns the decision record."""
    cand = max(rows, key=lambda r: (round(r["choose"]["bleu"], 6), -abs(r["eos_penalty"]), -abs(r["lenpen"] - 1.0)))
    stock = next(r for r in rows if (r["eos_penalty"], r["lenpen"]) == STOCK)
    is_stock = cand is stock
    better = cand["confirm"]["bleu"] > stock["confirm"]["bleu"]
    ter_ok = cand["confirm"]["ter"] <= stock["confirm"]["ter"]
    adopted = (not is_stock) and better and ter_ok
    cand["candidate"] = True
    (cand if adopted else stock)["chosen"] = True
    if is_stock:
        why = "the stock search is also the best on the choose half"
    elif adopted:
        why = "confirmed on the held-out half: higher BLEU, TER not worse"
    else:
        why = ("not confirmed on the held-out half: " + ("BLEU not higher" if not better else "")
               + (", " if not better and not ter_ok else "") + ("TER worse" if not ter_ok else ""))
    return {"rule": "choose on even dev lines by BLEU; adopt if on odd lines BLEU > stock's and TER <= stock's",
            "candidate": {"eos_penalty": cand["eos_penalty"], "lenpen": cand["lenpen"],
                          "choose": cand["choose"], "confirm": cand["confirm"]},
            "stock": {"eos_penalty": STOCK[0], "lenpen": STOCK[1], "choose": stock["choose"],
                      "confirm": stock["confirm"]},
            "adopted": adopted, "reason": why}


def decision_text(d):
    c, s = d["candidate"], d["stock"]
    return (f"candidate eos-penalty {c['eos_penalty']:g} lenpen {c['lenpen']:g} (choose half BLEU "
            f"{c['choose']['bleu']:.2f}; held-out half BLEU {c['confirm']['bleu']:.2f} TER {c['confirm']['ter']:.2f})"
            f" against stock (held-out half BLEU {s['confirm']['bleu']:.2f} TER {s['confirm']['ter']:.2f}): "
            f"{'adopted' if d['adopted'] else 'stock search kept'}, {d['reason']}")


def chosen_row(rows):
    return next(r for r in rows if r.get("chosen"))


def markdown_table(opts, rows, n, joint, decision=None):
    """The table ``scripts/tune_lenpen.py`` prints: one row per (EOS penalty,) lenpen, the chosen one marked;
    with a ``decision`` (halves) also the scores on the choose and the held-out half."""
    best = chosen_row(rows)
    halves = decision is not None
    head = ("| eos penalty | lenpen | BLEU | TER | chrF | len ratio |" if joint else
            "| lenpen | BLEU | TER | chrF | len ratio |")
    if halves:
        head += " choose-half BLEU | choose-half TER | held-out BLEU | held-out TER |"
    how = ("candidate by BLEU on the even lines, kept only if better on the odd lines "
           "(BLEU higher, TER not worse) than the stock search" if halves else f"chosen by {opts.metric}")
    lines = [f"checkpoint `{opts.checkpoint}`, {opts.subset} ({n} sentences), beam {opts.beam}; {how}", "", head,
             "|---:" * head.count("|", 1) + "|"]
    for r in rows:
        mark = " **(chosen)**" if r is best else ""
        if halves and r.get("candidate") and r is not best:
            mark = " (candidate, rejected)"
        pen = f"{r['eos_penalty']:g} | " if joint else ""
        line = (f"| {pen}{r['lenpen']:g}{mark} | {r['bleu']:.2f} | {r['ter']:.2f} | {r['chrf']:.2f} | "
                f"{r['length_ratio']:.3f} |")
        if halves:
            line += (f" {r['choose']['bleu']:.2f} | {r['choose']['ter']:.2f} | {r['confirm']['bleu']:.2f} | "
                     f"{r['confirm']['ter']:.2f} |")
        lines.append(line)
    if halves:
        lines += ["", decision_text(decision)]
    return "\n".join(lines) + "\n"


def choose_for_benchmark(bench, direction, slot, ckpt, pos):
    """``--tune-lenpen`` / ``--tune-eos-penalty``: the (lenpen, EOS penalty) of the best dev BLEU (one n-best
    beam search of valid per EOS penalty, re-ranked: :func:`tune`), the dev rows and None; with
    ``--length-choice halves`` the pair :func:`decide` keeps, the rows and the decision;
    ``(--lenpen, 0, None, None)`` without a grid.  ``bench`` is the running ``benchmarks.translation.Benchmark``."""
    a = bench.args
    if not (a.lenpen_grid or a.eos_penalty_grid):
        return a.lenpen, 0.0, None, None
    halves = getattr(a, "length_choice", "dev") == "halves"
    jdir = bench.job_dir(direction, slot)
    path = os.path.join(jdir, "lenpen.json")
    key = {"checkpoint": ckpt, "grid": a.tune_lenpen, "beam": a.beam, "generate_args": a.generate_args}
    if halves:
        key["length_choice"] = "halves"
    if a.eos_penalty_grid:
        key["eos_penalty_grid"] = a.eos_penalty_grid
        if not a.lenpen_grid:
            key["lenpen"] = a.lenpen
    if os.path.exists(path) and read_json(path)["key"] == key:
        doc = read_json(path)
        return doc["lenpen"], doc.get("eos_penalty", 0.0), doc["rows"], doc.get("decision")
    eos_grid = a.eos_penalty_grid or [0.0]
    lenpens = a.lenpen_grid or [a.lenpen]
    say(f"[{pos}] {direction} {slot}: choosing lenpen {lenpens} x EOS penalty {eos_grid} on valid "
        f"({len(eos_grid)} {a.beam}-best search(es))")
    opts = argparse.Namespace(data=bench.data, prep=bench.prep, checkpoint=ckpt, subset="valid",
                              direction=direction, beam=a.beam, batch_size=a.gen_batch_size,
                              generate_args=a.generate_args, threads=a.threads or 1, python=bench.python,
                              lenpen=lenpens, eos_penalty=eos_grid, metric="bleu")
    decision = None
    if halves:
        rows, decision, _ = tune_halves(opts)
        chosen = chosen_row(rows)["lenpen"]
        say(f"[{pos}] {direction} {slot}: {decision_text(decision)}")
    else:
        rows, chosen, _ = tune(opts)
    eos_penalty = chosen_row(rows)["eos_penalty"]
    write_json(path, {"key": key, "lenpen": chosen, "eos_penalty": eos_penalty, "rows": rows, "decision": decision})
    return chosen, eos_penalty, rows, decision
