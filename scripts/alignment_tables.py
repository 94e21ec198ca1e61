#!/usr/bin/env python
"""The alignment tables of README.md and docs/ built from the committed results files of
``scripts/align_benchmark.py`` (``results/alignment/*.json``), so that no figure is typed by hand.

    python scripts/alignment_tables.py results/alignment/europarl-deen.json      # print one table
    python scripts/alignment_tables.py --write README.md docs/alignment.md       # refresh the marked tables
    python scripts/alignment_tables.py --check README.md docs/alignment.md       # exit 1 where one differs

A table in a markdown file sits between ``<!-- results: results/alignment/NAME.json -->`` and
``<!-- /results -->``; ``--write`` replaces what is between the markers, ``--check`` compares.
"""
import argparse
import json
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"(<!-- results: (\S+)( summary)? -->\n)(.*?)(<!-- /results -->)", re.S)


def _f(x):
    return "" if x is None else f"{x:.2f}"


def _row(label, merge, scores, wall=None, cpu=None):
    g = lambda part, k: (scores.get(part) or {}).get(k)  # noqa: E731
    return (f"| {label} | {merge} | {_f(g('dev', 'AER'))} | {_f(g('test', 'AER'))} | {_f(g('test', 'P'))} | "
            f"{_f(g('test', 'R'))} | {_f(g('all', 'AER'))} | {'' if wall is None else f'{wall:,.0f}'} | "
            f"{'' if cpu is None else f'{cpu:,.0f}'} |")


def _mean_row(label, merge, rows):
    """Mean (± sample standard deviation where there are several) of each figure over runs or seeds."""
    if len(rows) < 2:
        return []

    def agg(vals):
        if any(v is None for v in vals):  # precision without a link
            return None
        vals = [float(v) for v in vals]
        return statistics.mean(vals), statistics.stdev(vals)
    scores, cells = {}, []
    for part in ("dev", "test", "all"):
        if all(part in r["scores"] for r in rows):
            scores[part] = {k: agg([r["scores"][part][k] for r in rows]) for k in ("AER", "P", "R")}
    for part, k in (("dev", "AER"), ("test", "AER"), ("test", "P"), ("test", "R"), ("all", "AER")):
        m = scores.get(part, {}).get(k)
        cells.append("" if m is None else f"**{m[0]:.2f}** ± {m[1]:.2f}")
    wall = statistics.mean(r["wall_s"] for r in rows)
    cpu = statistics.mean(r["cpu_s"] for r in rows)
    return [f"| {label} | {merge} | " + " | ".join(cells) + f" | {wall:,.0f} | {cpu:,.0f} |"]


def curve_table(results):
    """The time-to-quality table of a ``scripts/budget_curve.py`` results file."""
    out = ["| updates | training s | dev AER | test AER | all AER |", "| ---: | ---: | ---: | ---: | ---: |"]
    for r in results["points"]:
        s = r["scores"]
        out.append(f"| {r['updates']:,} | {r['train_s']:,.0f} | {_f(s['dev']['AER'])} | {_f(s['test']['AER'])} | "
                   f"{_f(s['all']['AER'])} |")
    d, h, c = results["data"], results["hardware"], results["config"]
    out.append("")
    out.append(f"{results['name']}: the first pass of one seed ({c['seed']}) trained to {c['max_update']:,} updates "
               f"per direction on {d['training_pairs']:,} pairs, each point scored with {results['merge']} on "
               f"{d['gold_pairs']} gold pairs (dev: the first {d['dev_pairs']}); {h['cpu']}, {h['cores']} cores; "
               f"{results['date']}. {results.get('note', '')}".rstrip()
               + f" Command: `{results['command']}`.")
    return "\n".join(out) + "\n"


def links_table(results):
    """The link rules of a ``scripts/link_rules.py`` results file, the dev-chosen one in bold."""
    out = ["| rule | threshold | links | dev AER | test AER | test P | test R | all AER |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results["rules"]:
        s, b = r["scores"], "**" if r["rule"] == results["dev_best"] else ""
        out.append(f"| {b}{r['rule']}{b} | {r['threshold']:.3f} | {r['links']:,} | {_f(s['dev']['AER'])} | "
                   f"{_f(s['test']['AER'])} | {_f(s['test']['P'])} | {_f(s['test']['R'])} | {_f(s['all']['AER'])} |")
    d, h, c = results["data"], results["hardware"], results["config"]
    out.append("")
    out.append(f"{results['name']}: the mean of the two directions' word posteriors of one finished model (seed "
               f"{c['seed']}, {c['max_update']:,} + {c['guide_updates']:,} updates), {d['gold_pairs']} gold pairs "
               f"(dev: the first {d['dev_pairs']}); {h['cpu']}; {results['date']}. Command: `{results['command']}`.")
    return "\n".join(out) + "\n"


def memory_table(results):
    """Peak resident memory per corpus size and stage of a ``scripts/corpus_memory.py`` results file."""
    out = ["| pairs | stage | driver MB | largest child MB | tree MB |", "| ---: | --- | ---: | ---: | ---: |"]
    for run in results["runs"]:
        for stage, p in run["peaks"].items():
            out.append(f"| {run['pairs']:,} | {stage} | {p['driver']:,.0f} | {p['child']:,.0f} | {p['tree']:,.0f} |")
        m = run["max"]
        out.append(f"| {run['pairs']:,} | **all** ({run['wall_s']:,.0f} s) | **{m['driver']:,.0f}** | "
                   f"**{m['child']:,.0f}** | **{m['tree']:,.0f}** |")
    h = results["hardware"]
    out.append("")
    out.append(f"{results['data']}; `hmm-nmt-align-corpus` options: `{' '.join(results['options']) or 'defaults'}`; "
               f"{h['cpu']}, {h['cores']} cores; {results['date']}. Command: `{results['command']}`.")
    return "\n".join(out) + "\n"


def workers_table(results):
    """The alignment stage in worker processes against threads of one process (``scripts/align_workers.py``)."""
    label = {"threads": "threads of one process, a direction each (`--align-workers 0`)",
             "workers": f"{results['threads']} worker processes of one thread (the default)"}
    scored = all("scores" in r for r in results["runs"].values())
    out = ["| alignment stage | wall s | CPU s | cores busy | pairs/s | largest process MB |"
           + (" dev AER | test AER |" if scored else ""),
           "| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if scored else "")]
    for name in results["order"]:
        r = results["runs"][name]
        aer = lambda part: _f((r["scores"].get(part) or {}).get("AER"))  # noqa: E731
        out.append(f"| {label[name]} | {r['wall_s']:,.0f} | {r['cpu_s']:,.0f} | {r['cpu_s'] / r['wall_s']:.2f} | "
                   f"{r['pairs_per_s']:,.0f} | {r.get('max_rss_mb', 0):,.0f} |"
                   + (f" {aer('dev')} | {aer('test')} |" if scored else ""))
    h, d = results["hardware"], results["lines_differing"]
    out.append("")
    out.append(f"{results['pairs']:,} pairs, `--threads {results['threads']}`, model `{results['model_dir']}`"
               + (f", gold `{results['gold']}` (its pairs first)" if results.get("gold") else "")
               + f"; speed-up {results['speedup']:.2f}x; lines that differ between the runs: merged "
               f"{d['align']:,}, forward {d['fwd']:,}, reverse {d['rev']:,}; {h['cpu']}, {h['cores']} cores; "
               f"{results['date']}. Command: `{results['command']}`.")
    return "\n".join(out) + "\n"


def table(results, summary=False):
    """One markdown table (and its provenance line) of a results file; ``summary``: a system run several times
    gets its mean row alone."""
    if results.get("kind") == "align-workers":
        return workers_table(results)
    if results.get("kind") in ("blocked-products", "heap-trainers"):  # benchmarks/blocked.py, benchmarks/heap.py
        if ROOT not in sys.path:  # run from a checkout: its benchmarks package
            sys.path.insert(0, ROOT)
        from benchmarks import blocked, heap

        return (blocked if results["kind"] == "blocked-products" else heap).table(results)
    if "points" in results:
        return curve_table(results)
    if "rules" in results:
        return links_table(results)
    if "runs" in results:
        return memory_table(results)
    out = ["| aligner | merge (chosen on dev) | dev AER | test AER | test P | test R | all AER | wall s | CPU s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    systems = results["systems"]
    for name in ("eflomal", "fast_align", "hmm-nmt-align-corpus", "hmm-nmt-align-corpus ensemble"):
        rows = [r for r in systems if r["system"] == name]
        for r in (rows if not summary or len(rows) < 2 else []):
            which = f", run {r['run']}" if "run" in r else f", seed {r['seed']}" if "seed" in r else \
                f", seeds {','.join(map(str, r['seeds']))}" if "seeds" in r else ""
            out.append(_row(name + which, f"`{r['merge']}`" if name == "eflomal" else r["merge"], r["scores"],
                            r.get("wall_s"), r.get("cpu_s")))
        merges = {r["merge"] for r in rows}
        out += _mean_row(f"{name}, mean of {len(rows)}", ", ".join(sorted(merges)), rows)
    d, h = results["data"], results["hardware"]
    out.append("")
    out.append(f"{results['name']}: {d['gold_pairs']} gold pairs (dev: the first {d['dev_pairs']}, test: the other "
               f"{d['test_pairs']}) aligned with {d['training_pairs']:,} training pairs; "
               f"{h['cpu']}, {h['cores']} cores{', ' + h['gpu'] if h.get('gpu') else ''}; seeds "
               f"{', '.join(map(str, results['seeds']))}; eflomal runs: {results['eflomal_runs']}; {results['date']}. "
               f"Command: `{results['command']}`." + _code_note(systems) + _cpu_note(systems, h["cpu"])
               + _staged_note(systems))
    return "\n".join(out) + "\n"


def _by_seed(systems, key):
    """{value of ``key``: [seeds of hmm-nmt-align-corpus, and the ensemble, that recorded it]}."""
    by = {}
    for r in systems:
        if r["system"] == "hmm-nmt-align-corpus" and r.get(key):
            by.setdefault(r[key], []).append(str(r["seed"]))
        elif r["system"] == "hmm-nmt-align-corpus ensemble" and r.get(key):
            by.setdefault(r[key], []).append("ensemble")
    return by


def _seeds_note(title, by):
    def who(s):
        seeds = [x for x in s if x != "ensemble"]
        return ", ".join(([f"seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}"] if seeds else [])
                         + (["the ensemble"] if "ensemble" in s else []))
    parts = [f"{who(s)}: {v}" for v, s in by.items()]
    return f" {title}: " + "; ".join(parts) + "."


def _code_note(systems):
    """Which commit each seed of hmm-nmt-align-corpus ran from, where the results file says (its ``code``)."""
    by_code = _by_seed(systems, "code")
    return _seeds_note("Code of hmm-nmt-align-corpus", by_code) if by_code else ""


def _cpu_note(systems, cpu):
    """Each seed's CPU, when some seed ran on another CPU than the one the results file names."""
    by_cpu = _by_seed(systems, "cpu")
    return _seeds_note("CPU of hmm-nmt-align-corpus", by_cpu) if set(by_cpu) - {cpu} else ""


def _staged_note(systems):
    """The seeds whose time is the sum of their stages: a run of theirs recorded no time of its own."""
    seeds = [str(r["seed"]) for r in systems if r["system"] == "hmm-nmt-align-corpus" and r.get("times_from") == "stages"]
    if not seeds:
        return ""
    return (f" Wall and CPU seconds of seed{'s' if len(seeds) > 1 else ''} {', '.join(seeds)}: the sum of its stages "
            "(a run killed with its machine records none of its own, nor its CPU or code).")


def render(text, base=ROOT):
    """``text`` with every marked table rebuilt from its results file."""
    def sub(m):
        with open(os.path.join(base, m.group(2)), encoding="utf-8") as f:
            return m.group(1) + table(json.load(f), summary=bool(m.group(3))) + m.group(5)
    return MARK.sub(sub, text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="results JSON files to print, or markdown files with --write/--check")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    opts = p.parse_args(argv)
    status = 0
    for path in opts.files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not (opts.write or opts.check):
            print(table(json.loads(text)))
            continue
        new = render(text)
        if opts.write and new != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
        elif opts.check and new != text:
            sys.stderr.write(f"{path}: a results table differs from its results file (run --write)\n")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
