#!/usr/bin/env python
"""Run a fairseq command line tool in this process and measure it.

    python benchmarks/fairseq_instrumented.py train STATS.json -- <fairseq-train arguments>
    python benchmarks/fairseq_instrumented.py generate STATS.json -- <fairseq-generate arguments>

The tool runs exactly as its console script would (``fairseq_cli.<tool>.cli_main``); in addition this wrapper
writes STATS.json (atomically, every few seconds and at exit) with

* ``max_rss_bytes``: peak resident set size of this process (``getrusage``), plus its reaped children;
* ``cuda_max_allocated_bytes``: ``torch.cuda.max_memory_allocated()`` when CUDA is in use, else null;
* for ``train``: ``train_step_seconds``, ``train_tokens`` and ``updates``, summed over the calls of
  ``fairseq.trainer.Trainer.train_step``: the wall time of the optimisation steps alone (no validation, no
  checkpoint writing, no start-up) and the number of target tokens they consumed (the ``ntokens`` of the
  samples, what fairseq calls words per batch).  A step is timed after a CUDA synchronisation so that
  asynchronous kernels are charged to it;
* ``cpu_seconds``: CPU time (user + system) of this process and its reaped children, so far;
* for ``train``: ``validations``, one record per validation (``updates``, ``epoch``, ``value`` of the
  ``--best-checkpoint-metric``, ``elapsed_s``: wall seconds since this process started, when the validation
  began, ``cpu_s``, ``valid_seconds``: how long it took, ``valid_seconds_before``: the validations' seconds
  before it), ``valid_seconds`` (all validations), and ``stop_reason`` ``"patience"`` when fairseq's
  ``--patience`` stopped the run.

Early stopping resumes exactly: fairseq 0.12 keeps its ``--patience`` counter (the best value and the number
of validations without improvement since, ``fairseq_cli.train.should_stop_early``) in function attributes
only, so a resumed run would start counting afresh and stop later than an uninterrupted one.  The wrapper
stores the counter in every checkpoint's ``extra_state`` (``hmm_nmt_patience``) and restores it when
fairseq loads a checkpoint, so a run resumed from ``checkpoint_last.pt`` stops at the same validation.

A plateau ends a pruned phase before it ends the run (the plugin's rule, ``hmm_nmt.compat.topk_plateau``): the
updates where a ``--lexicon-topk-schedule`` step started early go to STATS.json (``topk_switches``).

Stats of an interrupted run survive up to the last periodic write, so a benchmark that resumes training
from a checkpoint can add up the measured steps of every run.

Testing hook: with ``FAIRSEQ_INSTRUMENTED_INTERRUPT_AT=N`` in the environment, the wrapper sends SIGINT to its
parent process (the benchmark) once N updates are done, i.e. it presses Ctrl-C at a known point so that
the interruption and resumption path can be tested deterministically.
"""
import atexit
import json
import os
import resource
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's packages
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402

TOOLS = ("train", "generate")
WRITE_EVERY_S = 5.0


class _Stats:
    def __init__(self, path, tool):
        self.path = path
        self.data = {
            "tool": tool,
            "argv": None,
            "started": time.time(),
            "updated": None,
            "finished": None,
            "exit_code": None,
            "max_rss_bytes": None,
            "cuda_max_allocated_bytes": None,
            "cpu_seconds": None,
            "train_step_seconds": 0.0,
            "train_tokens": 0,
            "updates": 0,
        }
        self._last_write = 0.0

    def write(self, force=False):
        now = time.time()
        if not force and now - self._last_write < WRITE_EVERY_S:
            return
        self._last_write = now
        self.data["updated"] = now
        self.data["max_rss_bytes"] = _max_rss_bytes()
        self.data["cuda_max_allocated_bytes"] = _cuda_max_allocated()
        self.data["cpu_seconds"] = _cpu_seconds()
        atomic_write(self.path, json.dumps(self.data, indent=1))


def _max_rss_bytes():
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    scale = 1 if sys.platform == "darwin" else 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # e.g. data loader workers
    return int(max(own, children) * scale)


def _cpu_seconds():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cuda_max_allocated():
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return int(max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count())))


def _instrument_train_step(stats):
    import torch
    from fairseq.trainer import Trainer

    original = Trainer.train_step
    interrupt_at = int(os.environ.get("FAIRSEQ_INSTRUMENTED_INTERRUPT_AT", "0") or 0)

    def _sync():
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def train_step(self, samples, *args, **kwargs):
        ntokens = sum(int(s.get("ntokens", 0)) for s in samples if s)
        _sync()
        t0 = time.perf_counter()
        out = original(self, samples, *args, **kwargs)
        _sync()
        stats.data["train_step_seconds"] += time.perf_counter() - t0
        if out is not None:  # None: step skipped (OOM, fp16 overflow); its time still counts
            stats.data["train_tokens"] += ntokens
            stats.data["updates"] += 1
        stats.write()
        if interrupt_at and self.get_num_updates() == interrupt_at:
            os.kill(os.getppid(), signal.SIGINT)
        return out

    Trainer.train_step = train_step


PATIENCE_KEY = "hmm_nmt_patience"


def _plugin_switches():
    # recorded by the plugin (imported by fairseq as --user-dir, after this wrapper started)
    plateau = sys.modules.get("hmm_nmt.compat.topk_plateau")
    return plateau.switches() if plateau is not None else []


def _instrument_validation_and_patience(stats):
    """Record every validation, and make fairseq's --patience counter survive a resume (module docstring)."""
    from fairseq.trainer import Trainer
    from fairseq_cli import train as train_cli

    stats.data.update(validations=[], valid_seconds=0.0, stop_reason=None, topk_switches=[])
    original_validate = train_cli.validate
    original_stop = train_cli.should_stop_early
    original_save, original_load = Trainer.save_checkpoint, Trainer.load_checkpoint

    def validate(cfg, trainer, task, epoch_itr, subsets, *args, **kwargs):
        t0 = time.time()
        rec = {"updates": trainer.get_num_updates(), "epoch": epoch_itr.epoch,
               "elapsed_s": t0 - stats.data["started"], "cpu_s": _cpu_seconds(),
               "valid_seconds_before": stats.data["valid_seconds"]}
        out = original_validate(cfg, trainer, task, epoch_itr, subsets, *args, **kwargs)
        rec["valid_seconds"] = time.time() - t0
        rec["value"] = None if not out or out[0] is None else float(out[0])
        stats.data["valid_seconds"] += rec["valid_seconds"]
        stats.data["validations"].append(rec)
        stats.data["topk_switches"] = _plugin_switches()
        stats.write(force=True)
        return out

    def should_stop_early(cfg, valid_loss):
        stop = original_stop(cfg, valid_loss)
        if stop:
            stats.data["stop_reason"] = "patience"
            stats.write(force=True)
        return stop

    def save_checkpoint(self, filename, extra_state):
        counter = train_cli.should_stop_early  # the original keeps its state on whatever the module name holds
        if hasattr(counter, "best"):
            extra_state = dict(extra_state, **{PATIENCE_KEY: {"best": counter.best,
                                                              "num_runs": getattr(counter, "num_runs", 0)}})
        stats.data["topk_switches"] = _plugin_switches()
        return original_save(self, filename, extra_state)

    def load_checkpoint(self, *args, **kwargs):
        extra_state = original_load(self, *args, **kwargs)
        saved = (extra_state or {}).get(PATIENCE_KEY)
        if saved is not None:
            train_cli.should_stop_early.best = saved["best"]
            train_cli.should_stop_early.num_runs = saved["num_runs"]
        stats.data["topk_switches"] = _plugin_switches()
        return extra_state

    train_cli.validate = validate
    train_cli.should_stop_early = should_stop_early
    Trainer.save_checkpoint, Trainer.load_checkpoint = save_checkpoint, load_checkpoint


def restore_ctrl_c():
    """Let SIGINT interrupt this process even when it was started with SIGINT ignored (``nohup cmd &``, batch
    jobs: Python then leaves it ignored): the benchmark stops fairseq cleanly with SIGINT, its checkpoints kept."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[0] not in TOOLS or argv[2] != "--":
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        sys.stderr.write(f"error: expected '{{{','.join(TOOLS)}}} STATS.json -- ARGS...', got {argv[:3]}\n")
        return 2
    tool, stats_path, tool_args = argv[0], argv[1], argv[3:]
    restore_ctrl_c()
    stats = _Stats(stats_path, tool)
    stats.data["argv"] = tool_args

    def _final():
        stats.data["finished"] = time.time()
        if tool == "train":
            stats.data["topk_switches"] = _plugin_switches()
        stats.write(force=True)

    atexit.register(_final)
    if tool == "train":
        from fairseq_cli import train as module

        _instrument_train_step(stats)
        _instrument_validation_and_patience(stats)
    else:
        from fairseq_cli import generate as module
    sys.argv = [f"fairseq-{tool}"] + tool_args
    try:
        module.cli_main()
    except SystemExit as e:
        stats.data["exit_code"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        raise
    stats.data["exit_code"] = 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
