"""Several seeds of the translation benchmark (``--seeds``): parsing the list, and the mean and spread over seeds.

Input: one ``results.json`` document per seed (the benchmark's own output); output: per direction and slot,
for every metric the per-seed values, their mean, sample standard deviation (n - 1; 0 for one seed), min
and max, as JSON and as a markdown table of "mean ± sd".
"""
import math
import os
import statistics

from benchmarks import report
from benchmarks.common import BenchmarkError, atomic_write, write_json
from benchmarks.stopping import budget_text

METRICS = [  # (key in a results row, column title, format)
    ("bleu", "BLEU", "{:.2f}"),
    ("ter", "TER", "{:.2f}"),
    ("chrf", "chrF", "{:.2f}"),
    ("length_ratio", "len ratio", "{:.3f}"),
    ("best_valid_nll_loss", "best valid nll", "{:.3f}"),
    ("train_tokens_per_second", "train tok/s", "{:,.0f}"),
    ("train_minutes", "train min", "{:.1f}"),
    ("best_dev_bleu", "best dev BLEU", "{:.2f}"),
    ("best_valid_updates", "best valid at update", "{:,.0f}"),
    ("ttq_minutes", "min to transformer's best dev", "{:.1f}"),
    ("lenpen", "lenpen", "{:.2f}"),
    ("eos_penalty", "EOS penalty", "{:.2f}"),
]


def _derived(row):
    row = dict(row)
    if row.get("train_wall_seconds") is not None:
        row["train_minutes"] = row["train_wall_seconds"] / 60.0
    ttq = row.get("time_to_quality") or {}
    if ttq.get("train_wall_seconds") is not None:  # each seed against its own transformer
        row["ttq_minutes"] = ttq["train_wall_seconds"] / 60.0
    return row


def spread(values):
    """{values, mean, sd, min, max} of the finite values (None where there are none)."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return {"values": list(values), "mean": None, "sd": None, "min": None, "max": None}
    return {"values": vals, "mean": statistics.fmean(vals), "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "min": min(vals), "max": max(vals)}


def aggregate(docs_by_seed):
    """{seed: results.json document} -> {direction: [row per slot]}, slots in the benchmark's order."""
    seeds = sorted(docs_by_seed)
    out = {}
    for seed in seeds:
        for direction, rows in docs_by_seed[seed]["results"].items():
            table = out.setdefault(direction, {})
            for r in rows:
                entry = table.setdefault(r["slot"], {"slot": r["slot"], "label": r["label"], "arch": r["arch"],
                                                     "extra_args": r.get("extra_args", []), "seeds": [],
                                                     "updates": [], "rows": []})
                entry["seeds"].append(seed)
                entry["updates"].append(r["updates"])
                entry["rows"].append(_derived(r))
    summary = {}
    for direction, table in out.items():
        summary[direction] = []
        for entry in table.values():
            rows = entry.pop("rows")
            entry.update({key: spread([r.get(key) for r in rows]) for key, _, _ in METRICS})
            summary[direction].append(entry)
    return summary


def _cell(stat, fmt, n_seeds):
    if stat["mean"] is None:
        return "n/a"
    k = len(stat["values"])
    text = fmt.format(stat["mean"]) if k == 1 else f"{fmt.format(stat['mean'])} ± {fmt.format(stat['sd'])}"
    return text if k == n_seeds else f"{text} ({k} of {n_seeds} seeds)"  # e.g. a level never reached


def markdown(summary, title="Translation benchmark over seeds", notes=()):
    lines = [f"# {title}", "", *[f"- {n}" for n in notes],
             "- every cell: mean ± sample standard deviation over the seeds (one seed: its value); per-seed values in "
             "summary.json", ""]
    for direction, rows in summary.items():
        head = ["model", "arch", "seeds", "updates"] + [t for _, t, _ in METRICS]
        lines += [f"## {direction}", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
        for r in rows:
            ups = sorted(set(r["updates"]))
            cells = [r["label"], f"`{r['arch']}`" + (f" `{' '.join(r['extra_args'])}`" if r["extra_args"] else ""),
                     ",".join(str(s) for s in r["seeds"]), "/".join(f"{u:,}" for u in ups)]
            cells += [_cell(r[key], fmt, len(r["seeds"])) for key, _, fmt in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def parse_seeds(text):
    """``--seeds 1,2,3`` -> [1, 2, 3]; [] for an empty text."""
    if not text.strip():
        return []
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchmarkError(f"--seeds expects comma-separated integers, got '{text}'") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise BenchmarkError(f"--seeds must list distinct integers, got '{text}'")
    return seeds


def write_summary(out, docs_by_seed, command):
    """summary.json and summary.md in ``out`` from {seed: results.json document}; returns the summary.
    The budget line says "converged" only when every row of every seed stopped by patience."""
    seeds = sorted(docs_by_seed)
    first = docs_by_seed[seeds[0]]
    summary = aggregate(docs_by_seed)
    trained, decoded = [], []
    for s in seeds:
        trained += [m for m in report.training_machines(docs_by_seed[s]) if m not in trained]
        decoded += [m for m in report.decoding_machines(docs_by_seed[s]) if m not in decoded]
    device = report.machines_text(trained, decoded)
    every = {}
    for s in seeds:
        for direction, rows in docs_by_seed[s]["results"].items():
            every.setdefault(direction, []).extend(rows)
    notes = [f"command: {command}",
             f"data: {first['data']['config']}; budget per model: {budget_text(first['settings'], every)}; {device}",
             "per-seed tables: " + ", ".join(f"seed-{s}/results.md" for s in seeds),
             "min to transformer's best dev: training wall clock, validations excluded, to the first validation at "
             "the best dev score of the same seed's transformer (n/a: never reached)"]
    write_json(os.path.join(out, "summary.json"), {"seeds": seeds, "command": command, "summary": summary})
    atomic_write(os.path.join(out, "summary.md"), markdown(summary, notes=notes))
    return summary
