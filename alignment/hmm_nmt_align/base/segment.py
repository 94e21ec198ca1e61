"""Subword segmentation of word-tokenised text that remembers which word every piece comes from.

The raw-text path of ``hmm-nmt-align`` and the hub's ``align`` segment each word on its own, so the
piece-to-word map is known exactly before the pieces meet the model's dictionary: a piece that turns out
to be ``<unk>`` there cannot move a word boundary.  subword-nmt and SentencePiece (with its default
whitespace pre-splitting) segment a word the same way alone or inside its sentence.
"""
import os
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["Segmenter", "check_bpe_codes", "load_segmenter"]


class Segmenter:
    """``segment(words) -> (pieces, word_of_piece)`` with a per-word cache; ``split`` maps a word to pieces."""

    def __init__(self, split: Optional[Callable[[str], List[str]]] = None, name: str = "none"):
        self.split = split
        self.name = name
        self._cache: Dict[str, List[str]] = {}

    def segment(self, words: Sequence[str]) -> Tuple[List[str], List[int]]:
        pieces: List[str] = []
        owner: List[int] = []
        for k, w in enumerate(words):
            if self.split is None:
                ps = [w]
            else:
                ps = self._cache.get(w)
                if ps is None:
                    ps = self.split(w)
                    if not ps:
                        raise ValueError(f"{self.name} segmented the word {w!r} into no piece")
                    if len(self._cache) < 1_000_000:
                        self._cache[w] = ps
            pieces.extend(ps)
            owner.extend([k] * len(ps))
        return pieces, owner


def check_bpe_codes(text: str, path: str) -> None:
    """Raise ``ValueError("PATH:LINE: ...")`` where subword-nmt's reader would exit: an optional
    ``#version: X.Y`` first line, then one merge a line, two units separated by one space."""
    lines = text.rstrip("\n").split("\n")
    first = 1
    if lines and lines[0].startswith("#version:"):
        version = re.sub(r"(\.0+)*$", "", lines[0].split()[-1]) if lines[0].split()[1:] else ""
        if not re.fullmatch(r"\d+(\.\d+)*", version):
            raise ValueError(f"{path}:1: malformed version line {lines[0]!r} (expected '#version: 0.2')")
        lines, first = lines[1:], 2
    for k, line in enumerate(lines, start=first):
        if len(line.strip("\r\n ").split(" ")) != 2:
            raise ValueError(f"{path}:{k}: invalid BPE codes line {line[:80]!r} (expected two subword units "
                             "separated by one space)")


def load_segmenter(bpe_codes: Optional[str] = None, spm_model: Optional[str] = None) -> Segmenter:
    """subword-nmt codes, a SentencePiece model, or neither (the words are the pieces).

    Raises ``OSError`` for a missing or unreadable file, ``ValueError`` (naming the file, and the line of
    malformed BPE codes) for one that is not BPE codes or not a SentencePiece model.
    """
    if bpe_codes and spm_model:
        raise ValueError("give either BPE codes or a SentencePiece model, not both")
    if bpe_codes:
        import io

        from subword_nmt.apply_bpe import BPE

        try:
            with open(bpe_codes, encoding="utf-8", newline="") as f:  # read once: a pipe works too
                text = f.read()
        except UnicodeDecodeError as e:
            raise ValueError(f"{bpe_codes}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        check_bpe_codes(text, bpe_codes)
        if not any(line.strip() for line in text.splitlines() if not line.startswith("#version:")):
            # no merge (a script with more characters than the vocabulary): characters, which subword-nmt's
            # reader cannot express (it fails on a file of its header alone)
            return Segmenter(lambda w: [c + "@@" for c in w[:-1]] + [w[-1:]] if w else [], "subword-nmt")
        try:
            bpe = BPE(io.StringIO(text))
        except SystemExit:  # subword-nmt exits on what check_bpe_codes did not foresee
            raise ValueError(f"{bpe_codes}: not subword-nmt BPE codes") from None
        return Segmenter(lambda w: bpe.segment_tokens([w]), "subword-nmt")
    if spm_model:
        import sentencepiece as spm

        if not os.path.exists(spm_model):
            raise FileNotFoundError(2, "No such file or directory", spm_model)
        try:
            with open(spm_model, "rb") as f:  # read once: a pipe works too
                proto = f.read()
            sp = spm.SentencePieceProcessor(model_proto=proto)
        except (RuntimeError, TypeError) as e:
            detail = " ".join(str(e).split())[:200]
            raise ValueError(f"{spm_model}: not a SentencePiece model ({detail})") from None
        return Segmenter(lambda w: sp.encode(w, out_type=str), "sentencepiece")
    return Segmenter(None, "none")
