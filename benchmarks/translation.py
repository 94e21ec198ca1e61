"""The translation benchmark (``scripts/benchmark_translation.py``): every stage for every (direction, slot).

:class:`Benchmark` holds one run's settings and state (data, slots, environment of the fairseq children,
the seconds measured per stage for the ETA) and runs, per job, :func:`benchmarks.training.train` then
:func:`benchmarks.decoding.decode`, rewriting the report after each; :func:`run_seeds` repeats it per seed
and writes the summary over seeds.  Everything is resumable: a rerun skips the stages already done.
"""
import copy
import os
import shlex
import sys
import time

from benchmarks import report
from benchmarks import seeds as seed_stats
from benchmarks.common import USER_DIR, BenchmarkError, read_json, write_json
from benchmarks.decoding import decode
from benchmarks.fairseq_runner import query_registry
from benchmarks.progress import estimate_remaining, eta_text, fmt_duration, say
from benchmarks.slots import bound_scaled_args, resolve_slots
from benchmarks.stopping import add_time_to_quality, budget_text
from benchmarks.training import train

# settings that may change between runs into one --out (decoding, execution, reporting)
NOT_TRAINING = ("out", "directions", "models", "python", "no_plots", "generate_args", "beam",
                "lenpen", "tune_lenpen", "lenpen_grid", "tune_eos_penalty", "eos_penalty_grid", "gen_batch_size",
                "threads", "num_workers", "log_interval", "length_choice", "train_only")
# training settings added later: recorded only when not at their default, so that an output directory
# made before they existed resumes (its benchmark.json does not name them)
LATER_TRAINING = {"patience": 0, "dev_bleu": False, "dev_bleu_beam": 1}


class Benchmark:
    def __init__(self, args):
        self.args = args
        self.python = args.python or sys.executable
        self.data = os.path.abspath(args.data)
        self.out = os.path.abspath(args.out)
        prep_path = os.path.join(self.data, "prepare.json")
        if not os.path.isfile(prep_path):
            raise BenchmarkError(f"{prep_path} not found: --data must be a directory made by examples/multi30k/prepare.sh")
        self.prep = read_json(prep_path)
        self.directions = [d.strip() for d in args.directions.split(",") if d.strip()]
        for d in self.directions:
            if d not in self.prep.get("directions", {}):
                raise BenchmarkError(f"--directions: '{d}' is not in {prep_path} (has {', '.join(self.prep.get('directions', {}))})")
        self.slots, self.slot_cfg = resolve_slots(args)
        if not args.max_update and not args.budget_minutes:
            raise BenchmarkError("give a training budget: --max-update N and/or --budget-minutes M")
        for s in self.slots:
            if bound_scaled_args(self.slot_cfg[s]["extra_args"]) and not args.max_update:
                raise BenchmarkError(f"slot {s} schedules by a percentage of the updates: give --max-update N")
        self.env = dict(os.environ)
        if args.threads:
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                self.env[var] = str(args.threads)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.jobs = [(d, s) for d in self.directions for s in self.slots]
        self.measured = {}  # (direction, slot) -> seconds actually spent training / decoding, for the ETA
        self.bench_start = time.time()

    def job_dir(self, direction, slot):
        return os.path.join(self.out, direction, slot)

    # ------------------------------------------------------------------ checks before any work
    def preflight(self):
        """Fail before hours of training if an architecture or criterion is not registered."""
        reg = query_registry(self.python, self.env)
        for s in self.slots:
            c = self.slot_cfg[s]
            if c["arch"] not in reg["archs"]:
                raise BenchmarkError(f"slot {s}: architecture '{c['arch']}' is not registered (plugin {USER_DIR}); "
                                     f"override it with --arch {s}=ARCH or drop the slot from --models")
            if c["criterion"] not in reg["criterions"]:
                raise BenchmarkError(f"slot {s}: criterion '{c['criterion']}' is not registered; "
                                     f"override it with --criterion {s}=NAME")
        if self.args.fp16 and not reg["cuda"]:
            raise BenchmarkError("--fp16 needs a CUDA device, and torch sees none")
        self.software = reg
        return reg

    def check_config(self):
        """One output directory, one benchmark: refuse to resume with other training settings."""
        os.makedirs(self.out, exist_ok=True)
        path = os.path.join(self.out, "benchmark.json")
        cfg = {k: v for k, v in vars(self.args).items() if k not in NOT_TRAINING
               and not (k in LATER_TRAINING and v == LATER_TRAINING[k])}
        if not getattr(self.args, "dev_bleu", False):
            cfg.pop("dev_bleu_beam", None)
        cfg["data_config"] = self.prep["config"]
        if os.path.exists(path):
            old = read_json(path)
            diff = sorted(k for k in set(old) | set(cfg) if old.get(k) != cfg.get(k))
            if diff and set(diff) <= {"max_update", "budget_minutes"} and all(
                    raised(old.get(k), cfg.get(k)) for k in diff):
                say(f"{self.out}: the bound is raised ({', '.join(f'{k} {old.get(k)} -> {cfg.get(k)}' for k in diff)}): "
                    "models it stopped continue from their last checkpoint, converged ones are kept")
                write_json(path, cfg)
            elif diff:
                details = ", ".join(f"{k}: {old.get(k)!r} -> {cfg.get(k)!r}" for k in diff)
                raise BenchmarkError(
                    f"{self.out} holds a benchmark with other training settings ({details}); "
                    "use another --out, or delete it to start over")
        return path, cfg

    # ------------------------------------------------------------------ ETA
    def estimate_remaining(self, current, current_left, current_total=None):
        """Seconds left for the whole benchmark, and whether part of it could not be estimated yet
        (:func:`benchmarks.progress.estimate_remaining` over this benchmark's jobs and measurements)."""
        return estimate_remaining(self.jobs, self.measured, self.args.budget_minutes, current, current_left,
                                  current_total)

    def eta_text(self, current, current_left, current_total=None):
        return eta_text(*self.estimate_remaining(current, current_left, current_total))

    # ------------------------------------------------------------------ the whole run
    def run(self):
        path, cfg = self.check_config()  # before the slow preflight: a wrong --out fails at once
        results_path = os.path.join(self.out, "results.json")
        all_done = os.path.exists(path) and os.path.exists(results_path) and all(
            os.path.exists(os.path.join(self.job_dir(d, s), f)) for d, s in self.jobs
            for f in ("train_done.json", "decode_done.json"))
        if all_done:  # nothing to train: no need to import fairseq to check the registry
            prev = read_json(results_path)["hardware"]
            self.software = reg = {"cuda": prev["device"] == "cuda", "gpu": prev["gpu"], "torch": prev["torch"],
                                   "fairseq": prev["fairseq"]}
        else:
            reg = self.preflight()
        if not os.path.exists(path):
            write_json(path, cfg)
        device = f"CUDA ({reg['gpu']})" if reg["cuda"] else "CPU"
        say(f"benchmark: {len(self.jobs)} trainings ({', '.join(self.directions)} x {', '.join(self.slots)}) on "
            f"{device}; budget {self.budget_text()} each; output {self.out}")
        if getattr(self.args, "train_only", False):
            for i, (direction, slot) in enumerate(self.jobs):
                train(self, direction, slot, f"{i + 1}/{len(self.jobs)}")
            say(f"trained in {fmt_duration(time.time() - self.bench_start)} (--train-only): run the same command "
                f"without --train-only, on this or another machine, to decode and score {self.out}")
            return None
        results = {d: [] for d in self.directions}
        for i, (direction, slot) in enumerate(self.jobs):
            pos = f"{i + 1}/{len(self.jobs)}"
            summary = train(self, direction, slot, pos)
            done, scores = decode(self, direction, slot, pos)
            c = self.slot_cfg[slot]
            res = {"slot": slot, "label": c["label"], "arch": c["arch"], "criterion": c["criterion"],
                   "extra_args": c["extra_args"], "direction": direction, **summary,
                   "checkpoint": os.path.relpath(done["checkpoint"], self.out),
                   "checkpoint_selection": done["checkpoint_selection"],
                   "lenpen": done.get("lenpen", self.args.lenpen), "eos_penalty": done.get("eos_penalty", 0.0),
                   "lenpen_dev": done.get("lenpen_dev"), "length_choice": done.get("length_choice"),
                   **{k: done[k] for k in ("decode_sentences", "decode_tokens", "decode_seconds",
                                           "decode_sentences_per_second", "decode_tokens_per_second",
                                           "peak_decode_rss_bytes", "peak_decode_cuda_bytes")},
                   **scores}
            results[direction].append(res)
            say(f"[{pos}] {direction} {slot}: BLEU {scores['bleu']:.2f}  TER {scores['ter']:.2f}  "
                f"chrF {scores['chrf']:.2f}  ratio {scores['length_ratio']:.3f}")
            self.write_outputs(results, partial=i + 1 < len(self.jobs))
        say(f"done in {fmt_duration(time.time() - self.bench_start)}: "
            f"{os.path.join(self.out, 'results.md')}, results.json and plots")
        return results

    def budget_text(self, results=None):
        return budget_text(vars(self.args), results)

    def write_outputs(self, results, partial):
        a = self.args
        for rows in results.values():
            add_time_to_quality(rows)
        doc = {
            "complete": not partial,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": shlex.join([sys.executable] + sys.argv),
            "settings": {k: v for k, v in vars(a).items()},
            "budget": self.budget_text(results),
            "hardware": report.hardware(getattr(self, "software", {}), a.threads),
            "data": self.prep,
            "results": results,
        }
        report.write_outputs(doc, self.out, plots=not a.no_plots)


def raised(old, new):
    """A budget value raised (0: no limit)."""
    old, new = old or 0, new or 0
    return new == 0 or (old != 0 and new >= old)


def run_seeds(args, seeds):
    """One benchmark per seed in OUT/seed-N (each resumable on its own), then the summary over seeds."""
    out = os.path.abspath(args.out)
    docs = {}
    for k, seed in enumerate(seeds):
        say(f"=== seed {seed} ({k + 1}/{len(seeds)})")
        one = copy.copy(args)
        one.seed, one.seeds, one.out = seed, "", os.path.join(out, f"seed-{seed}")
        if Benchmark(one).run() is None:  # --train-only: nothing decoded, nothing to summarise
            continue
        docs[seed] = read_json(os.path.join(one.out, "results.json"))
    if not docs:
        return None
    summary = seed_stats.write_summary(out, docs, f"`{shlex.join([sys.executable] + sys.argv)}`")
    say(f"summary over seeds {','.join(map(str, sorted(docs)))}: {os.path.join(out, 'summary.md')}")
    return summary
