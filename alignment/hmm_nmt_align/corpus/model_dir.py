"""The model directory of ``hmm-nmt-align-corpus`` and its ``manifest.json``: the settings a model was made with,
the corpus it was made from (a digest), and the stages done. Every other stage reads and marks it."""
import contextlib
import json
import math
import os
import re
import resource
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from hmm_nmt_align.base.atomic import atomic_write

MANIFEST = "manifest.json"
# how the directions are merged and the links read off (chosen on the Hansards trial pairs); hmm-nmt-align
# --model-dir uses the same
DEFAULT_SYMMETRIZE, DEFAULT_LINKS, DEFAULT_POOL = "mean", "threshold:0.5", "words"
VERSION = 1

MODEL_KEYS = ("merges", "vocab_size", "embed_dim", "ffn_dim", "layers", "heads", "max_tokens", "lr", "warmup_updates",
              "dropout", "seed", "max_update", "patience", "valid_lines", "lexicon", "target_context", "lr_schedule",
              "label_smoothing", "time_limit", "seeds", "guide_updates", "guide_weight")
# what a finished model directory may be rerun with: more seeds (only the new ones train), another second pass
GROWABLE = ("seeds", "guide_updates", "guide_weight")
ARCH_KEYS = ("embed_dim", "ffn_dim", "layers", "heads", "dropout", "lexicon", "target_context")
# what a manifest written before a key existed means by it
KEY_DEFAULTS = {"vocab_size": None, "lexicon": "softmax", "target_context": "past", "lr_schedule": "inverse-sqrt",
                "label_smoothing": 0.1, "time_limit": None, "seeds": 1, "guide_updates": 0, "guide_weight": 1.0}


MAX_SEED = 2 ** 32 - 1  # numpy's seeds


class CorpusError(Exception):
    """A bad input or option: one line, exit 2."""


def _log(msg: str) -> None:
    sys.stderr.write(f"hmm-nmt-align-corpus: {msg}\n")


def _config(opts) -> dict:
    return {k: getattr(opts, k) for k in MODEL_KEYS}


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its reaped children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


GUIDE_DATA = "guide-bin"  # the second pass's sample of the training pairs, with their links (stage 4)


def guided(name: str) -> str:
    """The second pass's folder of member folder ``name``."""
    return name + ".guided"


# ------------------------------------------------------------------------------------------------ its schema
# A manifest comes with a model directory a user was given: every stage trusts it only after this check.
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _int(low):
    return (lambda v: _is_int(v) and v >= low), f"an integer >= {low}"


def _num(low, high=math.inf, low_open=False, high_open=False):
    def ok(v):
        return _is_num(v) and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    return ok, f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def _optional(check):
    ok, what = check
    return (lambda v: v is None or ok(v)), f"null or {what}"


def _choice(*values):
    return (lambda v: v in values), "one of " + ", ".join(map(repr, values))


CONFIG = {
    "merges": _optional(_int(1)), "vocab_size": _optional(_int(1)), "embed_dim": _int(1), "ffn_dim": _int(1),
    "layers": _int(1), "heads": _int(1),
    "max_tokens": _int(1), "lr": _num(0, low_open=True), "warmup_updates": _int(1),
    "dropout": _num(0, 1, high_open=True), "seed": (lambda v: _is_int(v) and 0 <= v <= MAX_SEED, "a seed"),
    "max_update": _int(1), "patience": _int(0), "valid_lines": _int(1),
    "lexicon": _choice("softmax", "class", "separable"), "target_context": _choice("past", "both"),
    "lr_schedule": _choice("inverse-sqrt", "linear"), "label_smoothing": _num(0, 1, high_open=True),
    "time_limit": (lambda v: v is None or (_is_num(v) and v > 0), "null or a number > 0"),
    "seeds": _int(1), "guide_updates": _int(0), "guide_weight": _num(0),
}
# what the stages read of each entry of "done", and which of it they require (other keys are kept as they are)
DONE = {"codes": {"merges": _int(0)}, "bin": {"train_pairs": _int(0), "valid_pairs": _int(0)},
        "links": {"seeds": _int(1), "pairs": _int(0), "links": _int(0), "sample": _int(1)}}
MEMBER = {"max_update": _int(1), "updates": _int(0)}
REQUIRED = {"bin": ("train_pairs",), "links": ("links",), "member": ("max_update",)}
MAX_SEEDS = 10000  # a manifest's seeds: each one is a folder per direction


def _fail(path: str, key: str, what: str, value) -> None:
    shown = repr(value)
    raise CorpusError(f"{path}: {key} must be {what}, got {shown[:40] + '...' if len(shown) > 43 else shown}; "
                      "this is not a manifest this tool wrote (remove the directory, or restore the file)")


def check_manifest(data: Any, path: str) -> Dict[str, Any]:
    """``data`` (a parsed ``manifest.json``) if it has the types and ranges every stage relies on, else
    CorpusError naming ``path`` and the key."""
    if not isinstance(data, dict):
        _fail(path, "the file", "a JSON object", type(data).__name__)
    if data.get("version") != VERSION:
        raise CorpusError(f"{path}: made by another version of this tool (version {data.get('version')!r}, this "
                          f"tool writes {VERSION})")
    config = data.get("config")
    if not isinstance(config, dict):
        _fail(path, "config", "a JSON object", config)
    for key in MODEL_KEYS:
        if key not in config:
            if key in KEY_DEFAULTS:  # a manifest from before the key existed
                continue
            _fail(path, f"config.{key}", "present", None)
        ok, what = CONFIG[key]
        if not ok(config[key]):
            _fail(path, f"config.{key}", what, config[key])
    if config.get("seeds", 1) > MAX_SEEDS or config["seed"] + config.get("seeds", 1) - 1 > MAX_SEED:
        _fail(path, "config.seeds", f"at most {MAX_SEEDS} (and seed + seeds - 1 <= {MAX_SEED})", config["seeds"])
    if not (isinstance(data.get("corpus"), str) and len(data["corpus"]) == 64):
        _fail(path, "corpus", "a sha256 digest", data.get("corpus"))
    if not (_is_int(data.get("lines")) and data["lines"] >= 0):
        _fail(path, "lines", "an integer >= 0", data.get("lines"))
    done = data.get("done", {})
    if not isinstance(done, dict):
        _fail(path, "done", "a JSON object", done)
    for stage, info in done.items():
        if not isinstance(info, dict):
            _fail(path, f"done.{stage}", "a JSON object", info)
        member = stage.split(".", 1)[0] in ("train", "guide")
        rules = MEMBER if member else DONE.get(stage, {})
        for key in REQUIRED.get("member" if member else stage, ()):
            if key not in info:
                _fail(path, f"done.{stage}.{key}", rules[key][1], None)
        for key, (ok, what) in rules.items():
            if key in info and not ok(info[key]):
                _fail(path, f"done.{stage}.{key}", what, info[key])
        hours = info.get("from_hours")
        if hours is not None and not (isinstance(hours, list) and len(hours) == 2 and all(map(_is_num, hours))):
            _fail(path, f"done.{stage}.from_hours", "two numbers", hours)
    times = data.get("times", {})
    if not (isinstance(times, dict) and all(isinstance(t, dict) and _is_num(t.get("wall_s")) and _is_num(t.get("cpu_s"))
                                            and _is_int(t.get("runs")) for t in times.values())):
        _fail(path, "times", "phases of wall_s, cpu_s and runs", times)
    continued = data.get("continued", [])
    if not (isinstance(continued, list) and all(isinstance(c, dict) for c in continued)):
        _fail(path, "continued", "a list of JSON objects", continued)
    return data


class ModelDir:
    """The model directory and its manifest (what was made, with which settings, which stages are done)."""

    def __init__(self, path: str):
        self.path = path
        self.manifest_path = os.path.join(path, MANIFEST)
        self.data = None
        if os.path.exists(self.manifest_path):
            try:
                with open(self.manifest_path, encoding="utf-8") as f:
                    data = json.load(f)
            except (OSError, ValueError, RecursionError) as e:
                raise CorpusError(f"--model-dir {path}: {MANIFEST} is unreadable ({e}); remove the directory") from None
            self.data = check_manifest(data, self.manifest_path)

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
        for name in (GUIDE_DATA, GUIDE_DATA + ".new"):
            if os.path.isdir(self.file(name)):
                shutil.rmtree(self.file(name))
        self.save()

    def training_started(self) -> bool:
        """Whether a trainer has written a member folder (``fwd``, ``rev.2``, ...), finished or not."""
        return any(re.fullmatch(r"(fwd|rev)(\.\d+)?(\.guided)?", n) and os.path.isdir(self.file(n))
                   for n in os.listdir(self.path))

    def discard_prepared(self) -> None:
        """Drop the codes, texts and binarized pairs made for other settings or another corpus, before any
        training: they are made again."""
        for name in ("bin", "bin.new", "text"):
            if os.path.isdir(self.file(name)):
                shutil.rmtree(self.file(name))
        for name in ("codes", "preprocess.log"):
            if os.path.exists(self.file(name)):
                os.remove(self.file(name))

    @contextlib.contextmanager
    def timed(self, phase: str):
        """Add the block's wall clock and CPU seconds (this process and the children it reaped: the trainers,
        fairseq-preprocess) to ``times.PHASE`` of the manifest, also when it is interrupted: a resumed phase's
        times are the sum of its runs."""
        t0, c0 = time.time(), _cpu_seconds()
        try:
            yield
        finally:
            t = self.data.setdefault("times", {}).setdefault(phase, {"wall_s": 0.0, "cpu_s": 0.0, "runs": 0})
            t["wall_s"] = round(t["wall_s"] + time.time() - t0, 3)
            t["cpu_s"] = round(t["cpu_s"] + _cpu_seconds() - c0, 3)
            t["runs"] += 1
            self.save()

    def mark(self, stage: str, **info) -> None:
        self.data.setdefault("done", {})[stage] = dict(info, at=time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.save()

    def save(self) -> None:
        atomic_write(self.manifest_path, json.dumps(self.data, indent=1) + "\n")
