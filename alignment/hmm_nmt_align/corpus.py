"""``hmm-nmt-align-corpus``: word alignments of a parallel corpus in one command, with a reusable model.

    hmm-nmt-align-corpus -s corpus.en -t corpus.fr --model-dir model/ -o corpus.align [-f fwd.align -r rev.align]
    hmm-nmt-align-corpus -i corpus.en-fr --model-dir model/ -o corpus.align          # "src ||| tgt" lines
    hmm-nmt-align-corpus -s new.en -t new.fr --model-dir model/ --align-only -o new.align
    hmm-nmt-align-corpus -s more.en -t more.fr --model-dir model/ --continue --max-update 2000 -o more.align

Input: word-tokenised, line-parallel text. Output: word-level Pharaoh links (``i-j``, source word i, target word
j, 0-based), one line per input line, in input order; a line with an empty side gives an empty line. The
stages, each recorded in ``DIR/manifest.json`` so that rerunning the same command continues where it stopped:

1. ``codes``: joint subword-nmt BPE learned on both sides (``--merges``, default 4,000: chosen on the Hansards
   trial pairs among 1,000, 2,000 and 4,000);
2. ``bin/``: the segmented pairs binarized with one joined dictionary (``--valid-lines`` pairs held out for
   ``--patience``);
3. ``fwd/``, ``rev/``: the first-order direct HMM (the separable lexicon; 4,800 updates or ``--time-limit``,
   the learning rate decaying linearly to 0) trained in both directions side by side, the threads (or two GPUs)
   split between them (fairseq-train resumes from ``checkpoint_last.pt``); with ``--seeds N``, N models per
   direction (``fwd``, ``fwd.2``, ...; seeds ``--seed``, ``--seed`` + 1, ...);
4. ``bin/train.align.*``: the training pairs aligned by this first pass (both directions merged as in stage 6,
   the seeds' posteriors averaged), as piece links;
5. ``fwd.guided/``, ``rev.guided/``, ...: the second pass (``--guide-updates``, default 1,200): each model trains
   on from its first-pass checkpoint with ``--alignment-guide-weight`` (``--guide-weight``, default 4) times
   -log p(links | E, F) added to its loss, i.e. toward the links both directions agreed on, which the two
   directions alone do not see (``--guide-updates 0``: one pass, stages 4-5 skipped);
6. the alignment: the posteriors of both directions (each the mean over the seeds) merged (``--symmetrize mean --links threshold:0.5``, pooled to
   words: the setting chosen on the Hansards trial pairs), written atomically.

``--align-only`` aligns with a finished model directory and trains nothing; ``--continue`` trains it further
(``--max-update`` more updates) on the given text, segmented with its codes and dictionary. Errors (bad UTF-8,
different line counts, a missing ``|||``, an output that is an input) name the file and line, exit 2, and
write nothing; Ctrl-C exits 130, leaving the model directory resumable and no partial output.
"""
import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from typing import List, Optional, Sequence, Tuple

from hmm_nmt_align.base.atomic import atomic_output, atomic_write

MANIFEST = "manifest.json"
# how the directions are merged and the links read off (chosen on the Hansards trial pairs); hmm-nmt-align
# --model-dir uses the same
DEFAULT_SYMMETRIZE, DEFAULT_LINKS, DEFAULT_POOL = "mean", "threshold:0.5", "words"
VERSION = 1


class CorpusError(Exception):
    """A bad input or option: one line, exit 2."""


# ------------------------------------------------------------------------------------------------ input
def _decode_lines(path: str, flag: str) -> List[str]:
    """Lines split on "\\n" only (a U+2028 or form feed inside a line stays in it), a trailing "\\r" dropped."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CorpusError(f"{flag} {path}: cannot read: {e.strerror}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for k, raw in enumerate(lines):
        try:
            out.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path}:{k + 1}: not UTF-8 (byte {e.start + 1} of the line)") from None
    return out


def read_corpus(src: Optional[str], tgt: Optional[str], joined: Optional[str]) -> Tuple[List[List[str]],
                                                                                         List[List[str]]]:
    """Word lists of both sides, line-parallel; ``joined`` is fast_align's ``src ||| tgt`` format."""
    if joined:
        pairs = []
        for k, line in enumerate(_decode_lines(joined, "-i")):
            if "|||" not in line:
                raise CorpusError(f"{joined}:{k + 1}: no '|||' between the source and the target")
            s, _, t = line.partition("|||")
            pairs.append((s.split(), t.split()))
        return [p[0] for p in pairs], [p[1] for p in pairs]
    s, t = _decode_lines(src, "-s"), _decode_lines(tgt, "-t")
    if len(s) != len(t):
        raise CorpusError(f"-s {src} has {len(s)} lines but -t {tgt} has {len(t)}: the sides must be line-parallel")
    return [x.split() for x in s], [x.split() for x in t]


def _check_outputs(opts) -> None:
    inputs = [(f, p) for f, p in (("-s", opts.src), ("-t", opts.tgt), ("-i", opts.input)) if p]
    outputs = [(f, p) for f, p in (("-o", opts.output), ("-f", opts.fwd), ("-r", opts.rev),
                                   ("--scores", opts.scores)) if p]
    if not outputs:
        raise CorpusError("nothing to write: give -o (merged), -f and/or -r")
    if opts.scores and not opts.output:
        raise CorpusError("--scores are the merged links' (-o): give -o too")
    seen = {}
    for flag, path in outputs:
        real = os.path.realpath(path)
        if real in seen:
            raise CorpusError(f"{flag} {path} is also {seen[real]}")
        seen[real] = flag
        for iflag, ipath in inputs:
            if os.path.exists(path) and os.path.samefile(path, ipath):
                raise CorpusError(f"{flag} {path} is the input {iflag}: refusing to overwrite it")
        if os.path.realpath(os.path.dirname(real)).startswith(os.path.realpath(opts.model_dir) + os.sep) and \
                re.fullmatch(r"(fwd|rev)(\.\d+)?(\.guided)?|bin", os.path.basename(os.path.dirname(real))):
            raise CorpusError(f"{flag} {path} is inside the model directory's {os.path.dirname(real)}")
        if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise CorpusError(f"{flag}: the directory of {path} does not exist")


# ------------------------------------------------------------------------------------------------ model dir
def _digest(src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]]) -> str:
    h = hashlib.sha256()
    for s, t in zip(src, tgt):
        h.update((" ".join(s) + "\t" + " ".join(t) + "\n").encode("utf-8"))
    return h.hexdigest()


class ModelDir:
    """The model directory and its manifest (what was made, with which settings, which stages are done)."""

    def __init__(self, path: str):
        self.path = path
        self.manifest_path = os.path.join(path, MANIFEST)
        self.data = None
        if os.path.exists(self.manifest_path):
            try:
                with open(self.manifest_path, encoding="utf-8") as f:
                    self.data = json.load(f)
            except (OSError, ValueError) as e:
                raise CorpusError(f"--model-dir {path}: {MANIFEST} is unreadable ({e}); remove the directory") from None
            if self.data.get("version") != VERSION:
                raise CorpusError(f"--model-dir {path}: made by another version of this tool")

    def file(self, *parts) -> str:
        return os.path.join(self.path, *parts)

    def done(self, stage: str) -> bool:
        return bool(self.data and stage in self.data.get("done", {}))

    def members(self, seeds: Optional[int] = None) -> List[Tuple[str, str]]:
        """The (forward, reverse) checkpoint folders of each seed: ``fwd``/``rev``, then ``fwd.2``/``rev.2``, ..."""
        n = seeds if seeds is not None else (self.data or {}).get("config", {}).get("seeds", 1)
        return [("fwd", "rev") if k == 0 else (f"fwd.{k + 1}", f"rev.{k + 1}") for k in range(n)]

    def guide_updates(self) -> int:
        return int((self.data or {}).get("config", {}).get("guide_updates", KEY_DEFAULTS["guide_updates"]))

    def finished(self) -> bool:
        """Every direction of every seed trained, both passes."""
        stages = ("train", "guide") if self.guide_updates() else ("train",)
        return bool(self.data) and all(self.done(f"{stage}.{name}") for pair in self.members() for name in pair
                                       for stage in stages)

    def checkpoint(self, name: str, stage: Optional[str] = None) -> str:
        """The checkpoint a member folder (``fwd``, ``rev.2``, ...) aligns with: its second pass's when the model
        has one (``stage``: ``train`` or ``guide`` for either pass)."""
        if stage is None:
            stage = "guide" if self.guide_updates() else "train"
        return self.file(guided(name) if stage == "guide" else name, "checkpoint_last.pt")

    def forget_guide(self) -> None:
        """Drop the links and the second pass (the first pass changed): both are made again."""
        for stage in [k for k in self.data.get("done", {}) if k == "links" or k.startswith("guide.")]:
            del self.data["done"][stage]
        for pair in self.members():
            for name in pair:
                if os.path.isdir(self.file(guided(name))):
                    shutil.rmtree(self.file(guided(name)))
        for side in ("src-tgt", "tgt-src"):
            for ext in (".bin", ".idx"):
                if os.path.exists(self.file("bin", f"train.align.{side}{ext}")):
                    os.remove(self.file("bin", f"train.align.{side}{ext}"))
        self.save()

    def mark(self, stage: str, **info) -> None:
        self.data.setdefault("done", {})[stage] = dict(info, at=time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.save()

    def save(self) -> None:
        atomic_write(self.manifest_path, json.dumps(self.data, indent=1) + "\n")


def guided(name: str) -> str:
    """The second pass's folder of member folder ``name``."""
    return name + ".guided"


MODEL_KEYS = ("merges", "embed_dim", "ffn_dim", "layers", "heads", "max_tokens", "lr", "warmup_updates", "dropout",
              "seed", "max_update", "patience", "valid_lines", "lexicon", "target_context", "lr_schedule",
              "label_smoothing", "time_limit", "seeds", "guide_updates", "guide_weight")
# what a finished model directory may be rerun with: more seeds (only the new ones train), another second pass
GROWABLE = ("seeds", "guide_updates", "guide_weight")
ARCH_KEYS = ("embed_dim", "ffn_dim", "layers", "heads", "dropout", "lexicon", "target_context")
# what a manifest written before a key existed means by it
KEY_DEFAULTS = {"lexicon": "softmax", "target_context": "past", "lr_schedule": "inverse-sqrt",
                "label_smoothing": 0.1, "time_limit": None, "seeds": 1, "guide_updates": 0, "guide_weight": 1.0}


def _config(opts) -> dict:
    return {k: getattr(opts, k) for k in MODEL_KEYS}


# ------------------------------------------------------------------------------------------------ stages
def _segment_files(segmenter, src, tgt, prefix: str, keep: Sequence[int]) -> None:
    for side, lines in (("src", src), ("tgt", tgt)):
        atomic_write(f"{prefix}.{side}", "".join(" ".join(segmenter.segment(lines[k])[0]) + "\n" for k in keep))


def _run(cmd: List[str], log: str, what: str) -> None:
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-5:]
        raise CorpusError(f"{what} failed (log: {log}): {' | '.join(tail)}")


def _split(src, tgt, valid_lines: int) -> Tuple[List[int], List[int]]:
    """The training and held-out lines (those with words on both sides; the last ones held out)."""
    train = [k for k in range(len(src)) if src[k] and tgt[k]]
    if not train:
        raise CorpusError("no line has words on both sides: nothing to train on")
    n_valid = min(valid_lines, max(1, len(train) // 10))
    return (train[:-n_valid] if len(train) > n_valid else train), train[-n_valid:]


def prepare(md: ModelDir, opts, src, tgt) -> None:
    """Stages 1 and 2: BPE codes (new model only) and the binarized pairs."""
    from subword_nmt.learn_bpe import learn_bpe

    from hmm_nmt_align.base.segment import load_segmenter

    train, valid = _split(src, tgt, opts.valid_lines)
    os.makedirs(md.file("text"), exist_ok=True)
    if not md.done("codes"):
        counts = {}
        for lines in (src, tgt):
            for words in lines:
                for w in words:
                    counts[w] = counts.get(w, 0) + 1
        vocab = io.StringIO("".join(f"{w} {c}\n" for w, c in counts.items()))
        out = io.StringIO()
        with contextlib.redirect_stderr(io.StringIO()):  # its own progress bar
            learn_bpe(vocab, out, opts.merges, is_dict=True)
        atomic_write(md.file("codes"), out.getvalue())
        md.mark("codes", merges=opts.merges)
    segmenter = load_segmenter(md.file("codes"), None)
    _segment_files(segmenter, src, tgt, md.file("text", "train"), train)
    _segment_files(segmenter, src, tgt, md.file("text", "valid"), valid)
    dest = md.file("bin.new")
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
           "--trainpref", md.file("text", "train"), "--validpref", md.file("text", "valid"), "--destdir", dest,
           "--workers", "1"]
    if md.done("bin"):  # --continue: the model's own dictionary
        cmd += ["--srcdict", md.file("bin", "dict.src.txt"), "--tgtdict", md.file("bin", "dict.tgt.txt")]
    else:
        cmd += ["--joined-dictionary"]
    _run(cmd, md.file("preprocess.log"), "fairseq-preprocess")
    if os.path.isdir(md.file("bin")):
        for name in os.listdir(md.file("bin")):
            if not name.startswith("dict."):
                os.remove(md.file("bin", name))
        for name in os.listdir(dest):
            if not name.startswith("dict."):
                os.replace(os.path.join(dest, name), md.file("bin", name))
        shutil.rmtree(dest)
    else:
        os.replace(dest, md.file("bin"))
    md.mark("bin", train_pairs=len(train), valid_pairs=len(valid))


def _train_cmd(md: ModelDir, opts, name: str, max_update: int, budget: Optional[Tuple[float, float]] = None,
               stage: str = "train") -> List[str]:
    """fairseq-train's command line for the direction in folder ``name`` (``fwd``, ``rev``, ``fwd.2``, ...: its
    seed is --seed plus the member's index); ``budget``: (the clock's hours where --time-limit starts, fairseq's
    cumulative hours where it stops). ``stage="guide"``: the second pass, in ``guided(name)``, from the first
    pass's checkpoint toward the links of ``bin/train.align.*``, at half the learning rate and warm-up."""
    from hmm_nmt_align.plugin import plugin_dir

    member = next(k for k, pair in enumerate(md.members(opts.seeds)) if name in pair)
    s, t = ("src", "tgt") if name.startswith("fwd") else ("tgt", "src")
    guide = stage == "guide"
    cmd = [sys.executable, "-m", "fairseq_cli.train", md.file("bin"), "--source-lang", s, "--target-lang", t,
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


def _bf16_training(opts) -> bool:
    """bf16 training: CPUs only (fairseq 0.12's own --bf16 is a TPU path); --precision auto trains a GPU in fp32."""
    return _bf16(opts) and _device(opts).type == "cpu"


def _device(opts):
    import torch

    return torch.device("cuda" if torch.cuda.is_available() and not opts.cpu else "cpu")


def _gpus(opts) -> int:
    """CUDA devices the command may use (0 with --cpu)."""
    import torch

    return 0 if opts.cpu or not torch.cuda.is_available() else torch.cuda.device_count()


def _direction_env(opts, k: int, env: dict) -> dict:
    """The environment of direction k's trainer: with two GPUs or more, one GPU each (the k-th visible one)."""
    if _gpus(opts) < 2:
        return env
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] \
        or [str(d) for d in range(_gpus(opts))]
    return dict(env, CUDA_VISIBLE_DEVICES=visible[k % len(visible)])


def _bf16(opts) -> bool:
    """Whether --precision means bf16 matmuls on this machine (auto: where they are native)."""
    import torch

    from hmm_nmt.hmm.precision import lexicon_dtype

    return lexicon_dtype(opts.precision, _device(opts)) == torch.bfloat16


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
    cumulative training time (0 where the checkpoint has none)."""
    import torch

    try:
        state = torch.load(md.file(name, "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError):
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


def train(md: ModelDir, opts, targets: dict, progress: bool, stage: str = "train") -> None:
    """Stage 3 (or with ``stage="guide"`` stage 5): every direction of every seed (``targets``: see _targets),
    ``_width`` trainers side by side with the threads split between them; a seed's two directions start together."""
    pending = [name for pair in md.members(opts.seeds) for name in pair
               if not (md.done(f"{stage}.{name}")
                       and md.data["done"][f"{stage}.{name}"].get("max_update") == targets[name][0])]
    if not pending:
        return
    folder = guided if stage == "guide" else (lambda name: name)
    width = _width(opts, len(pending))
    threads = max(1, opts.threads // width)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
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
            running[name] = (subprocess.Popen(_train_cmd(md, opts, name, *targets[name], stage=stage), stdout=f,
                                              stderr=subprocess.STDOUT, env=_direction_env(opts, slot, env),
                                              start_new_session=True), log, slot)

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


ALIGN_CHUNK = 20000  # pairs aligned at a time: memory stays bounded whatever the corpus size


def _align_chunk(fwd, rev, opts, src, tgt, segmenter, decision, threshold) -> Tuple[dict, List[Tuple[int, str]]]:
    """Links of one slice of lines, merged and per direction (as asked), and its too-long lines: one pass of
    each model, the two directions side by side when there are threads for both."""
    from hmm_nmt_align.base.links import LinkOptions

    from .raw_text import align_text

    both = bool(opts.output or opts.rev)
    links, _, errors = align_text(*fwd, src, tgt, segmenter, ["posterior"],
                                  LinkOptions(decision, threshold, False, opts.symmetrize if both else None,
                                              DEFAULT_POOL),
                                  batch_size=64, max_tokens=opts.align_max_tokens, rev=rev if both else None,
                                  scores=bool(opts.scores), directional=both and bool(opts.fwd or opts.rev),
                                  parallel=opts.parallel_align)
    out = {}
    if opts.output:
        sents = [sorted(sent) for sent in links["posterior"]]
        out["output"] = [[(i, j) for i, j, *_ in sent] for sent in sents]
        if opts.scores:
            out["scores"] = [[p for _, _, p in sent] for sent in sents]
    if opts.fwd:
        out["fwd"] = links["fwd:posterior" if both else "posterior"]
    if opts.rev:
        out["rev"] = links["rev:posterior"]
    return out, errors


def _aligners(md: ModelDir, opts, stage: Optional[str] = None, both: bool = True):
    """The alignment setup (threads, logging) and both directions' models of ``stage`` (default: the final ones)."""
    import logging

    import torch

    # two threads or more: the two directions side by side, as in training
    opts.parallel_align = opts.threads >= 2 and both
    torch.set_num_threads(max(1, opts.threads // 2) if opts.parallel_align else max(1, opts.threads))
    logging.getLogger("fairseq").setLevel(logging.WARNING)  # its per-model dictionary lines
    # torch's deprecation note on fairseq's attention masks, once per model: not the user's business
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask and attn_mask")
    fwd, rev = (_load_direction(md, [pair[k] for pair in md.members()], opts.cpu, _bf16(opts), stage)
                for k in (0, 1))
    if _gpus(opts) >= 2:  # the two directions side by side on two GPUs, as in training
        rev[0].to("cuda:1")
    return fwd, rev


def links(md: ModelDir, opts, src, tgt) -> None:
    """Stage 4: the training pairs aligned by the first pass (every seed; both directions merged by the default
    merge), as fairseq's piece alignments ``bin/train.align.src-tgt`` (and ``tgt-src``) for the second pass."""
    if md.done("links"):
        if md.data["done"]["links"].get("seeds") == len(md.members()):
            return
        md.forget_guide()  # more seeds: new links from all of them, and every second pass again
    from hmm_nmt.hmm.precision import autocast
    from hmm_nmt_align.base.links import LinkOptions, parse_decision
    from hmm_nmt_align.base.segment import load_segmenter

    from .guide import piece_links, write_link_dataset
    from .raw_text import align_text

    train_lines, _ = _split(src, tgt, opts.valid_lines)
    if len(train_lines) != md.data["done"]["bin"]["train_pairs"]:  # the binarized pairs are another split
        raise CorpusError(f"--model-dir {md.path}: bin/ holds {md.data['done']['bin']['train_pairs']} training "
                          f"pairs, the corpus {len(train_lines)} with --valid-lines {opts.valid_lines}")
    _log(f"aligning the {len(train_lines)} training pairs with the first pass, for the second")
    fwd, rev = _aligners(md, opts, "train")
    segmenter = load_segmenter(md.file("codes"), None)
    opts_links = LinkOptions(*parse_decision(DEFAULT_LINKS), False, DEFAULT_SYMMETRIZE, DEFAULT_POOL)
    bar = None
    if not opts.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(train_lines), desc="first-pass links", unit="pair", file=sys.stderr)
    rows = []
    for start in range(0, len(train_lines), ALIGN_CHUNK):
        keep = train_lines[start:start + ALIGN_CHUNK]
        s, t = [src[k] for k in keep], [tgt[k] for k in keep]
        with autocast("bf16" if _bf16(opts) else "fp32", _device(opts)):
            out, _, _ = align_text(*fwd, s, t, segmenter, ["posterior"], opts_links, batch_size=64,
                                   max_tokens=opts.align_max_tokens, rev=rev, parallel=opts.parallel_align)
        for words, a, b in zip(out["posterior"], s, t):  # a line too long for a model: no links, a free row
            rows.append(piece_links(words, segmenter.segment(a)[1], segmenter.segment(b)[1]))
        if bar is not None:
            bar.update(len(keep))
    if bar is not None:
        bar.close()
    n_links = sum(len(r) for r in rows)
    if not n_links:  # fairseq cannot map an empty file: the second pass trains on without links
        _log("warning: the first pass agreed on no link; the second pass trains on without links")
    for side, flip in (("src-tgt", False), ("tgt-src", True)) if n_links else ():
        tmp = md.file("bin", f"train.align.{side}.tmp")
        write_link_dataset(tmp, ([(i, j) for j, i in r] if flip else r for r in rows))
        for ext in (".bin", ".idx"):
            os.replace(tmp + ext, md.file("bin", f"train.align.{side}{ext}"))
    md.mark("links", seeds=len(md.members()), pairs=len(rows), links=n_links)


def align(md: ModelDir, opts, src, tgt) -> List[Tuple[int, str]]:
    """Stage 6: every line's links, merged and per direction (as asked), streamed in input order to temporary
    files that replace the outputs when all lines are done; returns the lines too long for a model."""
    from hmm_nmt.hmm.precision import autocast
    from hmm_nmt_align.base.links import parse_decision
    from hmm_nmt_align.base.segment import load_segmenter

    decision, threshold = parse_decision(opts.links)
    segmenter = load_segmenter(md.file("codes"), None)
    bf16 = _bf16(opts)
    fwd, rev = _aligners(md, opts, both=bool(opts.output or opts.rev))
    bar = None
    if not opts.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(src), desc="aligning both directions", unit="pair", file=sys.stderr)
    paths = {k: p for k, p in (("output", opts.output), ("fwd", opts.fwd), ("rev", opts.rev),
                               ("scores", opts.scores)) if p}
    errors = []
    # Ctrl-C / SIGTERM only while aligning: never between creating the temporary files and registering their
    # cleanup, nor between the renames (a signal then is taken when the outputs are complete)
    with _signals_held(), contextlib.ExitStack() as stack:
        files = {k: stack.enter_context(open(stack.enter_context(atomic_output(p)), "w", encoding="utf-8"))
                 for k, p in paths.items()}
        with _signals_held(False):
            for start in range(0, len(src), ALIGN_CHUNK):
                s, t = src[start:start + ALIGN_CHUNK], tgt[start:start + ALIGN_CHUNK]
                with autocast("bf16" if bf16 else "fp32", _device(opts)):
                    out, e = _align_chunk(fwd, rev, opts, s, t, segmenter, decision, threshold)
                errors += [(start + k, why) for k, why in e]
                for k, f in files.items():
                    if k == "scores":
                        f.write("".join(" ".join(f"{p:.4f}" for p in sent) + "\n" for sent in out[k]))
                    else:
                        f.write(_pharaoh(out[k]))
                if bar is not None:
                    bar.update(len(s))
        for f in files.values():
            f.close()  # before atomic_output renames them
    if bar is not None:
        bar.close()
    return errors


def _load_direction(md: ModelDir, names: Sequence[str], cpu: bool, bf16: bool, stage: Optional[str] = None):
    """``(model, task)`` of one direction: its checkpoint (of ``stage``, default the final one), or with several
    seeds hmm-nmt-align's ensemble of theirs (their posteriors averaged)."""
    from .loading import load_aligner

    model, task = load_aligner(os.pathsep.join(md.checkpoint(name, stage) for name in names), md.file("bin"), cpu)
    for member in getattr(model, "members", [model]):  # whatever precision trained it
        member.decoder.lexicon_dtype_name = "bf16" if bf16 else "fp32"
    return model, task


_HELD = {"depth": 0, "pending": False}  # _signals_held's state, read by the SIGINT/SIGTERM handler


@contextlib.contextmanager
def _signals_held(hold: bool = True):
    """Defer (``hold``) or allow Ctrl-C and SIGTERM in the block; one deferred is raised as KeyboardInterrupt
    where they are allowed again. A flag, not a signal mask: any thread may receive the signal, and Python runs
    the handler in the main thread."""
    saved = _HELD["depth"]
    _HELD["depth"] = saved + 1 if hold else 0
    try:
        if not hold:
            _raise_pending()
        yield
    finally:
        _HELD["depth"] = saved
    if not saved:
        _raise_pending()


def _raise_pending() -> None:
    if _HELD["pending"]:
        _HELD["pending"] = False
        raise KeyboardInterrupt


def _pharaoh(links) -> str:
    return "".join(" ".join(f"{i}-{j}" for i, j in sorted(sent)) + "\n" for sent in links)


# ------------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    from hmm_nmt_align.base.symmetrize import METHODS as HARD

    # hmm_nmt.options has the same type, but importing hmm_nmt imports fairseq: --help must not
    def at_least(low):
        def parse(text):
            try:
                v = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"an integer is needed, got {text!r}") from None
            if v < low:
                raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
            return v
        return parse

    positive, nonnegative = at_least(1), at_least(0)

    def _hours(text):  # "1.5", "1.5h", "90m" or "5400s"
        scale = {"h": 1.0, "m": 1 / 60, "s": 1 / 3600}.get(text.strip()[-1:].lower())
        try:
            v = float(text.strip()[:-1] if scale else text) * (scale or 1.0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"hours (1.5), or minutes (90m) or seconds (5400s), got {text!r}") \
                from None
        if not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return v

    p = argparse.ArgumentParser(prog="hmm-nmt-align-corpus", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    io_ = p.add_argument_group("input and output")
    io_.add_argument("-s", "--src", metavar="FILE", help="source text, word-tokenised, one sentence per line")
    io_.add_argument("-t", "--tgt", metavar="FILE", help="target text, line-parallel to -s")
    io_.add_argument("-i", "--input", metavar="FILE", help="one 'source ||| target' pair per line (instead of -s/-t)")
    io_.add_argument("-o", "--output", metavar="FILE", help="the merged alignment (source-target Pharaoh)")
    io_.add_argument("-f", "--fwd", metavar="FILE", help="the source-to-target model's alignment alone")
    io_.add_argument("-r", "--rev", metavar="FILE", help="the target-to-source model's alignment alone, written "
                                                         "source-target")
    io_.add_argument("--scores", metavar="FILE",
                     help="with -o: the confidence of each merged link, one line per input line, in -o's order (the "
                          "soft-merged posterior the link was chosen on: filter links by it)")
    io_.add_argument("--model-dir", required=True, metavar="DIR",
                     help="where the model is made (BPE codes, dictionary, both checkpoints, manifest.json)")
    mode = io_.add_mutually_exclusive_group()
    mode.add_argument("--align-only", action="store_true", help="align with the finished model, train nothing")
    mode.add_argument("--continue", dest="cont", action="store_true",
                      help="train the finished model --max-update more updates on this text, then align")
    m = p.add_argument_group("model and training (a new model; the Hansards settings)")
    m.add_argument("--merges", type=positive, default=4000,
                   help="joint BPE merges (default 4000: more whole words in the lexicon align better, and each "
                        "update costs more with the vocabulary)")
    m.add_argument("--embed-dim", type=positive, default=128)
    m.add_argument("--ffn-dim", type=positive, default=512)
    m.add_argument("--layers", type=positive, default=2, help="encoder and decoder layers (default 2)")
    m.add_argument("--heads", type=positive, default=4)
    m.add_argument("--lexicon", choices=["softmax", "class", "separable"], default="separable",
                   help="the lexicon p(e | j): separable (default: the softmax lexicon without its ReLU, every "
                        "normaliser one matmul over V), softmax over the vocabulary (about twice the training time), "
                        "or class-factored")
    m.add_argument("--target-context", choices=["past", "both"], default="past",
                   help="what the lexicon and the alignment of target word i see: the words before i (past, "
                        "default: the models also translate), or the words after i too (both: aligners only)")
    m.add_argument("--max-tokens", type=positive, default=2048, help="tokens per training batch")
    m.add_argument("--lr", type=float, default=2e-3)
    m.add_argument("--warmup-updates", type=positive, default=200)
    m.add_argument("--lr-schedule", choices=["inverse-sqrt", "linear"], default="linear",
                   help="after the warm-up: linear decay to 0 at the last update (default), or inverse square root")
    m.add_argument("--dropout", type=float, default=0.1)
    m.add_argument("--label-smoothing", type=float, default=0.1,
                   help="label smoothing of the lexicon at each step of the sum over alignments (0: the exact NLL)")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--seeds", type=positive, default=1,
                   help="train N models per direction, with seeds --seed, --seed+1, ...; the alignment averages their "
                        "posteriors (an ensemble: N times the training and alignment time). A finished model "
                        "directory rerun with a larger N trains only the new seeds")
    m.add_argument("--max-update", type=positive, default=4800, help="updates per direction (default 4800)")
    m.add_argument("--guide-updates", type=nonnegative, default=1200, metavar="N",
                   help="the second pass: each model trains N more updates toward the links of the first pass (the "
                        "training pairs aligned by both directions, every seed; default 1200; 0: one pass). A finished "
                        "model directory rerun with another N (or --guide-weight) makes only the second pass again")
    m.add_argument("--guide-weight", type=float, default=4.0,
                   help="the weight of -log p(first-pass links | E, F) in the second pass's loss (default 4: chosen "
                        "among 1, 4 and 16 on the Hansards trial pairs)")
    m.add_argument("--time-limit", type=_hours, metavar="HOURS",
                   help="stop each direction's first pass after this much training (1.5, 90m, 5400s) if --max-update "
                        "is not reached first; the linear schedule decays to 0 at whichever comes first")
    m.add_argument("--patience", type=int, default=0,
                   help="stop a direction when its loss on --valid-lines held-out pairs of the corpus has not "
                        "improved for this many validations (default 0: train --max-update updates)")
    m.add_argument("--validate-interval", type=positive, default=400, help="updates between validations")
    m.add_argument("--valid-lines", type=positive, default=500, help="held-out pairs (at most a tenth of the corpus)")
    a = p.add_argument_group("alignment")
    a.add_argument("--symmetrize", default=DEFAULT_SYMMETRIZE, choices=["prod", "mean"] + list(HARD),
                   help="how -o merges the directions (default mean)")
    a.add_argument("--links", default=DEFAULT_LINKS,
                   help="argmax, mutual, union or threshold:T (default threshold:0.5): T trades recall for precision")
    a.add_argument("--align-max-tokens", type=positive, default=4000, help="tokens per alignment batch")
    r = p.add_argument_group("resources")
    r.add_argument("--threads", type=positive, default=max(1, min(os.cpu_count() or 1, 16)),
                   help="CPU threads, split between the two directions (default: the machine's cores)")
    r.add_argument("--cpu", action="store_true", help="stay on the CPU when a GPU is present")
    r.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="fp32",
                   help="the matmuls of training and alignment: fp32 (default), bf16 (autocast; parameters, "
                        "optimizer and the HMM sums stay fp32), or auto: bf16 where the CPU multiplies it natively "
                        "(AVX512-BF16, AMX), else fp32. bf16 training is for CPUs")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _log(msg: str) -> None:
    sys.stderr.write(f"hmm-nmt-align-corpus: {msg}\n")


def run(opts) -> int:
    from hmm_nmt_align.base.links import parse_decision

    if bool(opts.input) == bool(opts.src or opts.tgt) or (not opts.input and not (opts.src and opts.tgt)):
        raise CorpusError("give -s SRC -t TGT, or -i FILE ('src ||| tgt' lines)")
    try:
        parse_decision(opts.links)
    except ValueError as e:
        raise CorpusError(f"--links: {e}") from None
    if opts.patience < 0:
        raise CorpusError(f"--patience must be >= 0, got {opts.patience}")
    if opts.time_limit is not None and opts.align_only:
        raise CorpusError("--time-limit trains: it cannot go with --align-only")
    if not 0 <= opts.label_smoothing < 1:
        raise CorpusError(f"--label-smoothing must be in [0, 1), got {opts.label_smoothing}")
    if not (opts.guide_weight >= 0 and opts.guide_weight != float("inf")):
        raise CorpusError(f"--guide-weight must be a number >= 0, got {opts.guide_weight}")
    _check_outputs(opts)
    if opts.precision == "bf16" and not opts.align_only and _device(opts).type == "cuda":
        raise CorpusError("--precision bf16 trains on CPUs only (fairseq 0.12's --bf16 is its TPU path): train on "
                          "the GPU in fp32, then --align-only --precision bf16")
    src, tgt = read_corpus(opts.src, opts.tgt, opts.input)
    md = ModelDir(opts.model_dir)
    finished = md.finished()
    if opts.align_only:
        if not finished:
            raise CorpusError(f"--align-only: --model-dir {opts.model_dir} holds no finished model")
    else:
        digest = _digest(src, tgt)
        if md.data is None:
            os.makedirs(opts.model_dir, exist_ok=True)
            md.data = {"version": VERSION, "config": _config(opts), "corpus": digest, "lines": len(src)}
            md.save()
        elif opts.cont:
            if not finished:
                raise CorpusError(f"--continue: --model-dir {opts.model_dir} holds no finished model; rerun the "
                                  "command that made it to finish it")
            saved = {**KEY_DEFAULTS, **md.data["config"]}
            # the checkpoints' shape and number, and the second pass, whatever this command line says
            for k in ARCH_KEYS + ("seeds", "guide_updates", "guide_weight"):
                setattr(opts, k, saved[k])
            md.forget_guide()  # the first pass trains on: its links and the second pass are made again
            md.data["continued"] = md.data.get("continued", []) + [
                {"corpus": digest, "updates": opts.max_update, "time_limit": opts.time_limit}]
            md.data["corpus"] = digest
            md.save()
        else:
            saved = {**KEY_DEFAULTS, **md.data["config"]}
            grown = {k: getattr(opts, k) for k in GROWABLE}
            if md.data["corpus"] == digest and opts.seeds >= saved["seeds"] and dict(saved, **grown) == _config(opts) \
                    and any(saved[k] != v for k, v in grown.items()):  # more seeds, or another second pass
                if (saved["guide_updates"], saved["guide_weight"]) != (opts.guide_updates, opts.guide_weight):
                    md.forget_guide()
                md.data["config"].update(grown)
                md.save()
                saved = _config(opts)
            if md.data["corpus"] != digest or saved != _config(opts):
                changed = [k for k in MODEL_KEYS if saved.get(k) != getattr(opts, k)]
                raise CorpusError(f"--model-dir {opts.model_dir} was made from another corpus or settings"
                                  + (f" ({', '.join(changed)})" if changed else "")
                                  + ": use --align-only to align with it, --continue to train it further, or "
                                  "another --model-dir")
        targets = _targets(md, opts)
        md.save()
        if opts.cont or not md.done("bin"):
            _log(f"segmenting and binarizing {len(src)} pairs")
            prepare(md, opts, src, tgt)
        train(md, opts, targets, not opts.no_progress)
        if opts.guide_updates:
            links(md, opts, src, tgt)
            train(md, opts, {name: (opts.guide_updates, None) for pair in md.members(opts.seeds) for name in pair},
                  not opts.no_progress, stage="guide")
    _log(f"aligning {len(src)} pairs")
    errors = align(md, opts, src, tgt)
    for k, why in errors:
        _log(f"error: line {k + 1}: {why}; its output line is empty")
    _log(f"{len(src)} lines aligned; {sum(1 for s, t in zip(src, tgt) if not s or not t)} with an empty side")
    return 1 if errors else 0


def _terminated(signum, frame):
    """A scheduler's SIGTERM stops the trainers and leaves no partial output, as Ctrl-C does; both wait while
    the outputs are created or renamed (_signals_held)."""
    if _HELD["depth"]:
        _HELD["pending"] = True
        return
    raise KeyboardInterrupt


def main(argv: Optional[List[str]] = None) -> int:
    opts = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell made it ignored
        signal.signal(signal.SIGINT, _terminated)
    try:
        return run(opts)
    except CorpusError as e:
        _log(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        _log("interrupted; run the same command again to continue")
        return 130


__all__ = ["main", "read_corpus", "CorpusError", "ModelDir"]
if __name__ == "__main__":
    sys.exit(main())
