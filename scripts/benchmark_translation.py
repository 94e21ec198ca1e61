#!/usr/bin/env python
"""Side-by-side benchmark of ``transformer``, ``transformer_dhmm`` (zero order) and the first-order direct HMM.

Input is a directory made by ``examples/multi30k/prepare.sh`` (``prepare.json``, ``bin/<src>-<tgt>`` binarised
with one joint dictionary, ``text/`` tokenised references).  For every direction and model ("slot") it

1. trains with ``fairseq-train`` (identical sizes, optimiser, schedule, seed, batch size and budget for all
   slots; the budget is ``--max-update`` and/or ``--budget-minutes``, the latter passed as fairseq's
   ``--stop-time-hours``, which counts cumulative training time across restarts);
2. takes ``checkpoint_best.pt`` (lowest validation loss) or the average of the ``--average-best`` best ones;
3. decodes ``test`` (test_2016_flickr) with ``fairseq-generate`` and beam 5;
4. scores the BPE-free hypotheses against the tokenised references with sacrebleu: BLEU, TER and chrF with
   ``-tok none -lc`` semantics (no further tokenisation, case-insensitive), plus the length ratio;

and measures parameters, training target tokens per second of optimisation steps, decoding sentences/s and
tokens/s (fairseq-generate's own timer), peak memory (RSS; CUDA max allocated when on GPU) and the validation
curve.  ``results.json``, ``results.md`` and PNG plots (validation loss vs updates, throughput bars) go to
``--out``.

``--seeds 1,2,3`` repeats the whole benchmark once per seed (``--out``/seed-N, each a benchmark of its own) and
writes ``summary.json`` / ``summary.md`` to ``--out``: per model the per-seed values and their mean and sample
standard deviation (``scripts/seed_summary.py``).

Interrupting is safe: a rerun with the same arguments resumes training from ``checkpoint_last.pt`` and skips
every stage already done; a rerun with different training settings refuses to mix them.  On a CUDA machine
the same command trains on the GPU (fairseq's default); ``--fp16`` is passed through to train and generate.

Slots and their defaults (``--arch SLOT=ARCH``, ``--criterion SLOT=NAME``, ``--slot-args SLOT=ARGS`` override):
  transformer  transformer                    label_smoothed_cross_entropy
  dhmm0        transformer_dhmm               dhmm_label_smoothed_cross_entropy
  dhmm1        transformer_dhmm_first_order   dhmm_label_smoothed_cross_entropy
  dhmm0_fast   transformer_dhmm               dhmm_label_smoothed_cross_entropy  + --lexicon-topk-schedule 4@0,0@80%
  dhmm1_fast   transformer_dhmm_first_order   dhmm_label_smoothed_cross_entropy  (top-4 bf16, then exact; see docs)
  hnmc         transformer_hnmc               label_smoothed_cross_entropy
  iohmm        transformer_iohmm              label_smoothed_cross_entropy
"""
import argparse
import contextlib
import glob
import json
import math
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
USER_DIR = os.path.join(REPO, "hmm_nmt")


def task_args(eos_penalty=0.0):
    """fairseq-generate's task flags: the stock translation task, or hmm_nmt's with an EOS penalty."""
    if not eos_penalty:
        return ["--task", "translation"]
    return ["--task", "translation_eos_penalty", "--eos-penalty", repr(float(eos_penalty))]


INSTRUMENT = os.path.join(HERE, "fairseq_instrumented.py")

SLOTS = {
    "transformer": {
        "arch": "transformer",
        "criterion": "label_smoothed_cross_entropy",
        "label": "transformer",
    },
    "dhmm0": {
        "arch": "transformer_dhmm",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, zero order",
    },
    "dhmm1": {
        "arch": "transformer_dhmm_first_order",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, first order",
    },
    # the CPU path (docs/quality.md): the top-4 pruned objective with the bf16 lexicon for 80% of the updates,
    # then the exact likelihood; validation and decoding exact
    "dhmm0_fast": {
        "arch": "transformer_dhmm",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, zero order, top-4 then exact",
        "args": ["--lexicon-dtype", "bf16", "--lexicon-topk-objective", "pruned",
                 "--lexicon-topk-schedule", "4@0,0@80%"],
    },
    "dhmm1_fast": {
        "arch": "transformer_dhmm_first_order",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, first order, top-4 then exact",
        "args": ["--lexicon-dtype", "bf16", "--lexicon-topk-objective", "pruned",
                 "--lexicon-topk-schedule", "4@0,0@80%"],
    },
    # chain decoders over a transformer decoder of --layers layers (docs/hnmc.md, docs/iohmm.md); their
    # defaults, e.g. --slot-args "hnmc=--hnmc-states 64" or "iohmm=--iohmm-decoder chain" to change them
    "hnmc": {
        "arch": "transformer_hnmc",
        "criterion": "label_smoothed_cross_entropy",
        "label": "HNMC over a transformer decoder",
    },
    "iohmm": {
        "arch": "transformer_iohmm",
        "criterion": "label_smoothed_cross_entropy",
        "label": "IOHMM over a transformer decoder",
    },
}

# fairseq's progress records with --log-format json: "... | train_inner | {...}"
RECORD_RE = re.compile(r"\|\s*(train_inner|train|valid)\s*\|\s*(\{.*\})\s*$")
PARAMS_RE = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
LOADED_RE = re.compile(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)")
DONE_RE = re.compile(r"done training in ([\d.]+) seconds")
TRANSLATED_RE = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)
HYPO_RE = re.compile(r"^H-(\d+)\t(\S+)\t?(.*)$")


class BenchmarkError(Exception):
    """A problem the user must fix; reported without a traceback."""


# ----------------------------------------------------------------------------- small utilities
def atomic_write(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, obj):
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def say(msg):
    """A status line on stderr, where the progress bars are, without breaking a bar."""
    tqdm.write(msg, file=sys.stderr)


def fmt_duration(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _num(x):
    """fairseq json logs print numbers as strings."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def parse_slot_map(items, what, allowed):
    out = {}
    for item in items or []:
        if "=" not in item:
            raise BenchmarkError(f"{what} expects SLOT=VALUE, got '{item}'")
        slot, value = item.split("=", 1)
        if slot not in allowed:
            raise BenchmarkError(f"{what}: unknown slot '{slot}' (slots: {', '.join(allowed)})")
        out[slot] = value
    return out


# ----------------------------------------------------------------------------- log parsing
def parse_train_log(path):
    """Everything the benchmark needs from a (possibly appended-to, multi-run) fairseq-train log."""
    info = {"params": None, "params_trained": None, "valid": {}, "updates": 0, "epoch": 0,
            "runs": 0, "resumed_from": [], "finished": False, "last_train_inner": None}
    if not os.path.exists(path):
        return info
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = PARAMS_RE.search(line)
            if m:
                info["params"] = int(m.group(1).replace(",", ""))
                info["params_trained"] = int(m.group(2).replace(",", ""))
                info["runs"] += 1
                info["finished"] = False  # a new run started after any earlier "done"
                continue
            m = LOADED_RE.search(line)
            if m:
                info["resumed_from"].append(int(m.group(2)))
                continue
            if DONE_RE.search(line):
                info["finished"] = True
                continue
            m = RECORD_RE.search(line)
            if not m:
                continue
            tag = m.group(1)
            try:
                rec = json.loads(m.group(2))
            except json.JSONDecodeError:
                continue  # a line cut by an interruption
            if tag == "valid":
                upd = _num(rec.get("valid_num_updates"))
                if upd is None:
                    continue
                # a resumed run repeats the validations after its checkpoint: keep the newest
                info["valid"][int(upd)] = {
                    "updates": int(upd),
                    "epoch": int(_num(rec.get("epoch")) or 0),
                    "loss": _num(rec.get("valid_loss")),
                    "nll_loss": _num(rec.get("valid_nll_loss")),
                    "ppl": _num(rec.get("valid_ppl")),
                }
            else:
                key = "num_updates" if tag == "train_inner" else "train_num_updates"
                upd = _num(rec.get(key))
                if upd is not None:  # the newest record is the newest state, also after a resume
                    info["updates"] = int(upd)
                info["epoch"] = int(_num(rec.get("epoch")) or info["epoch"])
                if tag == "train_inner":
                    info["last_train_inner"] = rec
    info["valid_curve"] = [info["valid"][k] for k in sorted(info["valid"])]
    del info["valid"]
    return info


def parse_generate_output(stdout_path, n_expected):
    """Hypotheses in test-set order from fairseq-generate's H- lines (after --remove-bpe)."""
    hyps = {}
    with open(stdout_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = HYPO_RE.match(line.rstrip("\n"))
            if m:
                hyps[int(m.group(1))] = m.group(3)
    missing = [i for i in range(n_expected) if i not in hyps]
    extra = [i for i in hyps if i >= n_expected]
    if missing or extra:
        raise BenchmarkError(
            f"{stdout_path}: expected hypotheses for sentences 0..{n_expected - 1}, "
            f"missing {missing[:10]}{'...' if len(missing) > 10 else ''} "
            f"({len(missing)} in all), unexpected ids {extra[:10]}"
        )
    return [hyps[i] for i in range(n_expected)]


def parse_generate_speed(*paths):
    """fairseq-generate's own timing line (it logs to stdout or stderr depending on the logging set-up)."""
    found = None
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = TRANSLATED_RE.search(line)
                if m:
                    found = m
    if found is None:
        raise BenchmarkError(f"{', '.join(paths)}: no 'Translated N sentences ...' line from fairseq-generate")
    return {
        "decode_sentences": int(found.group(1).replace(",", "")),
        "decode_tokens": int(found.group(2).replace(",", "")),
        "decode_seconds": float(found.group(3)),
        "decode_sentences_per_second": float(found.group(4)),
        "decode_tokens_per_second": float(found.group(5)),
    }


# ----------------------------------------------------------------------------- scoring
def score(hyps, refs):
    """sacrebleu BLEU / TER / chrF with ``-tok none -lc`` (text is already tokenised and lowercased)."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    if len(hyps) != len(refs):
        raise BenchmarkError(f"{len(hyps)} hypotheses for {len(refs)} references")
    bleu_m = BLEU(tokenize="none", lowercase=True, force=True)  # force: tokenised input is intended here
    ter_m = TER(case_sensitive=False)
    chrf_m = CHRF(lowercase=True)
    bleu = bleu_m.corpus_score(hyps, [refs])
    ter = ter_m.corpus_score(hyps, [refs])
    chrf = chrf_m.corpus_score(hyps, [refs])
    return {
        "bleu": bleu.score,
        "ter": ter.score,
        "chrf": chrf.score,
        "length_ratio": bleu.sys_len / bleu.ref_len if bleu.ref_len else float("nan"),
        "hyp_len": bleu.sys_len,
        "ref_len": bleu.ref_len,
        "signatures": {
            "bleu": str(bleu_m.get_signature()),
            "ter": str(ter_m.get_signature()),
            "chrf": str(chrf_m.get_signature()),
        },
    }


# ----------------------------------------------------------------------------- checkpoints
def average_checkpoints(paths, out_path):
    """Parameter average of fairseq checkpoints (what fairseq's scripts/average_checkpoints.py does)."""
    import torch

    avg, first = None, None
    for p in paths:
        # plain torch.load, as fairseq's script does, so that the saved cfg stays a plain dict that the
        # weights_only loader of fairseq-generate accepts (fairseq's load_checkpoint_to_cpu would turn it into a
        # DictConfig).  weights_only=False: these are the checkpoints this benchmark has just trained itself,
        # and it spares importing fairseq (whose classes hmm_nmt.checkpoint_compat allow-lists) for this step.
        state = torch.load(p, map_location="cpu", weights_only=False)
        if first is None:
            first = state
            avg = {k: v.clone().double() if v.is_floating_point() else v.clone() for k, v in state["model"].items()}
        else:
            if set(state["model"]) != set(avg):
                raise BenchmarkError(f"{p} has other parameters than {paths[0]}")
            for k, v in state["model"].items():
                if v.is_floating_point():
                    avg[k] += v.double()
    for k, v in avg.items():
        if v.is_floating_point():
            avg[k] = (v / len(paths)).to(first["model"][k].dtype)
    first["model"] = avg
    first["last_optimizer_state"] = None  # not needed to decode; keeps the file small
    tmp = f"{out_path}.tmp{os.getpid()}"
    torch.save(first, tmp)
    os.replace(tmp, out_path)


# ----------------------------------------------------------------------------- the benchmark
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
        self.slots = [s.strip() for s in args.models.split(",") if s.strip()]
        for s in self.slots:
            if s not in SLOTS:
                raise BenchmarkError(f"--models: unknown slot '{s}' (slots: {', '.join(SLOTS)})")
        if len(set(self.slots)) != len(self.slots):
            raise BenchmarkError("--models lists a slot twice")
        archs = parse_slot_map(args.arch, "--arch", SLOTS)
        crits = parse_slot_map(args.criterion, "--criterion", SLOTS)
        extra = parse_slot_map(args.slot_args, "--slot-args", SLOTS)
        self.slot_cfg = {
            s: {
                "arch": archs.get(s, SLOTS[s]["arch"]),
                "criterion": crits.get(s, SLOTS[s]["criterion"]),
                "label": SLOTS[s]["label"],
                "extra_args": SLOTS[s].get("args", []) + shlex.split(extra.get(s, "")),
            }
            for s in self.slots
        }
        if not args.max_update and not args.budget_minutes:
            raise BenchmarkError("give a training budget: --max-update N and/or --budget-minutes M")
        for s in self.slots:
            if any(a.endswith("%") for a in self.slot_cfg[s]["extra_args"]) and not args.max_update:
                raise BenchmarkError(f"slot {s} schedules by a percentage of the updates: give --max-update N")
        self.env = dict(os.environ)
        if args.threads:
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                self.env[var] = str(args.threads)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.jobs = [(d, s) for d in self.directions for s in self.slots]
        self.measured = {}  # (direction, slot) -> seconds actually spent training / decoding, for the ETA
        self.bench_start = time.time()

    # ------------------------------------------------------------------ commands
    def job_dir(self, direction, slot):
        return os.path.join(self.out, direction, slot)

    def train_args(self, direction, slot):
        a, c = self.args, self.slot_cfg[slot]
        src, tgt = direction.split("-")
        save_dir = os.path.join(self.job_dir(direction, slot), "checkpoints")
        sizes = []
        for side in ("encoder", "decoder"):
            sizes += [f"--{side}-embed-dim", str(a.embed_dim), f"--{side}-ffn-embed-dim", str(a.ffn_dim),
                      f"--{side}-layers", str(a.layers), f"--{side}-attention-heads", str(a.heads)]
        cmd = [
            os.path.join(self.data, self.prep["directions"][direction]),
            "--user-dir", USER_DIR, "--task", "translation", "--source-lang", src, "--target-lang", tgt,
            "--arch", c["arch"], *sizes,
            "--dropout", str(a.dropout),
            "--criterion", c["criterion"], "--label-smoothing", str(a.label_smoothing),
            "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", str(a.clip_norm),
            "--weight-decay", str(a.weight_decay),
            "--lr", str(a.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(a.warmup_updates),
            "--warmup-init-lr", "1e-07",
            "--max-tokens", str(a.max_tokens),
            # fairseq 0.12 drops the last batch of a length-sorted epoch unless it is a multiple of this
            # (facebookresearch/fairseq#5036): it would silently skip the longest sentences
            "--required-batch-size-multiple", "1",
            "--seed", str(a.seed),
            "--save-dir", save_dir, "--no-epoch-checkpoints",
            "--log-format", "json", "--log-interval", str(a.log_interval),
            "--num-workers", str(a.num_workers),
        ]
        if not a.no_share_embeddings:
            cmd.append("--share-all-embeddings")
        if a.max_update:
            cmd += ["--max-update", str(a.max_update)]
        if a.budget_minutes:
            cmd += ["--stop-time-hours", repr(a.budget_minutes / 60.0)]
        if a.validate_interval_updates:
            v = str(a.validate_interval_updates)
            cmd += ["--validate-interval-updates", v, "--save-interval-updates", v, "--keep-interval-updates", "1"]
        if a.average_best > 1:
            cmd += ["--keep-best-checkpoints", str(a.average_best)]
        if a.fp16:
            cmd.append("--fp16")
        return cmd + c["extra_args"] + shlex.split(a.train_args or "")

    def generate_args(self, direction, slot, checkpoint, lenpen=None, eos_penalty=0.0):
        a = self.args
        src, tgt = direction.split("-")
        cmd = [
            os.path.join(self.data, self.prep["directions"][direction]),
            "--user-dir", USER_DIR, *task_args(eos_penalty), "--source-lang", src, "--target-lang", tgt,
            "--path", checkpoint, "--gen-subset", "test",
            "--beam", str(a.beam), "--lenpen", str(a.lenpen if lenpen is None else lenpen),
            "--batch-size", str(a.gen_batch_size),
            "--required-batch-size-multiple", "1",  # see train_args: else the longest sentences vanish
            "--remove-bpe", self.prep["remove_bpe"], "--num-workers", "0", "--seed", str(a.seed),
        ]
        if a.fp16:
            cmd.append("--fp16")
        return cmd + shlex.split(a.generate_args or "")

    # ------------------------------------------------------------------ preflight
    def preflight(self):
        """Fail before hours of training if an architecture or criterion is not registered."""
        code = (
            "import json, sys; sys.path.insert(0, sys.argv[1]);\n"
            "import torch\n"
            "from fairseq.utils import import_user_module\n"
            "from argparse import Namespace\n"
            "import_user_module(Namespace(user_dir=sys.argv[2]))\n"
            "from fairseq.models import ARCH_MODEL_REGISTRY\n"
            "from fairseq.criterions import CRITERION_REGISTRY\n"
            "print(json.dumps({'archs': sorted(ARCH_MODEL_REGISTRY), 'criterions': sorted(CRITERION_REGISTRY),"
            " 'cuda': torch.cuda.is_available(),"
            " 'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,"
            " 'torch': torch.__version__, 'fairseq': __import__('fairseq').__version__}))\n"
        )
        proc = subprocess.run([self.python, "-c", code, REPO, USER_DIR], capture_output=True, text=True, env=self.env)
        if proc.returncode != 0:
            raise BenchmarkError(f"cannot import fairseq with the plugin {USER_DIR} using {self.python}:\n"
                                 + proc.stderr[-3000:])
        reg = json.loads(proc.stdout.strip().splitlines()[-1])
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
        cfg = {k: v for k, v in vars(self.args).items()
               if k not in ("out", "directions", "models", "python", "no_plots", "generate_args", "beam",
                            "lenpen", "tune_lenpen", "lenpen_grid", "tune_eos_penalty", "eos_penalty_grid", "gen_batch_size", "threads", "num_workers",
                            "log_interval")}
        cfg["data_config"] = self.prep["config"]
        if os.path.exists(path):
            old = read_json(path)
            diff = sorted(k for k in set(old) | set(cfg) if old.get(k) != cfg.get(k))
            if diff:
                details = ", ".join(f"{k}: {old.get(k)!r} -> {cfg.get(k)!r}" for k in diff)
                raise BenchmarkError(
                    f"{self.out} holds a benchmark with other training settings ({details}); "
                    "use another --out, or delete it to start over")
        return path, cfg

    # ------------------------------------------------------------------ ETA
    def estimate_remaining(self, current, current_left, current_total=None):
        """Seconds left for the whole benchmark, and whether part of it could not be estimated yet.

        ``current`` is the (direction, slot) being worked on, with ``current_left`` seconds of training left
        (``current_total``: its whole expected training time, if known).  Pending trainings are estimated by
        the budget, else by the trainings measured so far (or the current one); decodings by those measured.
        """
        a = self.args
        train_times = [v["train"] for v in self.measured.values() if "train" in v]
        dec_times = [v["decode"] for v in self.measured.values() if "decode" in v]
        if train_times:
            per_train = sum(train_times) / len(train_times)
        else:
            per_train = current_total
        if a.budget_minutes:
            per_train = a.budget_minutes * 60.0 if per_train is None else max(per_train, a.budget_minutes * 60.0)
        per_decode = sum(dec_times) / len(dec_times) if dec_times else None
        left, unknown = current_left, False
        for job in self.jobs[self.jobs.index(current):]:
            done = self.measured.get(job, {})
            if job != current and "train" not in done:
                left += per_train or 0.0
                unknown |= per_train is None
            if "decode" not in done:
                left += per_decode or 0.0
                unknown |= per_decode is None
        return left, unknown

    def eta_text(self, current, current_left, current_total=None):
        left, unknown = self.estimate_remaining(current, current_left, current_total)
        return f"{'>' if unknown else '~'}{fmt_duration(left)}"

    # ------------------------------------------------------------------ subprocess runner
    def run_fairseq(self, tool, stats_path, fairseq_args, log_path, stdout_path=None, on_line=None):
        cmd = [self.python, INSTRUMENT, tool, stats_path, "--"] + fairseq_args
        with contextlib.ExitStack() as stack:
            log = stack.enter_context(open(log_path, "a", encoding="utf-8"))
            log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} $ {shlex.join(cmd)}\n")
            log.flush()
            out = stack.enter_context(open(stdout_path, "w", encoding="utf-8")) if stdout_path else None
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if out is None else out,
                                    stderr=subprocess.STDOUT if out is None else log,
                                    text=True, bufsize=1, env=self.env)
            try:
                if out is None:
                    for line in proc.stdout:
                        log.write(line)
                        log.flush()  # others may follow the log while it runs
                        if on_line is not None:
                            on_line(line)
                rc = proc.wait()
            except BaseException:
                # interrupted: stop fairseq cleanly (its checkpoints stay) before leaving
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                raise
        if rc != 0:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = "".join(f.readlines()[-25:])
            raise BenchmarkError(f"fairseq-{tool} failed (exit code {rc}); end of {log_path}:\n{tail}")
        return cmd

    # ------------------------------------------------------------------ stages
    def train(self, direction, slot, pos):
        jdir = self.job_dir(direction, slot)
        os.makedirs(jdir, exist_ok=True)
        done_path = os.path.join(jdir, "train_done.json")
        cmd_path = os.path.join(jdir, "train_command.json")
        log_path = os.path.join(jdir, "train.log")
        args = self.train_args(direction, slot)
        if os.path.exists(cmd_path):
            old = read_json(cmd_path)["fairseq_args"]
            if old != args:
                raise BenchmarkError(f"{jdir} was trained with another command line; delete it or use another --out\n"
                                     f"  was: {shlex.join(old)}\n  now: {shlex.join(args)}")
        else:
            write_json(cmd_path, {"fairseq_args": args})
        if os.path.exists(done_path):
            summary = read_json(done_path)
            self.measured.setdefault((direction, slot), {})["train"] = summary["train_wall_seconds"]
            say(f"[{pos}] {direction} {slot}: training already done ({summary['updates']} updates), skipped")
            return summary

        prior = parse_train_log(log_path)
        if prior["finished"] and os.path.exists(os.path.join(jdir, "checkpoints", "checkpoint_best.pt")):
            say(f"[{pos}] {direction} {slot}: fairseq-train had finished; collecting its results")
        else:
            self._train_process(direction, slot, pos, args, log_path, prior)
        summary = self.summarize_training(direction, slot)
        write_json(done_path, summary)
        self.measured.setdefault((direction, slot), {})["train"] = summary["train_wall_seconds"]
        return summary

    def _stats_files(self, jdir, kind):
        return sorted(glob.glob(os.path.join(jdir, f"{kind}_stats.*.json")),
                      key=lambda p: int(p.rsplit(".", 2)[-2]))

    def _train_process(self, direction, slot, pos, args, log_path, prior):
        a = self.args
        jdir = self.job_dir(direction, slot)
        runs = self._stats_files(jdir, "train")
        stats_path = os.path.join(jdir, f"train_stats.{len(runs)}.json")
        # time already spent in earlier (interrupted) runs, for the progress bar of a budgeted run
        spent = 0.0
        for p in runs:
            with contextlib.suppress(Exception):
                s = read_json(p)
                spent += (s.get("finished") or s.get("updated") or s["started"]) - s["started"]
        budget_s = a.budget_minutes * 60.0 if a.budget_minutes else None
        by_time = budget_s is not None
        total = budget_s if by_time else a.max_update
        what = f"[{pos}] {direction} {slot} ({self.slot_cfg[slot]['arch']})"
        if prior["runs"]:
            say(f"{what}: resuming from {os.path.join(jdir, 'checkpoints', 'checkpoint_last.pt')}")
        bar = tqdm(total=round(total), desc=f"{what} train", unit="s" if by_time else "upd",
                   dynamic_ncols=True, mininterval=1.0, file=sys.stderr)
        state = {"start": time.time(), "updates": prior["updates"], "valid": None, "loss": None,
                 "start_updates": None}

        def refresh():
            elapsed = time.time() - state["start"]
            if by_time:
                done = min(spent + elapsed, budget_s)
                left = max(budget_s - done, 0.0)
                if a.max_update and state["updates"] and state["start_updates"] is not None:
                    rate = (state["updates"] - state["start_updates"]) / max(elapsed, 1e-9)
                    if rate > 0:
                        left = min(left, (a.max_update - state["updates"]) / rate)
            else:
                done = state["updates"]
                base = state["start_updates"] or 0
                rate = (state["updates"] - base) / max(elapsed, 1e-9)
                left = (a.max_update - state["updates"]) / rate if rate > 0 else None
            bar.n = round(done)
            post = {"upd": state["updates"]}
            if state["loss"] is not None:
                post["loss"] = state["loss"]
            if state["valid"] is not None:
                post["valid_nll"] = state["valid"]
            total_est = None if left is None else spent + elapsed + left
            post["ETA all"] = self.eta_text((direction, slot), left or 0.0, total_est) if left is not None else "?"
            bar.set_postfix(post, refresh=False)
            bar.refresh()

        def on_line(line):
            m = LOADED_RE.search(line)
            if m:
                state["updates"] = int(m.group(2))
                state["start_updates"] = int(m.group(2))
            m = RECORD_RE.search(line)
            if not m:
                return
            with contextlib.suppress(json.JSONDecodeError):
                rec = json.loads(m.group(2))
                if m.group(1) == "train_inner":
                    state["updates"] = int(_num(rec.get("num_updates")) or state["updates"])
                    state["loss"] = rec.get("loss")
                    if state["start_updates"] is None:
                        state["start_updates"] = 0
                elif m.group(1) == "valid":
                    state["valid"] = rec.get("valid_nll_loss")
                refresh()

        try:
            self.run_fairseq("train", stats_path, args, log_path, on_line=on_line)
        finally:
            refresh()
            bar.close()

    def summarize_training(self, direction, slot):
        jdir = self.job_dir(direction, slot)
        log = parse_train_log(os.path.join(jdir, "train.log"))
        ckpt_dir = os.path.join(jdir, "checkpoints")
        for name in ("checkpoint_best.pt", "checkpoint_last.pt"):
            if not os.path.exists(os.path.join(ckpt_dir, name)):
                raise BenchmarkError(f"fairseq-train left no {name} in {ckpt_dir} (see {jdir}/train.log)")
        if not log["valid_curve"]:
            raise BenchmarkError(f"{jdir}/train.log has no validation record; was the budget too small to finish an epoch?")
        if log["params"] is None:
            raise BenchmarkError(f"{jdir}/train.log does not state the number of parameters")
        tokens = step_s = wall = 0.0
        updates_measured = 0
        rss, cuda = [], []
        for p in self._stats_files(jdir, "train"):
            s = read_json(p)
            tokens += s["train_tokens"]
            step_s += s["train_step_seconds"]
            updates_measured += s["updates"]
            wall += (s.get("finished") or s.get("updated") or s["started"]) - s["started"]
            if s.get("max_rss_bytes"):
                rss.append(s["max_rss_bytes"])
            if s.get("cuda_max_allocated_bytes"):
                cuda.append(s["cuda_max_allocated_bytes"])
        best = min(log["valid_curve"], key=lambda r: r["loss"])
        return {
            "parameters": log["params"],
            "parameters_trained": log["params_trained"],
            "updates": max(log["updates"], log["valid_curve"][-1]["updates"]),
            "epochs": log["valid_curve"][-1]["epoch"],
            "fairseq_runs": log["runs"],
            "resumed_at_updates": log["resumed_from"],
            "train_wall_seconds": wall,
            "train_step_seconds": step_s,
            "train_tokens_measured": int(tokens),
            "updates_measured": updates_measured,
            "train_tokens_per_second": tokens / step_s if step_s > 0 else None,
            "peak_train_rss_bytes": max(rss) if rss else None,
            "peak_train_cuda_bytes": max(cuda) if cuda else None,
            "valid_curve": log["valid_curve"],
            "best_valid_loss": best["loss"],
            "best_valid_nll_loss": best["nll_loss"],
            "best_valid_updates": best["updates"],
        }

    def select_checkpoint(self, direction, slot):
        a = self.args
        ckpt_dir = os.path.join(self.job_dir(direction, slot), "checkpoints")
        if a.average_best <= 1:
            return os.path.join(ckpt_dir, "checkpoint_best.pt"), "best validation loss"
        kept = sorted(glob.glob(os.path.join(ckpt_dir, "checkpoint.best_*.pt")))
        if not kept:
            raise BenchmarkError(f"no checkpoint.best_*.pt in {ckpt_dir} to average")
        out = os.path.join(self.job_dir(direction, slot), f"checkpoint_avg{len(kept)}.pt")
        if not os.path.exists(out):
            average_checkpoints(kept, out)
        return out, f"average of the {len(kept)} best on validation"

    def tune_lenpen(self, direction, slot, ckpt, pos):
        """``--tune-lenpen`` / ``--tune-eos-penalty``: the (lenpen, EOS penalty) of the best dev BLEU (one n-best
        beam search of valid per EOS penalty, re-ranked: scripts/tune_lenpen.py); ``(--lenpen, 0, None)``
        without them."""
        a = self.args
        if not (a.lenpen_grid or a.eos_penalty_grid):
            return a.lenpen, 0.0, None
        jdir = self.job_dir(direction, slot)
        path = os.path.join(jdir, "lenpen.json")
        key = {"checkpoint": ckpt, "grid": a.tune_lenpen, "beam": a.beam, "generate_args": a.generate_args}
        if a.eos_penalty_grid:
            key["eos_penalty_grid"] = a.eos_penalty_grid
            if not a.lenpen_grid:
                key["lenpen"] = a.lenpen
        if os.path.exists(path) and read_json(path)["key"] == key:
            doc = read_json(path)
            return doc["lenpen"], doc.get("eos_penalty", 0.0), doc["rows"]
        import tune_lenpen  # lazy: it imports this module's helpers

        eos_grid = a.eos_penalty_grid or [0.0]
        lenpens = a.lenpen_grid or [a.lenpen]
        say(f"[{pos}] {direction} {slot}: choosing lenpen {lenpens} x EOS penalty {eos_grid} on valid "
            f"({len(eos_grid)} {a.beam}-best search(es))")
        opts = argparse.Namespace(data=self.data, prep=self.prep, checkpoint=ckpt, subset="valid",
                                  direction=direction, beam=a.beam, batch_size=a.gen_batch_size,
                                  generate_args=a.generate_args, threads=a.threads or 1, python=self.python,
                                  lenpen=lenpens, eos_penalty=eos_grid, metric="bleu")
        rows, chosen, _ = tune_lenpen.tune(opts)
        eos_penalty = tune_lenpen.chosen_row(rows)["eos_penalty"]
        write_json(path, {"key": key, "lenpen": chosen, "eos_penalty": eos_penalty, "rows": rows})
        return chosen, eos_penalty, rows

    def decode(self, direction, slot, pos):
        jdir = self.job_dir(direction, slot)
        ckpt, how = self.select_checkpoint(direction, slot)
        lenpen, eos_penalty, dev_rows = self.tune_lenpen(direction, slot, ckpt, pos)
        args = self.generate_args(direction, slot, ckpt, lenpen, eos_penalty)
        tgt = direction.split("-")[1]
        refs = read_lines(os.path.join(self.data, self.prep["references"]["test"][tgt]))
        hyp_path = os.path.join(jdir, "test.hyp")
        done_path = os.path.join(jdir, "decode_done.json")
        if os.path.exists(done_path) and os.path.exists(hyp_path) and read_json(done_path)["fairseq_args"] == args:
            done = read_json(done_path)
            self.measured.setdefault((direction, slot), {})["decode"] = done["wall_seconds"]
            say(f"[{pos}] {direction} {slot}: decoding already done, skipped")
        else:
            left, unknown = self.estimate_remaining((direction, slot), 0.0)
            say(f"[{pos}] {direction} {slot}: decoding test ({len(refs)} sentences, beam {self.args.beam}) "
                       f"with {os.path.basename(ckpt)}; afterwards {'>' if unknown else '~'}{fmt_duration(left)} left")
            stats_path = os.path.join(jdir, "generate_stats.json")
            stdout_path = os.path.join(jdir, "generate.out")
            t0 = time.time()
            self.run_fairseq("generate", stats_path, args, os.path.join(jdir, "generate.log"), stdout_path=stdout_path)
            hyps = parse_generate_output(stdout_path, len(refs))
            speed = parse_generate_speed(stdout_path, os.path.join(jdir, "generate.log"))
            atomic_write(hyp_path, "".join(h + "\n" for h in hyps))
            stats = read_json(stats_path)
            done = {"fairseq_args": args, "checkpoint": ckpt, "checkpoint_selection": how, "lenpen": lenpen,
                    "eos_penalty": eos_penalty, "lenpen_dev": dev_rows,
                    "wall_seconds": time.time() - t0, **speed,
                    "peak_decode_rss_bytes": stats.get("max_rss_bytes"),
                    "peak_decode_cuda_bytes": stats.get("cuda_max_allocated_bytes")}
            write_json(done_path, done)
            self.measured.setdefault((direction, slot), {})["decode"] = done["wall_seconds"]
        hyps = read_lines(hyp_path)
        return done, score(hyps, refs)

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
        results = {d: [] for d in self.directions}
        for i, (direction, slot) in enumerate(self.jobs):
            pos = f"{i + 1}/{len(self.jobs)}"
            summary = self.train(direction, slot, pos)
            done, scores = self.decode(direction, slot, pos)
            c = self.slot_cfg[slot]
            res = {"slot": slot, "label": c["label"], "arch": c["arch"], "criterion": c["criterion"],
                   "extra_args": c["extra_args"], "direction": direction, **summary,
                   "checkpoint": os.path.relpath(done["checkpoint"], self.out),
                   "checkpoint_selection": done["checkpoint_selection"],
                   "lenpen": done.get("lenpen", self.args.lenpen), "eos_penalty": done.get("eos_penalty", 0.0),
                   "lenpen_dev": done.get("lenpen_dev"),
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

    def budget_text(self):
        a = self.args
        parts = []
        if a.max_update:
            parts.append(f"{a.max_update} updates")
        if a.budget_minutes:
            parts.append(f"{a.budget_minutes:g} minutes")
        return " or ".join(parts)

    # ------------------------------------------------------------------ outputs
    def hardware(self):
        cpu = platform.processor() or platform.machine()
        with contextlib.suppress(OSError):
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        sw = getattr(self, "software", {})
        return {"cpu": cpu, "logical_cpus": os.cpu_count(), "threads": self.args.threads or None,
                "gpu": sw.get("gpu"), "device": "cuda" if sw.get("cuda") else "cpu",
                "python": platform.python_version(), "torch": sw.get("torch"), "fairseq": sw.get("fairseq"),
                "platform": platform.platform()}

    def write_outputs(self, results, partial):
        a = self.args
        doc = {
            "complete": not partial,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": shlex.join([sys.executable] + sys.argv),
            "settings": {k: v for k, v in vars(a).items()},
            "budget": self.budget_text(),
            "hardware": self.hardware(),
            "data": self.prep,
            "results": results,
        }
        write_json(os.path.join(self.out, "results.json"), doc)
        atomic_write(os.path.join(self.out, "results.md"), markdown_report(doc))
        if not a.no_plots:
            plot(doc, self.out)


def _mib(x):
    return f"{x / 2**20:,.0f}" if x else "n/a"


def markdown_table(rows):
    """The results table of one direction; one row per model, every cell filled."""
    on_gpu = any(r.get("peak_train_cuda_bytes") for r in rows)
    mem = "GPU max alloc" if on_gpu else "RSS"
    head = ["model", "arch", "params", "updates", "BLEU", "TER", "chrF", "len ratio", "best valid nll",
            "train tok/s", "decode sent/s", "decode tok/s", f"peak train {mem} MiB", f"peak decode {mem} MiB",
            "train min", "lenpen"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
    for r in rows:
        tr_mem = r["peak_train_cuda_bytes"] if on_gpu else r["peak_train_rss_bytes"]
        de_mem = r["peak_decode_cuda_bytes"] if on_gpu else r["peak_decode_rss_bytes"]
        cells = [r["label"], f"`{r['arch']}`", f"{r['parameters']:,}", f"{r['updates']:,}",
                 f"{r['bleu']:.2f}", f"{r['ter']:.2f}", f"{r['chrf']:.2f}", f"{r['length_ratio']:.3f}",
                 f"{r['best_valid_nll_loss']:.3f}",
                 f"{r['train_tokens_per_second']:,.0f}" if r["train_tokens_per_second"] else "n/a",
                 f"{r['decode_sentences_per_second']:.2f}", f"{r['decode_tokens_per_second']:,.1f}",
                 _mib(tr_mem), _mib(de_mem), f"{r['train_wall_seconds'] / 60:.1f}", f"{r.get('lenpen', 1.0):g}"
                 + (f" (EOS penalty {r['eos_penalty']:g})" if r.get("eos_penalty") else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown_report(doc):
    hw = doc["hardware"]
    device = f"GPU {hw['gpu']}" if hw["device"] == "cuda" else f"CPU {hw['cpu']}, {hw['logical_cpus']} logical cores"
    if hw.get("threads"):
        device += f", {hw['threads']} thread(s) per process"
    out = [f"# Translation benchmark{'' if doc['complete'] else ' (partial: still running)'}", "",
           f"- command: `{doc['command']}`",
           f"- data: {doc['data']['config']} ({doc['data']['sentences']['train']:,} training pairs, "
           f"test {doc['data']['sentences']['test']:,} sentences)",
           f"- budget per model: {doc['budget']}; {device}; torch {hw['torch']}, fairseq {hw['fairseq']}",
           "- BLEU/TER/chrF: sacrebleu on tokenised lowercased text (`-tok none -lc`), BPE removed; "
           "len ratio = hypothesis/reference length; valid nll in bits per target token (fairseq, base 2)",
           "- train tok/s: target tokens per second of optimisation steps; decode: fairseq-generate's timer, "
           f"beam {doc['settings']['beam']}", ""]
    for direction, rows in doc["results"].items():
        if not rows:
            continue
        out += [f"## {direction}", "", markdown_table(rows)]
        sig = rows[0]["signatures"]
        out += [f"sacrebleu: `{sig['bleu']}`, `{sig['ter']}`, `{sig['chrf']}`", ""]
    return "\n".join(out)


def plot(doc, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for direction, rows in doc["results"].items():
        if not rows:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for r in rows:
            ups = [p["updates"] for p in r["valid_curve"]]
            axes[0].plot(ups, [p["loss"] for p in r["valid_curve"]], marker="o", ms=3, label=r["label"])
            axes[1].plot(ups, [p["nll_loss"] for p in r["valid_curve"]], marker="o", ms=3, label=r["label"])
        axes[0].set_title("validation loss (training criterion)")
        axes[1].set_title("validation NLL (bits per target token)")
        for ax in axes:
            ax.set_xlabel("updates")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"{direction}: validation curves")
        fig.tight_layout()
        _save(fig, os.path.join(out_dir, f"valid_loss.{direction}.png"))
        plt.close(fig)

        labels = [r["label"] for r in rows]
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, key, title in zip(axes, ("train_tokens_per_second", "decode_sentences_per_second",
                                         "decode_tokens_per_second"),
                                  ("training target tokens/s", "decoding sentences/s", "decoding tokens/s")):
            vals = [r[key] or 0.0 for r in rows]
            bars = ax.bar(range(len(rows)), vals, color=[f"C{i}" for i in range(len(rows))])
            ax.bar_label(bars, fmt="%.1f")
            ax.margins(y=0.15)  # room for the labels
            ax.set_xticks(range(len(rows)), labels, rotation=15, ha="right")
            ax.set_title(title)
        fig.suptitle(f"{direction}: throughput ({doc['hardware']['device']})")
        fig.tight_layout()
        _save(fig, os.path.join(out_dir, f"throughput.{direction}.png"))
        plt.close(fig)


def _save(fig, path):
    tmp = f"{path}.tmp{os.getpid()}.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- CLI
def get_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("data and output")
    g.add_argument("--data", required=True, help="directory made by examples/multi30k/prepare.sh")
    g.add_argument("--out", required=True, help="output directory (reused to resume)")
    g.add_argument("--directions", default="de-en", help="comma-separated, e.g. de-en,en-de")
    g.add_argument("--models", default="transformer,dhmm0,dhmm1", help="comma-separated slots")
    g.add_argument("--arch", action="append", metavar="SLOT=ARCH", help="architecture of a slot")
    g.add_argument("--criterion", action="append", metavar="SLOT=NAME", help="criterion of a slot")
    g.add_argument("--slot-args", action="append", metavar="SLOT=ARGS",
                   help="extra fairseq-train arguments of one slot, e.g. 'dhmm1=--lexicon-chunk-size 16'")
    g = p.add_argument_group("model size (identical for every slot; encoder and decoder alike)")
    g.add_argument("--embed-dim", type=int, default=256)
    g.add_argument("--ffn-dim", type=int, default=1024)
    g.add_argument("--layers", type=int, default=3)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--no-share-embeddings", action="store_true", help="do not pass --share-all-embeddings")
    g = p.add_argument_group("training (identical for every slot)")
    g.add_argument("--max-update", type=int, default=0, help="stop after N updates (0: no limit)")
    g.add_argument("--budget-minutes", type=float, default=0.0,
                   help="stop after M minutes of training per model (fairseq --stop-time-hours; 0: no limit)")
    g.add_argument("--max-tokens", type=int, default=4096)
    g.add_argument("--lr", type=float, default=5e-4)
    g.add_argument("--warmup-updates", type=int, default=1000)
    g.add_argument("--dropout", type=float, default=0.3)
    g.add_argument("--label-smoothing", type=float, default=0.1)
    g.add_argument("--weight-decay", type=float, default=1e-4)
    g.add_argument("--clip-norm", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--seeds", default="",
                   help="comma-separated seeds, e.g. 1,2: one benchmark per seed in OUT/seed-N, then mean and "
                        "spread over seeds in OUT/summary.md and summary.json (overrides --seed)")
    g.add_argument("--validate-interval-updates", type=int, default=0,
                   help="validate and save every N updates besides every epoch (0: every epoch only)")
    g.add_argument("--average-best", type=int, default=1,
                   help="decode the parameter average of the N best checkpoints on validation (1: the best)")
    g.add_argument("--fp16", action="store_true", help="pass --fp16 to fairseq (CUDA only)")
    g.add_argument("--train-args", default="", help="extra fairseq-train arguments for every slot")
    g = p.add_argument_group("decoding")
    g.add_argument("--beam", type=int, default=5)
    g.add_argument("--lenpen", type=float, default=1.0)
    g.add_argument("--tune-lenpen", default="", metavar="GRID",
                   help="choose each model's lenpen on valid (best BLEU) among these comma-separated values, e.g. "
                        "0.6,0.8,1.0,1.2,1.4 (one n-best search per model: scripts/tune_lenpen.py); overrides --lenpen")
    g.add_argument("--tune-eos-penalty", default="", metavar="GRID",
                   help="also choose an EOS penalty on valid (--task translation_eos_penalty: it lengthens the "
                        "search itself, which lenpen cannot), jointly with --tune-lenpen's grid, e.g. 0,1,2,3,4 "
                        "(one n-best search per value)")
    g.add_argument("--gen-batch-size", type=int, default=128)
    g.add_argument("--generate-args", default="", help="extra fairseq-generate arguments")
    g = p.add_argument_group("execution")
    g.add_argument("--threads", type=int, default=0, help="OMP/MKL threads of each fairseq process (0: torch default)")
    g.add_argument("--num-workers", type=int, default=0, help="fairseq data loader workers for training")
    g.add_argument("--log-interval", type=int, default=10, help="fairseq log interval (updates)")
    g.add_argument("--python", default=None, help="interpreter with fairseq (default: this one)")
    g.add_argument("--no-plots", action="store_true")
    return p


def parse_seeds(text):
    if not text.strip():
        return []
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchmarkError(f"--seeds expects comma-separated integers, got '{text}'") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise BenchmarkError(f"--seeds must list distinct integers, got '{text}'")
    return seeds


def run_seeds(args, seeds):
    """One benchmark per seed in OUT/seed-N (each resumable on its own), then the summary over seeds."""
    import copy

    if HERE not in sys.path:  # imported as a module rather than run as a script
        sys.path.insert(0, HERE)
    import seed_summary

    out = os.path.abspath(args.out)
    docs = {}
    for k, seed in enumerate(seeds):
        say(f"=== seed {seed} ({k + 1}/{len(seeds)})")
        one = copy.copy(args)
        one.seed, one.seeds, one.out = seed, "", os.path.join(out, f"seed-{seed}")
        Benchmark(one).run()
        docs[seed] = read_json(os.path.join(one.out, "results.json"))
    summary = seed_summary.aggregate(docs)
    hw = docs[seeds[0]]["hardware"]
    device = f"GPU {hw['gpu']}" if hw["device"] == "cuda" else f"CPU {hw['cpu']}"
    notes = [f"command: `{shlex.join([sys.executable] + sys.argv)}`",
             f"data: {docs[seeds[0]]['data']['config']}; budget per model: {docs[seeds[0]]['budget']}; {device}",
             "per-seed tables: " + ", ".join(f"seed-{s}/results.md" for s in seeds)]
    write_json(os.path.join(out, "summary.json"), {"seeds": seeds, "command": notes[0], "summary": summary})
    atomic_write(os.path.join(out, "summary.md"), seed_summary.markdown(summary, notes=notes))
    say(f"summary over seeds {','.join(map(str, seeds))}: {os.path.join(out, 'summary.md')}")
    return summary


def _interrupt_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # kill / a batch system's TERM: stop the fairseq child cleanly, as on Ctrl-C


def main(argv=None):
    args = get_parser().parse_args(argv)
    for name in ("max_update", "max_tokens", "embed_dim", "ffn_dim", "layers", "heads", "beam", "gen_batch_size",
                 "average_best", "log_interval"):
        if getattr(args, name) < (0 if name == "max_update" else 1):
            print(f"benchmark_translation.py: error: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    if args.budget_minutes < 0 or args.threads < 0 or args.num_workers < 0:
        print("benchmark_translation.py: error: --budget-minutes, --threads and --num-workers must be >= 0",
              file=sys.stderr)
        return 2
    for flag, grid in (("--tune-lenpen", "lenpen_grid"), ("--tune-eos-penalty", "eos_penalty_grid")):
        text = getattr(args, flag[2:].replace("-", "_"))
        try:
            setattr(args, grid, [float(x) for x in text.split(",") if x.strip()])
        except ValueError:
            print(f"benchmark_translation.py: error: {flag} expects comma-separated numbers, got '{text}'",
                  file=sys.stderr)
            return 2
        if not all(math.isfinite(x) for x in getattr(args, grid)):
            print(f"benchmark_translation.py: error: {flag}: values must be finite, got '{text}'", file=sys.stderr)
            return 2
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt_on_sigterm)
    try:
        seeds = parse_seeds(args.seeds)
        if seeds:
            run_seeds(args, seeds)
        else:
            Benchmark(args).run()
    except BenchmarkError as e:
        print(f"benchmark_translation.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbenchmark_translation.py: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
