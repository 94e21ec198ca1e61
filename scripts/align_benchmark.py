#!/usr/bin/env python
"""One word-alignment benchmark for any language pair with a gold set: hmm-nmt-align-corpus end to end with its
defaults against eflomal and fast_align on the same text, every baseline at the merge its dev part chooses.

    python scripts/align_benchmark.py --name europarl-deen --work runs/align/deen \\
        --gold-src gold.de --gold-tgt gold.en --gold gold.talp --gold-one-based --dev-pairs 100 \\
        --train-src train.de.gz --train-tgt train.en.gz --seeds 1 2 3 --eflomal-runs 3 \\
        --results results/alignment/europarl-deen.json [-- more hmm-nmt-align-corpus options]

The corpus every aligner sees is the gold pairs followed by the training pairs (WORK/corpus.{src,tgt}); the
first ``--dev-pairs`` gold pairs are the dev part (every choice is made there), the rest the test part, and
``all`` is every gold pair (the published figures' set). Systems, each run once and skipped on a rerun when its
output exists (an interrupted benchmark resumes; a job's times are the sum of its runs, its ``code`` the
checkout's commit and its ``cpu`` the CPU model it ran on, both of every run when they differ, WORK/times.json,
which also keeps the hardware the benchmark started on: the results name it):

* ``hmm`` seed S: ``hmm-nmt-align-corpus -s -t --model-dir WORK/hmm.S --seed S -o -f -r`` with its defaults and
  the options after ``--``; its stage times come from the model directory's manifest (their sum is its time
  when that is more than the job recorded: a run killed with its machine records none). Its merged output uses
  no gold; its directions' hard merges are scored too, and listed.
* ``hmm-ensemble``: with two seeds or more, ``hmm-nmt-align --model-dir WORK/hmm.1:WORK/hmm.2:...`` (their
  posteriors averaged; ``--ensemble-seeds`` picks the members, all seeds by default) into
  WORK/hmm-ensemble.1-2.align, named by its members; its cost is the seeds' training plus this alignment.
* ``eflomal`` run K (``eflomal-align``, defaults; it is not seeded): both directions, every hard merge scored
  on dev, test and all; its row is the merge with the best dev AER.
* ``fast_align`` (``systran-align``, ``fast_align -d -o -v``): symmetrized by the binding itself.

Every aligner gets ``--threads`` (default: the machine's cores), whatever the caller's ``OMP_NUM_THREADS``:
eflomal and fast_align through OpenMP (eflomal's two directions and samplers run in parallel), hmm-nmt-align-corpus
as its ``--threads``, which it splits between its two directions.

Writes ``--results`` (JSON: command, data, hardware, seeds, every system and merge with dev/test/all AER,
precision, recall, wall clock and CPU seconds) and prints its table (``scripts/alignment_tables.py``).
"""
import argparse
import gzip
import importlib.util
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's packages
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]
from hmm_nmt_align.aer import corpus_scores  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402
from hmm_nmt_align.base.symmetrize import METHODS, symmetrize  # noqa: E402
from hmm_nmt_align.io import read_pharaoh  # noqa: E402

BIN = os.path.dirname(sys.executable)


def log(msg):
    sys.stderr.write(f"[align-benchmark {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").rstrip("\r") for line in f]


def cpu_model():
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return cpu


def hardware():
    """The CPU model, cores, and GPU where one is used."""
    cpu = cpu_model()
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        pass
    out = {"cpu": cpu, "cores": os.cpu_count(), "avx512_bf16": "avx512_bf16" in flags, "amx": "amx_bf16" in flags}
    try:
        import torch

        out["torch"] = torch.__version__
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return out


def code_version():
    """The checkout's commit (``-dirty`` with uncommitted changes to tracked files), or None outside git."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


class Times:
    """Wall clock and CPU seconds (user + system of this process's children) of each job, summed over its runs."""

    def __init__(self, path):
        self.path = path
        self.data = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
        # the machine the benchmark started on names the results: a resumed job names its own CPU beside it
        self.hardware = self.data.pop("hardware", None) or hardware()

    def run(self, name, cmd, log_path, env=None):
        """Run ``cmd`` (its output to ``log_path``), add its times to job ``name`` even when it fails, and its peak
        memory: the largest resident set of the command or any process it waited for (``ru_maxrss``)."""
        t0, r0, peak = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN), None
        job = self.data.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0, "runs": 0})
        # a job resumed on other code or another CPU names both: its times are then a sum over the two
        for key, value in (("code", code_version()), ("cpu", cpu_model())):
            if key not in job:
                job[key] = value
            elif value and value not in (job[key] or "").split(" + "):
                job[key] = f"{job[key]} + {value}"
        try:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(f"$ {shlex.join(cmd)}\n")
                f.flush()
                proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
                try:
                    _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, for its peak memory
                except BaseException:
                    proc.kill()
                    proc.wait()
                    raise
                rc = proc.returncode = os.waitstatus_to_exitcode(status)
                peak = usage.ru_maxrss / 1024  # kilobytes on Linux
        finally:
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            self.add(name, time.time() - t0, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), peak)
        if rc != 0:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = f.read().splitlines()[-5:]
            raise SystemExit(f"align_benchmark: {name} failed (log {log_path}): {' | '.join(tail)}")

    def add(self, name, wall, cpu, peak_mb=None):
        job = self.data.setdefault(name, {"wall_s": 0.0, "cpu_s": 0.0, "runs": 0})
        job["wall_s"] += wall
        job["cpu_s"] += cpu
        job["runs"] += 1
        if peak_mb is not None:
            job["max_rss_mb"] = round(max(peak_mb, job.get("max_rss_mb", 0.0)), 1)
        atomic_write(self.path, json.dumps({"hardware": self.hardware, **self.data}, indent=1) + "\n")


class Gold:
    """The gold links and the line numbers of its dev and test parts inside the corpus (gold pairs first)."""

    def __init__(self, opts, src_lens, tgt_lens):
        gold = read_pharaoh(opts.gold, one_based=opts.gold_one_based)
        if opts.gold_reverse:
            from hmm_nmt_align.io import reverse_all

            gold = reverse_all(gold)
        if len(gold) != len(src_lens):
            raise SystemExit(f"align_benchmark: --gold {opts.gold} has {len(gold)} lines, --gold-src {len(src_lens)}")
        for k, g in enumerate(gold):
            bad = [(i, j) for i, j in list(g.sure) + list(g.possible) if i >= src_lens[k] or j >= tgt_lens[k]]
            if bad:
                raise SystemExit(f"align_benchmark: {opts.gold}:{k + 1}: link {bad[0]} outside the sentence pair "
                                 "(check --gold-one-based / --gold-reverse)")
        self.links = gold
        self.parts = {"dev": range(0, opts.dev_pairs), "test": range(opts.dev_pairs, len(gold)),
                      "all": range(0, len(gold))}

    def score(self, hyp):
        """{part: {AER, P, R}} in percent of a whole-corpus alignment (its first lines are the gold pairs)."""
        out = {}
        for part, rows in self.parts.items():
            if not len(rows):
                continue
            s = corpus_scores([self.links[k] for k in rows], [hyp[k] for k in rows])
            out[part] = {k: None if s[k] != s[k] else round(100.0 * s[k], 2) for k in ("AER", "P", "R")}  # P: NaN, no link
        return out


def _read_links(path, n):
    out = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f):
            if k >= n:
                break
            out.append([tuple(map(int, x.split("-"))) for x in line.split()])
    return out


def merges(fwd, rev, gold):
    """Every hard merge of two directions' links: {method: scores}, and the method with the best dev AER."""
    rows = {m: gold.score([symmetrize(f, r, m) for f, r in zip(fwd, rev)]) for m in METHODS}
    rows["fwd"], rows["rev"] = gold.score(fwd), gold.score(rev)
    part = "dev" if "dev" in next(iter(rows.values())) else "all"
    best = min(METHODS, key=lambda m: (rows[m][part]["AER"], list(METHODS).index(m)))
    return rows, best


def run_hmm(opts, times, gold, n_gold, seed):
    """One seed of hmm-nmt-align-corpus end to end; its row, its merges and its manifest's stage times."""
    work, name = opts.work, f"hmm.{seed}"
    out = os.path.join(work, f"{name}.align")
    if not os.path.exists(out):
        log(f"hmm-nmt-align-corpus, seed {seed}: progress in {work}/{name}/fwd/train.log")
        cmd = [_tool("hmm-nmt-align-corpus"), "-s", os.path.join(work, "corpus.src"),
               "-t", os.path.join(work, "corpus.tgt"), "--model-dir", os.path.join(work, name), "--seed", str(seed),
               "-o", out, "-f", out + ".fwd", "-r", out + ".rev", "--no-progress", "--threads", str(opts.threads),
               *opts.hmm_args]  # a --threads among them comes last and wins
        times.run(name, cmd, os.path.join(work, f"{name}.log"))
    manifest = json.load(open(os.path.join(work, name, "manifest.json"), encoding="utf-8"))
    stages = manifest.get("times", {})  # prepare, train, links, guide, align: wall_s, cpu_s (summed over runs)
    job = dict(times.data[name])
    staged = {k: round(sum(s.get(k, 0.0) for s in stages.values()), 3) for k in ("wall_s", "cpu_s")}
    if staged["wall_s"] > job["wall_s"]:
        # a run killed with its machine records no time of its own; the stages it finished persist in the model
        # directory, so the seed costs at least their sum
        job.update(staged, times_from="stages")
    fwd, rev = _read_links(out + ".fwd", n_gold), _read_links(out + ".rev", n_gold)
    rows, best = merges(fwd, rev, gold)
    return {"system": "hmm-nmt-align-corpus", "seed": seed, "merge": "default (no gold)",
            "scores": gold.score(_read_links(out, n_gold)), **job, "stages": stages,
            "config": manifest.get("config"), "hard_merges": rows, "dev_best_hard_merge": best}


def run_ensemble(opts, times, gold, n_gold, seeds, hmm_rows):
    work, name = opts.work, "hmm-ensemble." + "-".join(map(str, seeds))  # a file per member set: never stale
    out = os.path.join(work, f"{name}.align")
    if not os.path.exists(out):
        log(f"hmm-nmt-align --model-dir of seeds {seeds} (an ensemble)")
        dirs = os.pathsep.join(os.path.join(work, f"hmm.{s}") for s in seeds)
        cmd = [_tool("hmm-nmt-align"), "--model-dir", dirs, "--src-text", os.path.join(work, "corpus.src"),
               "--tgt-text", os.path.join(work, "corpus.tgt"), "-o", out, "--no-progress"]
        times.run(name, cmd, os.path.join(work, f"{name}.log"))
    own = times.data[name]
    train = [r for r in hmm_rows if r["seed"] in seeds]
    return {"system": "hmm-nmt-align-corpus ensemble", "seeds": seeds, "merge": "default (no gold)",
            "scores": gold.score(_read_links(out, n_gold)),
            # the members' whole runs minus their own alignment stage, plus the ensemble's alignment
            "wall_s": own["wall_s"] + sum(r["wall_s"] - r["stages"].get("align", {}).get("wall_s", 0) for r in train),
            "cpu_s": own["cpu_s"] + sum(r["cpu_s"] - r["stages"].get("align", {}).get("cpu_s", 0) for r in train),
            "align_wall_s": own["wall_s"], **{k: own[k] for k in ("code", "cpu") if k in own}}


def _tool(name):
    """The path of command ``name``: beside this interpreter (its venv), else on PATH; None if neither."""
    exe = os.path.join(BIN, name)
    return exe if os.path.exists(exe) else shutil.which(name)


def check_tools(opts):
    """Every command the benchmark will run, before it runs any: one line naming what to install."""
    need = ["hmm-nmt-align-corpus"] + (["hmm-nmt-align"] if len(opts.ensemble_seeds or opts.seeds) > 1 else [])
    missing = [name for name in need if _tool(name) is None]
    if missing:
        raise SystemExit(f"align_benchmark: {', '.join(missing)} not found (make install, or pip install -e .)")
    if opts.eflomal_runs and _tool("eflomal-align") is None:
        raise SystemExit("align_benchmark: eflomal-align not found (pip install -e '.[baselines]', "
                         "or --eflomal-runs 0)")
    if opts.fast_align and importlib.util.find_spec("systran_align") is None:
        raise SystemExit("align_benchmark: systran-align (fast_align) not installed (pip install -e '.[baselines]', "
                         "or leave out --fast-align)")


def run_eflomal(opts, times, gold, n_gold, k):
    work, name = opts.work, f"eflomal.{k}"
    fwd_path, rev_path = os.path.join(work, f"{name}.fwd"), os.path.join(work, f"{name}.rev")
    if not os.path.exists(rev_path):
        log(f"eflomal run {k} of {opts.eflomal_runs}")
        cmd = [_tool("eflomal-align") or "eflomal-align", "-s", os.path.join(work, "corpus.src"),
               "-t", os.path.join(work, "corpus.tgt"), "-f", fwd_path + ".tmp", "-r", rev_path + ".tmp"]
        times.run(name, cmd, os.path.join(work, f"{name}.log"))
        os.replace(fwd_path + ".tmp", fwd_path)
        os.replace(rev_path + ".tmp", rev_path)
    fwd, rev = _read_links(fwd_path, n_gold), _read_links(rev_path, n_gold)
    rows, best = merges(fwd, rev, gold)
    out = os.path.join(work, f"{name}.{best}")
    if f"{name}.merge" not in times.data:  # the whole corpus merged by the dev-chosen rule: part of its cost
        t0, c0 = time.time(), time.process_time()
        all_f, all_r = _read_links(fwd_path, float("inf")), _read_links(rev_path, float("inf"))
        atomic_write(out, "".join(" ".join(f"{i}-{j}" for i, j in sorted(symmetrize(f, r, best))) + "\n"
                                  for f, r in zip(all_f, all_r)))
        times.add(f"{name}.merge", time.time() - t0, time.process_time() - c0)
    own, merge = times.data[name], times.data[f"{name}.merge"]
    return {"system": "eflomal", "run": k, "merge": best, "scores": rows[best],
            "wall_s": own["wall_s"] + merge["wall_s"], "cpu_s": own["cpu_s"] + merge["cpu_s"],
            **({"max_rss_mb": own["max_rss_mb"]} if "max_rss_mb" in own else {}),
            "hard_merges": rows, "dev_best_hard_merge": best}


def run_fast_align(opts, times, gold, n_gold):
    from hmm_nmt_align.baselines import run_fast_align as fast_align

    out = os.path.join(opts.work, "fast_align.align")
    if not os.path.exists(out):
        log("fast_align (systran-align)")
        src, tgt = _lines(os.path.join(opts.work, "corpus.src")), _lines(os.path.join(opts.work, "corpus.tgt"))
        t0, c0 = time.time(), time.process_time()
        links = fast_align(src, tgt, opts.work)
        times.add("fast_align", time.time() - t0, time.process_time() - c0)
        atomic_write(out, "".join(" ".join(f"{i}-{j}" for i, j in sorted(a.sure)) + "\n" for a in links))
    return {"system": "fast_align", "merge": "the binding's own", "scores": gold.score(_read_links(out, n_gold)),
            **times.data["fast_align"]}


def _command():
    """This command line, paths relative to the repository (``../shared/...``: no machine's folders)."""
    def rel(x):
        return os.path.relpath(x, ROOT) if os.path.isabs(x) and os.path.exists(x) else x
    return shlex.join([os.path.relpath(sys.argv[0], ROOT), *(rel(x) for x in sys.argv[1:])])


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--name", required=True, help="the language pair's name in the results (e.g. hansards-enfr)")
    p.add_argument("--work", required=True, help="working folder (resumable)")
    p.add_argument("--gold-src", required=True)
    p.add_argument("--gold-tgt", required=True)
    p.add_argument("--gold", required=True, help="Pharaoh links of the gold pairs (ipj / i?j: possible links)")
    p.add_argument("--gold-one-based", action="store_true")
    p.add_argument("--gold-reverse", action="store_true", help="the gold lists the target index first")
    p.add_argument("--dev-pairs", type=int, required=True, help="the first N gold pairs are the dev part")
    p.add_argument("--train-src", nargs="+", default=[], help="training text (.gz read too), aligned with the gold")
    p.add_argument("--train-tgt", nargs="+", default=[])
    p.add_argument("--seeds", type=int, nargs="*", default=[1], help="seeds of hmm-nmt-align-corpus (none: skip it)")
    p.add_argument("--ensemble-seeds", type=int, nargs="*",
                   help="the seeds whose models the ensemble averages (default: all of --seeds; none: no ensemble)")
    p.add_argument("--eflomal-runs", type=int, default=1)
    p.add_argument("--fast-align", action="store_true", help="also fast_align (systran-align)")
    p.add_argument("--results", help="the results JSON to write (default WORK/results.json)")
    p.add_argument("--data-note", default="", help="where the data comes from, for the results file")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="CPU threads of every aligner (default: the machine's cores)")
    p.add_argument("hmm_args", nargs=argparse.REMAINDER, help="-- then options for hmm-nmt-align-corpus")
    return p


def main(argv=None):
    opts = build_parser().parse_args(argv)
    opts.hmm_args = opts.hmm_args[1:] if opts.hmm_args[:1] == ["--"] else opts.hmm_args
    if opts.ensemble_seeds and not set(opts.ensemble_seeds) <= set(opts.seeds):
        raise SystemExit("align_benchmark: --ensemble-seeds must be among --seeds")
    if len(opts.train_src) != len(opts.train_tgt):
        raise SystemExit("align_benchmark: give as many --train-tgt as --train-src files")
    if opts.threads < 1:
        raise SystemExit("align_benchmark: --threads must be at least 1")
    # before any OpenMP runtime loads (fast_align runs in this process): the baselines as their users run them,
    # not one thread because the caller's shell pins its own jobs to one
    os.environ["OMP_NUM_THREADS"] = str(opts.threads)
    check_tools(opts)
    os.makedirs(opts.work, exist_ok=True)
    gs, gt = _lines(opts.gold_src), _lines(opts.gold_tgt)
    if len(gs) != len(gt):
        raise SystemExit(f"align_benchmark: --gold-src has {len(gs)} lines, --gold-tgt {len(gt)}")
    if not 0 <= opts.dev_pairs < len(gs):
        raise SystemExit(f"align_benchmark: --dev-pairs must be in [0, {len(gs)})")
    gold = Gold(opts, [len(x.split()) for x in gs], [len(x.split()) for x in gt])
    corpus_src, corpus_tgt = os.path.join(opts.work, "corpus.src"), os.path.join(opts.work, "corpus.tgt")
    n_train = 0
    if not os.path.exists(corpus_tgt):
        src, tgt = list(gs), list(gt)
        for a, b in zip(opts.train_src, opts.train_tgt):
            ta, tb = _lines(a), _lines(b)
            if len(ta) != len(tb):
                raise SystemExit(f"align_benchmark: {a} has {len(ta)} lines, {b} {len(tb)}")
            src += ta
            tgt += tb
        atomic_write(corpus_src, "".join(x + "\n" for x in src))
        atomic_write(corpus_tgt, "".join(x + "\n" for x in tgt))
    with open(corpus_src, encoding="utf-8") as f:
        n_train = sum(1 for _ in f) - len(gs)
    times = Times(os.path.join(opts.work, "times.json"))
    rows = [run_eflomal(opts, times, gold, len(gs), k) for k in range(1, opts.eflomal_runs + 1)]
    if opts.fast_align:
        rows.append(run_fast_align(opts, times, gold, len(gs)))
    hmm = [run_hmm(opts, times, gold, len(gs), s) for s in opts.seeds]
    rows += hmm
    members = opts.seeds if opts.ensemble_seeds is None else opts.ensemble_seeds
    if len(members) >= 2:
        rows.append(run_ensemble(opts, times, gold, len(gs), members, hmm))
    results = {"name": opts.name, "command": os.environ.get("ALIGN_BENCHMARK_COMMAND") or _command(),
               "data": {"gold_pairs": len(gs), "dev_pairs": opts.dev_pairs, "test_pairs": len(gs) - opts.dev_pairs,
                        "training_pairs": n_train, "gold": os.path.basename(opts.gold), "note": opts.data_note},
               "hardware": times.hardware, "threads": opts.threads, "seeds": opts.seeds, "eflomal_runs": opts.eflomal_runs,
               "hmm_args": opts.hmm_args, "date": time.strftime("%Y-%m-%d"), "systems": rows}
    path = opts.results or os.path.join(opts.work, "results.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, json.dumps(results, indent=1) + "\n")
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from alignment_tables import table

    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
