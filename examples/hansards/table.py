#!/usr/bin/env python
"""The AER table of ``examples/hansards/run.sh`` (markdown on stdout) from the files it wrote under WORK.

    python examples/hansards/table.py --work runs/hansards [--models dhmm0,dhmm1,transformer,agree1]
"""
import argparse
import json
import os
import re
import sys

LABELS = {"dhmm0": "transformer_dhmm, zero order", "dhmm1": "transformer_dhmm, first order",
          "transformer": "transformer", "agree1": "transformer_dhmm, first order, agreement (joint)"}


def _label(m):
    """dhmm1 -> its label; dhmm1+a60 -> the label of dhmm1 adapted for 60 updates (hmm-nmt-adapt)."""
    base, _, n = m.partition("+a")
    return LABELS.get(base, base) + (f", adapted ({n} updates on the text to align)" if n else "")


def _variant(r):
    d = {"fwd": "en->fr", "rev": "fr->en", "both": "both"}[r["direction"]]
    sym = "" if r["symmetrize"] == "-" else f" `{r['symmetrize']}`"
    pooled = ", word-pooled" if r.get("pool", "pieces") == "words" else ""  # older files: no pool, pieces
    return f"{d}{sym}, `{r['links']}`{pooled}"


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--models", default="dhmm0,dhmm1,transformer")
    args = ap.parse_args(argv)
    al = os.path.join(args.work, "align")
    out = ["| aligner | method | variant | chosen on trial as | trial AER | test AER | test P | test R |",
           "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    speed = []
    best_dev = {}  # model -> trial AER of its best `best` row (one per method)
    for m in args.models.split(","):
        path = os.path.join(al, f"{m}.test.json")
        if not os.path.exists(path):
            continue
        seen = set()
        for r in json.loads(_read(path)):
            key = (r["method"], r["direction"], r["symmetrize"], r["links"], r.get("pool", "pieces"))
            if key in seen and r.get("choice") == "fixed":
                continue
            seen.add(key)
            dev = r.get("dev_AER")
            if r.get("choice") == "best" and dev is not None:  # one per method: the model's best is the lowest
                best_dev[m] = min(dev, best_dev.get(m, dev))
            out.append(f"| {_label(m)} | {r['method']} | {_variant(r)} | {r.get('choice', '')} | "
                       f"{'' if dev is None else f'{dev:.2f}'} | {r['AER']:.2f} | {r['P']:.2f} | {r['R']:.2f} |")
        t_path, a_path = os.path.join(al, f"{m}.gdfa.time"), os.path.join(al, f"{m}.gdfa.aer")
        if os.path.exists(t_path) and os.path.exists(a_path):
            sec = float(_read(t_path).strip())
            aer = _read(a_path).strip()
            n = int(re.search(r"sentences=(\d+)", aer).group(1))
            speed.append(f"| {_label(m)} | {sec:.1f} | {n / sec:.2f} | {aer} |")
    base = os.path.join(al, "baselines.txt")
    if os.path.exists(base):
        for line in _read(base).splitlines():
            m = re.match(r"(\S+)\s+AER=(\S+) P=(\S+) R=(\S+)", line)
            if m:
                out.append(f"| {m.group(1)} (same normalized text + the test pairs) | | | untuned | | {m.group(2)} | "
                           f"{m.group(3)} | {m.group(4)} |")
    print("AER on the 447 test pairs (settings chosen on the 37 trial pairs; `fixed` rows are untuned):\n")
    print("\n".join(out))
    chosen = []
    for base in dict.fromkeys(m.partition("+a")[0] for m in best_dev):
        family = {m: d for m, d in best_dev.items() if m.partition("+a")[0] == base}
        if len(family) > 1:
            m = min(family, key=lambda k: (family[k], k != base))  # ties: no adaptation
            n = m.partition("+a")[2]
            chosen.append(f"* {LABELS.get(base, base)}: " + (f"{n} updates" if n else "none")
                          + f" (trial AER of the best variant {family[m]:.2f}; "
                          + ", ".join(f"{k.partition('+a')[2] or 0}: {v:.2f}" for k, v in family.items()) + ")")
    if chosen:
        print("\nAdaptation to the text to align (hmm-nmt-adapt), chosen on the trial pairs:\n")
        print("\n".join(chosen))
    if speed:
        print("\n`hmm-nmt-align --rev-path ... --symmetrize grow-diag-final-and` on the 447 test pairs (both "
              "directions, wall time of the command, model loading included):\n")
        print("| model | seconds | sentences/s | hmm-nmt-aer |\n| --- | ---: | ---: | --- |")
        print("\n".join(speed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
