"""Subword segmentation of word-tokenised text that remembers which word every piece comes from.

The raw-text path of ``hmm-nmt-align`` and the hub's ``align`` segment each word on its own, so the
piece-to-word map is known exactly before the pieces meet the model's dictionary: a piece that turns out
to be ``<unk>`` there cannot move a word boundary.  subword-nmt and SentencePiece (with its default
whitespace pre-splitting) segment a word the same way alone or inside its sentence.
"""
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["Segmenter", "load_segmenter"]


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


def load_segmenter(bpe_codes: Optional[str] = None, spm_model: Optional[str] = None) -> Segmenter:
    """subword-nmt codes, a SentencePiece model, or neither (the words are the pieces).

    Raises ``OSError``/``ValueError`` for a missing or unreadable file.
    """
    if bpe_codes and spm_model:
        raise ValueError("give either BPE codes or a SentencePiece model, not both")
    if bpe_codes:
        from subword_nmt.apply_bpe import BPE

        with open(bpe_codes, encoding="utf-8") as f:
            bpe = BPE(f)
        return Segmenter(lambda w: bpe.segment_tokens([w]), "subword-nmt")
    if spm_model:
        import sentencepiece as spm

        if not os.path.isfile(spm_model):
            raise FileNotFoundError(f"SentencePiece model not found: {spm_model}")
        sp = spm.SentencePieceProcessor(model_file=spm_model)
        return Segmenter(lambda w: sp.encode(w, out_type=str), "sentencepiece")
    return Segmenter(None, "none")
