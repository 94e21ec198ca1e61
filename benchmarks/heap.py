"""The aligner's trainers with glibc's default heap and with the heap kept (hmm_nmt_align.base.heap), in one run.

Both directions of a model directory's first pass train side by side, one thread each, as
``hmm-nmt-align-corpus`` runs them on two cores: its own fairseq-train command line (``corpus.train._train_cmd``)
for ``--updates`` updates on the directory's ``bin/``, through benchmarks/fairseq_instrumented.py, which sums
the seconds of the optimisation steps alone (no start-up, no checkpoint) and the peak resident memory. Each of
``--repeats`` rounds runs both settings, in alternating order (a drifting machine favours neither). Prints a
table and writes ``--out`` as JSON.

    python -m benchmarks.heap --model-dir runs/ep1/hmm.1 --updates 120 --repeats 2 \\
        --out results/alignment/heap-trainers.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SETTINGS = ("default", "kept")  # glibc's own thresholds; hmm_nmt_align.base.heap's
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _opts(md):
    """The command's options for ``md``: its parser's defaults with the directory's recorded settings."""
    from hmm_nmt_align.corpus.cli import build_parser
    from hmm_nmt_align.corpus.model_dir import KEY_DEFAULTS

    opts = build_parser().parse_args(["-s", "-", "-t", "-", "--model-dir", md.path])
    for key, value in {**KEY_DEFAULTS, **md.data["config"]}.items():
        setattr(opts, key, value)
    opts.cpu, opts.seeds, opts.threads = True, 1, 2
    return opts


def _command(md, opts, name: str, updates: int, save_dir: str, stats: str):
    from hmm_nmt_align.corpus.train import _train_cmd

    cmd = _train_cmd(md, opts, name, updates)
    assert cmd[1:3] == ["-m", "fairseq_cli.train"], cmd[:3]
    cmd[cmd.index("--save-dir") + 1] = save_dir
    return [cmd[0], os.path.join(ROOT, "benchmarks", "fairseq_instrumented.py"), "train", stats, "--", *cmd[3:],
            "--no-save"]


def _env(setting: str) -> dict:
    from hmm_nmt_align.base.heap import trainer_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return trainer_env(env) if setting == "kept" else env


def run_pair(md, opts, setting: str, updates: int, work: str) -> list:
    """Both directions side by side under ``setting``: [{direction, s_per_update, updates, max_rss_mb}]."""
    procs = []
    for name in md.members(1)[0]:
        folder = tempfile.mkdtemp(prefix=f"{setting}.{name}.", dir=work)
        stats = os.path.join(folder, "stats.json")
        log = open(os.path.join(folder, "train.log"), "w", encoding="utf-8")
        cmd = _command(md, opts, name, updates, folder, stats)
        procs.append((name, stats, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(setting))))
    codes = [proc.wait() for _, _, _, proc in procs]  # both finish before either failure is reported
    rows = []
    for (name, stats, log, _), code in zip(procs, codes):
        log.close()
        if code:
            raise SystemExit(f"benchmarks.heap: {name}'s trainer failed (exit {code}); log: {log.name}")
        with open(stats, encoding="utf-8") as f:
            s = json.load(f)
        rows.append({"direction": name, "updates": s["updates"], "s_per_update": s["train_step_seconds"] / s["updates"],
                     "max_rss_mb": s["max_rss_bytes"] / 2 ** 20})
    return rows


def summary(doc) -> dict:
    out = {}
    for setting in SETTINGS:
        rows = [r for run in doc["runs"] if run["heap"] == setting for r in run["directions"]]
        out[setting] = {"s_per_update": statistics.mean(r["s_per_update"] for r in rows),
                        "max_rss_mb": max(r["max_rss_mb"] for r in rows)}
    out["speed-up"] = out["default"]["s_per_update"] / out["kept"]["s_per_update"]
    return out


def table(doc) -> str:
    """The figures as a Markdown table and its provenance line (scripts/alignment_tables.py renders it in docs)."""
    names = {"default": "glibc's default", "kept": "kept (`hmm_nmt_align.base.heap`)"}
    s = summary(doc)
    out = ["| heap | s per update, each run (fwd / rev) | mean | peak RSS MB |", "| --- | --- | ---: | ---: |"]
    for setting in SETTINGS:
        runs = ", ".join(" / ".join(f"{r['s_per_update']:.3f}" for r in run["directions"])
                         for run in doc["runs"] if run["heap"] == setting)
        out.append(f"| {names[setting]} | {runs} | {s[setting]['s_per_update']:.3f} | {s[setting]['max_rss_mb']:,.0f} |")
    out += ["", f"Speed-up {s['speed-up']:.2f}x. Both directions of {doc['model_dir']} side by side, one thread each, "
                f"{doc['updates']} updates of its own fairseq-train command, {doc['repeats']} rounds in alternating "
                f"order; {doc['cpu']['cpu']}, {doc['cpu']['logical_cpus']} cores, torch {doc['torch']}; {doc['date']}. "
                f"Command: `{doc['command']}`."]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heap", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True, help="a model directory of hmm-nmt-align-corpus with its bin/")
    p.add_argument("--updates", type=int, default=120, help="updates per trainer (default 120)")
    p.add_argument("--repeats", type=int, default=2, help="rounds of both settings (default 2)")
    p.add_argument("--out", help="write the figures as JSON here")
    a = p.parse_args(argv)
    if a.updates < 1 or a.repeats < 1:
        p.error("--updates and --repeats must be positive")
    from benchmarks.align_flops import _torch_version, cpu_info
    from benchmarks.common import publish, stamped
    from hmm_nmt_align.corpus.model_dir import CorpusError, ModelDir

    try:
        md = ModelDir(a.model_dir)
    except CorpusError as e:
        p.error(str(e))
    if md.data is None or not os.path.isdir(md.file("bin")):
        p.error(f"--model-dir {a.model_dir}: no prepared model directory (manifest.json and bin/)")
    opts = _opts(md)
    runs = []
    with tempfile.TemporaryDirectory(prefix="heap-bench.") as work:
        for r in range(a.repeats):
            for setting in SETTINGS if r % 2 == 0 else SETTINGS[::-1]:
                runs.append({"round": r + 1, "heap": setting,
                             "directions": run_pair(md, opts, setting, a.updates, work)})
    doc = {"kind": "heap-trainers", "model_dir": a.model_dir, "updates": a.updates, "repeats": a.repeats,
           "cpu": cpu_info(), "torch": _torch_version(), "runs": runs}
    doc["summary"] = summary(doc)
    publish(stamped(doc, "python -m benchmarks.heap", argv), table, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
