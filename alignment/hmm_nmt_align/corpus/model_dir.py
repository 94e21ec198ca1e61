"""The model directory of ``hmm-nmt-align-corpus`` and its ``manifest.json``: the settings a model was made with,
the corpus it was made from (a digest), and the stages done. Every other stage reads and marks it."""
import hashlib
import json
import os
import shutil
import sys
import time
from typing import List, Optional, Sequence, Tuple

from hmm_nmt_align.base.atomic import atomic_write

MANIFEST = "manifest.json"
# how the directions are merged and the links read off (chosen on the Hansards trial pairs); hmm-nmt-align
# --model-dir uses the same
DEFAULT_SYMMETRIZE, DEFAULT_LINKS, DEFAULT_POOL = "mean", "threshold:0.5", "words"
VERSION = 1

MODEL_KEYS = ("merges", "embed_dim", "ffn_dim", "layers", "heads", "max_tokens", "lr", "warmup_updates", "dropout",
              "seed", "max_update", "patience", "valid_lines", "lexicon", "target_context", "lr_schedule",
              "label_smoothing", "time_limit", "seeds", "guide_updates", "guide_weight")
# what a finished model directory may be rerun with: more seeds (only the new ones train), another second pass
GROWABLE = ("seeds", "guide_updates", "guide_weight")
ARCH_KEYS = ("embed_dim", "ffn_dim", "layers", "heads", "dropout", "lexicon", "target_context")
# what a manifest written before a key existed means by it
KEY_DEFAULTS = {"lexicon": "softmax", "target_context": "past", "lr_schedule": "inverse-sqrt",
                "label_smoothing": 0.1, "time_limit": None, "seeds": 1, "guide_updates": 0, "guide_weight": 1.0}


class CorpusError(Exception):
    """A bad input or option: one line, exit 2."""


def _log(msg: str) -> None:
    sys.stderr.write(f"hmm-nmt-align-corpus: {msg}\n")


def _digest(src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]]) -> str:
    h = hashlib.sha256()
    for s, t in zip(src, tgt):
        h.update((" ".join(s) + "\t" + " ".join(t) + "\n").encode("utf-8"))
    return h.hexdigest()


def _config(opts) -> dict:
    return {k: getattr(opts, k) for k in MODEL_KEYS}


def guided(name: str) -> str:
    """The second pass's folder of member folder ``name``."""
    return name + ".guided"


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
