#!/usr/bin/env python3
"""Print a few translations from a ``fairseq-generate --print-alignment`` log with their word alignments."""
import argparse
import re
import sys


def parse(path):
    """{sentence id: {"S": src, "T": ref, "H": hyp, "A": [(j, i), ...]}} from a fairseq-generate log."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = re.match(r"^([STHA])-(\d+)\t(.*)$", line.rstrip("\n"))
            if not m:
                continue
            kind, sid, rest = m.group(1), int(m.group(2)), m.group(3)
            entry = out.setdefault(sid, {})
            if kind == "H":
                rest = rest.split("\t", 1)[1]
            if kind == "A":
                try:
                    rest = [tuple(map(int, p.split("-"))) for p in rest.split()]
                except ValueError:
                    sys.exit(f"{path}:{lineno}: malformed alignment line")
            entry[kind] = rest
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("log")
    ap.add_argument("--n", type=int, default=3)
    args = ap.parse_args(argv)
    sents = parse(args.log)
    if not sents:
        sys.exit(f"{args.log}: no S-/H- lines (not a fairseq-generate log?)")
    for sid in sorted(sents)[: args.n]:
        e = sents[sid]
        src, hyp = e["S"].split(), e["H"].split()
        links = " ".join(f"{hyp[i]}<-{src[j]}" for j, i in e.get("A", []) if i < len(hyp) and j < len(src))
        print(f"\n[{sid}] source:     {e['S']}\n     reference:  {e.get('T', '')}\n     hypothesis: {e['H']}"
              f"\n     alignment:  {links}")


if __name__ == "__main__":
    main()
