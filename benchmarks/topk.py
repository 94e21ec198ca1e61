"""The ``--lexicon-topk`` sweep: decoding one checkpoint at several decode-time K, and the sweep's table.

``scripts/decode_topk.py`` decodes with ``--model-overrides "{'lexicon_topk': K}"`` (0 = the exact mixture)
and scores each K (:func:`decode_sweep`, :func:`decode_table`); ``scripts/topk_table.py`` tabulates the
benchmark results of examples/multi30k/topk_sweep.sh (:func:`load_result`, :func:`sweep_table`).
"""
import json
import os
import shlex
import sys

from benchmarks.common import USER_DIR
from benchmarks.fairseq_runner import generate_to_file
from benchmarks.logs import parse_generate_output, parse_generate_speed
from benchmarks.scoring import score


def decode_at_k(opts, k, tmp):
    """fairseq-generate of ``opts.subset`` at decode-time K into ``tmp``: (stdout path, log path)."""
    src, tgt = opts.direction.split("-")
    cmd = [opts.python, "-m", "fairseq_cli.generate", os.path.join(opts.data, opts.prep["directions"][opts.direction]),
           "--user-dir", USER_DIR, "--task", "translation", "--source-lang", src, "--target-lang", tgt,
           "--path", opts.checkpoint, "--gen-subset", opts.subset, "--beam", str(opts.beam),
           "--batch-size", str(opts.batch_size), "--required-batch-size-multiple", "1",
           "--remove-bpe", opts.prep["remove_bpe"], "--num-workers", "0", "--seed", "1",
           "--model-overrides", repr({"lexicon_topk": k})] + shlex.split(opts.generate_args)
    if opts.cpu:
        cmd.append("--cpu")
    out, log = os.path.join(tmp, f"k{k}.out"), os.path.join(tmp, f"k{k}.log")
    generate_to_file(cmd, out, log, opts.threads, f"decode_topk.py: fairseq-generate failed for K={k}")
    return out, log


def decode_sweep(opts, refs, tmp):
    """One row per K of ``opts.k``: BLEU / TER / chrF / length ratio and fairseq-generate's speed."""
    rows = []
    for k in opts.k:
        print(f"decode_topk.py: K={k} on {opts.subset} ({len(refs)} sentences, beam {opts.beam})",
              file=sys.stderr, flush=True)
        out, log = decode_at_k(opts, k, tmp)
        res = score(parse_generate_output(out, len(refs)), refs)
        rows.append({"k": k, **{m: res[m] for m in ("bleu", "ter", "chrf", "length_ratio")},
                     **parse_generate_speed(out, log)})
    return rows


def decode_table(opts, rows, n):
    lines = [f"checkpoint `{opts.checkpoint}`, {opts.subset} ({n} sentences), beam {opts.beam}, "
             f"{opts.threads} thread(s)", "",
             "| decode K | BLEU | TER | chrF | len ratio | sent/s | tok/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['k'] or 'exact'} | {r['bleu']:.2f} | {r['ter']:.2f} | {r['chrf']:.2f} | "
                     f"{r['length_ratio']:.3f} | {r['decode_sentences_per_second']:.2f} | "
                     f"{r['decode_tokens_per_second']:.1f} |")
    return "\n".join(lines) + "\n"


def load_result(out, name):
    """The first row of ``OUT/NAME/results.json`` (de-en if present), or None if it is missing or partial."""
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


def sweep_table(out, rows, missing):
    """The sweep's markdown table; speed ratios against the transformer configuration (else the first row)."""
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
    return "\n".join(lines) + "\n"
