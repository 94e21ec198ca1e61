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


def load(out, name):
    path = os.path.join(out, name, "results.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        res = json.load(f)
    rows = res.get("results", {}).get("de-en") or next(iter(res.get("results", {}).values()), [])
    if not res.get("complete") or not rows:
        return None
    row = dict(rows[0])
    row["config"] = name
    return row


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: topk_table.py OUT CONFIG [CONFIG ...]")
    out, names = argv[0], argv[1:]
    rows, missing = [], []
    for name in names:
        row = load(out, name)
        (rows.append(row) if row else missing.append(name))
    lines = ["| config | arch | train flags | updates | BLEU | TER | chrF | train tok/s | ratio | "
             "decode sent/s | ratio | best valid nll |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = next((r for r in rows if r["config"] == "transformer"), rows[0] if rows else None)
    for r in rows:
        flags = " ".join(a for a in r.get("extra_args", []) if a.startswith("--lexicon") or not a.startswith("--"))
        lines.append(
            f"| {r['config']} | `{r['arch']}` | {flags or '-'} | {r['updates']} | {r['bleu']:.2f} | {r['ter']:.2f} | "
            f"{r['chrf']:.2f} | {r['train_tokens_per_second']:.0f} | "
            f"{r['train_tokens_per_second'] / base['train_tokens_per_second']:.2f} | "
            f"{r['decode_sentences_per_second']:.2f} | "
            f"{r['decode_sentences_per_second'] / base['decode_sentences_per_second']:.2f} | "
            f"{r['best_valid_nll_loss']:.3f} |")
    for name in missing:
        lines.append(f"| {name} | missing: no complete {os.path.join(out, name, 'results.json')} |" + " |" * 10)
    table = "\n".join(lines) + "\n"
    sys.stdout.write(table)
    with open(os.path.join(out, "topk.md.tmp"), "w") as f:
        f.write(table)
    os.replace(os.path.join(out, "topk.md.tmp"), os.path.join(out, "topk.md"))
    with open(os.path.join(out, "topk.json.tmp"), "w") as f:
        json.dump({"rows": rows, "missing": missing}, f, indent=1)
    os.replace(os.path.join(out, "topk.json.tmp"), os.path.join(out, "topk.json"))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
