"""Stages 3 and 5 of ``hmm-nmt-align-corpus``: fairseq-train's command line for each direction of each seed
(the first pass, or the second toward the first pass's links) and the trainers run side by side.

The trainer is a parameter of :func:`train`: ``launch(cmd, log, env)`` starts one command line and returns its
process (:func:`popen_trainer`; a test passes a fake that writes a checkpoint and a log)."""
import os
import re
import signal
import subprocess
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple

from hmm_nmt_align.base.heap import trainer_env

from .device import _bf16_training, _gpus
from .model_dir import GUIDE_DATA, CorpusError, ModelDir, _log, guided


def _train_cmd(md: ModelDir, opts, name: str, max_update: int, budget: Optional[Tuple[float, float]] = None,
               stage: str = "train") -> List[str]:
    """fairseq-train's command line for the direction in folder ``name`` (``fwd``, ``rev``, ``fwd.2``, ...: its
    seed is --seed plus the member's index); ``budget``: (the clock's hours where --time-limit starts, fairseq's
    cumulative hours where it stops). ``stage="guide"``: the second pass, in ``guided(name)``, from the first
    pass's checkpoint toward the links of ``train.align.*``, at half the learning rate and warm-up, on the sample
    of ``guide-bin/`` where stage 4 made one."""
    from hmm_nmt_align.plugin import plugin_dir

    member = next(k for k, pair in enumerate(md.members(opts.seeds)) if name in pair)
    s, t = ("src", "tgt") if name.startswith("fwd") else ("tgt", "src")
    guide = stage == "guide"
    data = md.file(GUIDE_DATA if guide and "sample" in md.data["done"]["links"] else "bin")
    cmd = [sys.executable, "-m", "fairseq_cli.train", data, "--source-lang", s, "--target-lang", t,
           "--user-dir", plugin_dir(), "--arch", "transformer_dhmm_first_order", "--share-all-embeddings",
           "--encoder-layers", str(opts.layers), "--decoder-layers", str(opts.layers),
           "--encoder-embed-dim", str(opts.embed_dim), "--decoder-embed-dim", str(opts.embed_dim),
           "--encoder-ffn-embed-dim", str(opts.ffn_dim), "--decoder-ffn-embed-dim", str(opts.ffn_dim),
           "--encoder-attention-heads", str(opts.heads), "--decoder-attention-heads", str(opts.heads),
           "--dropout", str(opts.dropout), "--criterion", "dhmm_label_smoothed_cross_entropy",
           "--label-smoothing", str(opts.label_smoothing), "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
           "--lr", str(opts.lr / 2 if guide else opts.lr),
           *_schedule(opts, max_update, budget),
           "--warmup-updates", str(max(1, opts.warmup_updates // 2) if guide else opts.warmup_updates),
           "--max-tokens", str(opts.max_tokens), "--max-update", str(max_update), "--seed", str(opts.seed + member),
           "--save-dir", md.file(guided(name) if guide else name), "--no-epoch-checkpoints",
           # the optimizer state is kept: fairseq restores the update count from it
           "--num-workers", "0", "--required-batch-size-multiple", "1", "--lexicon", opts.lexicon,
           "--target-context", opts.target_context,
           "--skip-invalid-size-inputs-valid-test", "--max-source-positions", "1024",
           "--max-target-positions", "1024", "--log-format", "json", "--log-interval", "10", "--no-progress-bar"]
    if budget is not None:
        cmd += ["--stop-time-hours", str(budget[1])]
    if guide:  # a fresh optimizer and update count; a rerun resumes from the folder's own checkpoint_last.pt
        cmd += ["--finetune-from-model", md.checkpoint(name, "train")]
        if md.data["done"]["links"]["links"]:
            cmd += ["--load-alignments", "--alignment-guide-weight", str(opts.guide_weight)]
    if opts.patience:
        cmd += ["--patience", str(opts.patience), "--validate-interval-updates", str(opts.validate_interval),
                "--save-interval-updates", str(opts.validate_interval)]
    else:
        cmd += ["--disable-validation", "--save-interval-updates", "200", "--keep-interval-updates", "1"]
    if opts.cpu:
        cmd.append("--cpu")
    if _bf16_training(opts):  # CPU autocast (hmm_nmt.compat.cpu_bf16), the softmax lexicon's matmuls too
        cmd += ["--bf16", "--lexicon-dtype", "bf16"]
    return cmd


def _schedule(opts, max_update: int, budget: Optional[Tuple[float, float]] = None) -> List[str]:
    """fairseq's scheduler flags: ``linear`` decays to 0 at ``max_update`` (after --continue, the new total), or
    with --time-limit at whichever of the updates and the hours runs out first (the plugin's budget_linear)."""
    if opts.lr_schedule == "linear" and budget is not None:
        return ["--lr-scheduler", "budget_linear", "--total-num-update", str(max_update),
                "--budget-hours", str(opts.time_limit), "--budget-start-hours", str(budget[0])]
    if opts.lr_schedule == "linear":
        return ["--lr-scheduler", "polynomial_decay", "--power", "1", "--end-learning-rate", "0",
                "--total-num-update", str(max_update)]
    return ["--lr-scheduler", "inverse_sqrt"]



def _direction_env(opts, k: int, env: dict) -> dict:
    """The environment of direction k's trainer: with two GPUs or more, one GPU each (the k-th visible one)."""
    if _gpus(opts) < 2:
        return env
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] \
        or [str(d) for d in range(_gpus(opts))]
    return dict(env, CUDA_VISIBLE_DEVICES=visible[k % len(visible)])



_UPDATES = re.compile(r'"(?:train_)?num_updates": "(\d+)"')


def _last_update(log: str) -> int:
    """The last update count fairseq-train logged (train_inner lines and epoch summaries, --log-format json)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            return max((int(m) for m in _UPDATES.findall(f.read())), default=0)
    except OSError:
        return 0


def _hours_so_far(md: ModelDir, name: str) -> Tuple[float, float]:
    """A direction's training hours in its checkpoint_last.pt: budget_linear's own clock and fairseq's
    cumulative training time (0 where the checkpoint has none or cannot be read: it trains again). A checkpoint
    that would run code when unpickled is refused: a model directory is what users download and share."""
    from hmm_nmt_align.safe_checkpoint import CheckpointError, UnsafeCheckpointError, load_checkpoint_state

    try:
        state = load_checkpoint_state(md.file(name, "checkpoint_last.pt"))
    except UnsafeCheckpointError as e:
        raise CorpusError(f"--model-dir {md.path}: {e}") from None
    except (CheckpointError, OSError, RuntimeError, EOFError):
        return 0.0, 0.0
    if not isinstance(state, dict):
        return 0.0, 0.0
    lr_state = (state.get("optimizer_history") or [{}])[-1].get("lr_scheduler_state") or {}
    fairseq_seconds = (state.get("extra_state") or {}).get("previous_training_time", 0.0)
    return float(lr_state.get("seconds", 0.0)) / 3600, float(fairseq_seconds) / 3600


def _targets(md: ModelDir, opts) -> dict:
    """Each direction's update target and, with --time-limit, its budget (see _train_cmd): a new model trains
    --max-update updates (or --time-limit hours); --continue, that many more than the direction has."""
    out = {}
    for name in (n for pair in md.members(opts.seeds) for n in pair):
        stage = md.data.get("done", {}).get(f"train.{name}")
        if opts.cont:
            target = stage.get("updates", stage["max_update"]) + opts.max_update
            if "from_hours" not in stage:  # where this --continue starts: a rerun of an interrupted one resumes it
                stage["from_hours"] = list(_hours_so_far(md, name))
            clock, hours = stage["from_hours"]
            out[name] = (target, (clock, hours + opts.time_limit) if opts.time_limit else None)
        else:
            out[name] = (opts.max_update, (0.0, opts.time_limit) if opts.time_limit else None)
    return out


def _width(opts, pending: int) -> int:
    """Trainers run side by side: one per GPU with two or more, two on one GPU, else up to one per thread (at
    least the two directions of a seed)."""
    gpus = _gpus(opts)
    if gpus >= 2:
        return min(pending, gpus)
    return min(pending, 2 if gpus == 1 else max(2, opts.threads))


def _describe(md: ModelDir, opts, names: Sequence[str]) -> str:
    """``both directions``, ``the rev direction``, ``seeds 2-3, both directions``, ..."""
    pairs = md.members(opts.seeds)
    seeds = sorted({k for k, pair in enumerate(pairs) for n in names if n in pair})
    both = all(n in names for k in seeds for n in pairs[k])
    what = "both directions" if both else ", ".join(f"the {n} direction" for n in names)
    if len(pairs) == 1:
        return what
    numbers = [str(opts.seed + k) for k in seeds]
    run = numbers[0] if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}" \
        if len(numbers) == seeds[-1] - seeds[0] + 1 else ",".join(numbers)
    return f"seed{'s' if len(numbers) > 1 else ''} {run}, {what}"


def _die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when its parent dies, however it dies (Linux
    ``PR_SET_PDEATHSIG``): a killed command leaves no trainer behind to train beside its rerun."""
    def arm() -> None:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # not Linux: the process group is all there is
            return
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)
    return arm


def popen_trainer(cmd: List[str], log, env: dict) -> subprocess.Popen:
    """Start one trainer, its output appended to the open file ``log``, in its own session: Ctrl-C reaches it as
    the SIGTERM :func:`train` sends its process group; it dies with this process (:func:`_die_with`)."""
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            preexec_fn=_die_with(os.getpid()))


def train(md: ModelDir, opts, targets: dict, progress: bool, stage: str = "train",
          launch: Callable[[List[str], object, dict], subprocess.Popen] = popen_trainer) -> None:
    """Stage 3 (or with ``stage="guide"`` stage 5): every direction of every seed (``targets``: see _targets),
    ``_width`` trainers side by side with the threads split between them; a seed's two directions start together.
    ``launch(cmd, log, env)`` starts one (:func:`popen_trainer`)."""
    pending = [name for pair in md.members(opts.seeds) for name in pair
               if not (md.done(f"{stage}.{name}")
                       and md.data["done"][f"{stage}.{name}"].get("max_update") == targets[name][0])]
    if not pending:
        return
    folder = guided if stage == "guide" else (lambda name: name)
    width = _width(opts, len(pending))
    threads = max(1, opts.threads // width)
    env = trainer_env(dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads)))
    which = _describe(md, opts, pending)
    where = "one GPU each" if _gpus(opts) >= 2 and width > 1 else \
        f"{threads} thread{'s' if threads > 1 else ''} each" + (f", {width} at a time" if width < len(pending) else "")
    goal = f"{targets[pending[0]][0] if stage == 'guide' else opts.max_update}" \
        f"{' more' if opts.cont and stage == 'train' else ''} updates each"
    if opts.time_limit and stage == "train":
        h = opts.time_limit
        goal += ", at most " + (f"{h:g} h" if h >= 1 else f"{round(h * 60, 2):g} min" if h >= 1 / 60
                                else f"{round(h * 3600, 2):g} s")
    what = "training the first-order direct HMM" if stage == "train" else \
        "training on toward the first pass's links (second pass)"
    _log(f"{what}, {which} ({goal}, {where}); log: {md.file(folder(pending[0]), 'train.log')}")
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(targets[name][0] for name in pending),
                   desc=f"{'training' if stage == 'train' else 'second pass,'} {which}", unit="upd", file=sys.stderr)
    running, failed = {}, []  # running: name -> (process, log, slot)

    def start(name: str) -> None:
        slot = min(set(range(width)) - {r[2] for r in running.values()})
        os.makedirs(md.file(folder(name)), exist_ok=True)
        log = md.file(folder(name), "train.log")
        with open(log, "a", encoding="utf-8") as f:
            running[name] = (launch(_train_cmd(md, opts, name, *targets[name], stage=stage), f,
                                    _direction_env(opts, slot, env)), log, slot)

    queue = list(pending)
    try:
        while queue or running:
            while queue and len(running) < width and not failed:
                start(queue.pop(0))
            for name, (p, log, _) in list(running.items()):
                if p.poll() is not None:
                    del running[name]
                    if p.returncode != 0:
                        failed.append((name, log))
                    else:
                        md.mark(f"{stage}.{name}", max_update=targets[name][0], updates=_last_update(log),
                                precision="bf16" if _bf16_training(opts) else "fp32")
            if failed and not running:
                break
            if bar is not None:
                bar.n = sum(min(_last_update(md.file(folder(name), "train.log")), targets[name][0])
                            for name in pending if name not in queue)
                bar.refresh()
            if running:
                time.sleep(2)
    except KeyboardInterrupt:
        for p, _, _ in running.values():
            if p.poll() is None:  # SIGTERM: a trainer started by a background job ignores SIGINT
                os.killpg(p.pid, signal.SIGTERM)
        for p, _, _ in running.values():
            p.wait()
        raise
    finally:
        if bar is not None:
            bar.close()
    for name, log in failed:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = [x for x in f.read().splitlines() if x.strip()][-3:]
        raise CorpusError(f"training {name} failed (log: {log}): {' | '.join(tail)}")
