"""Map subword-level alignment links back to words.

Two segmentation conventions are supported:

``bpe``  (subword-nmt)
    a piece ending in ``@@`` continues into the next piece: ``new@@ ton@@ ian is`` is the two
    words ``newtonian is``.
``spm``  (SentencePiece)
    a piece starting with ``▁`` (U+2581) begins a new word, every other piece continues the current
    one: ``▁new ton ian ▁is`` is ``newtonian is``.  A lone ``▁`` opens a word made of the pieces that
    follow it; a first piece without ``▁`` still starts word 0.

A word pair is linked if any of their pieces are.  Positions holding the end-of-sentence symbol (by
default ``</s>``), and the position just past the end of the token list (fairseq appends EOS to every
sentence without it being part of the text), are dropped.

Unknown pieces (``unk``, e.g. fairseq's ``<unk>``) have lost their marker, so one word boundary next to
each of them is unknown.  They are taken to *continue* a word: in ``bpe`` an unknown piece joins the next
piece's word (as if it ended in ``@@``), in ``spm`` it joins the previous piece's word (as if it had no
``▁``).  Guessing "continue" can merge two words but never splits one, so the k-th piece's word index
is at most its true word index and every word link stays inside the real sentence.  When the
segmented text is available, its markers should be used instead (``hmm-nmt-align --pieces`` or the
raw-text path, which never look at the dictionary's strings).
"""
from typing import Iterable, List, Optional, Sequence, Tuple

Link = Tuple[int, int]

__all__ = ["BPE_STYLES", "STYLES", "SPM_SPACE", "word_index", "words", "subword_to_word_links"]

STYLES = ("bpe", "spm")
# fairseq's --bpe names -> the styles here
BPE_STYLES = {"none": None, "subword_nmt": "bpe", "sentencepiece": "spm"}
SPM_SPACE = "\u2581"
BPE_CONT = "@@"


def word_index(tokens: Sequence[str], style: str, eos: Optional[str] = "</s>",
               unk: Optional[str] = None) -> List[Optional[int]]:
    """For every piece, the index of the word it belongs to (``None`` for an EOS piece).

    A piece equal to ``unk`` continues a word (see the module docstring): never more words than the text has.
    """
    if style not in STYLES:
        raise ValueError(f"unknown subword style {style!r}; expected one of {', '.join(STYLES)}")
    out: List[Optional[int]] = []
    word = -1
    starts_new = True  # bpe: does the next piece start a new word?
    for k, tok in enumerate(tokens):
        if eos is not None and tok == eos:
            out.append(None)
            starts_new = True
            continue
        if style == "bpe":
            if starts_new:
                word += 1
            out.append(word)
            starts_new = not (tok.endswith(BPE_CONT) or (unk is not None and tok == unk))
        else:
            if word < 0 or starts_new or (tok.startswith(SPM_SPACE) and tok != unk):
                word += 1
            out.append(word)
            starts_new = False
    return out


def words(tokens: Sequence[str], style: str, eos: Optional[str] = "</s>", unk: Optional[str] = None) -> List[str]:
    """The words the pieces spell (markers removed, EOS dropped)."""
    idx = word_index(tokens, style, eos, unk)
    n = max((w for w in idx if w is not None), default=-1) + 1
    out = [""] * n
    for tok, w in zip(tokens, idx):
        if w is None:
            continue
        if style == "bpe":
            out[w] += tok[: -len(BPE_CONT)] if tok.endswith(BPE_CONT) else tok
        else:
            out[w] += tok.lstrip(SPM_SPACE)
    return out


def subword_to_word_links(links: Iterable[Link], src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                          style: str = "bpe", tgt_style: Optional[str] = None,
                          eos: Optional[str] = "</s>", unk: Optional[str] = None) -> List[Link]:
    """Word-level links (sorted) from piece-level ``(source piece, target piece)`` links.

    ``tgt_style`` defaults to ``style`` (joint BPE); pass it when the two sides are segmented
    differently.  A link index past the end of its token list by exactly one is the implicit EOS and
    is dropped; any further index is an error.  Pieces equal to ``unk`` continue a word (module docstring).
    """
    src_map = word_index(src_tokens, style, eos, unk)
    tgt_map = word_index(tgt_tokens, tgt_style or style, eos, unk)
    out = set()
    for i, j in links:
        for k, m, side in ((i, src_map, "source"), (j, tgt_map, "target")):
            if k < 0 or k > len(m):
                raise IndexError(f"{side} piece index {k} out of range for {len(m)} pieces (+ EOS)")
        if i == len(src_map) or j == len(tgt_map):
            continue  # implicit EOS
        wi, wj = src_map[i], tgt_map[j]
        if wi is None or wj is None:
            continue  # explicit EOS
        out.add((wi, wj))
    return sorted(out)
