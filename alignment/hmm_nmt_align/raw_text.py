"""Forced alignment of word-tokenised parallel text (``hmm-nmt-align --src-text/--tgt-text``).

Each word is segmented on its own and the pieces are binarized in memory with the checkpoint's dictionaries
(:mod:`hmm_nmt.aligner.pairs`); a line too long for a model is reported and left empty.
"""
from typing import List, Optional, Sequence, Tuple

from hmm_nmt.aligner.pairs import align_encoded, encode_pair, too_long
from hmm_nmt_align.base.console import ExtractionError
from hmm_nmt_align.base.links import LinkOptions
from hmm_nmt_align.base.segment import load_segmenter

from .io import AlignmentFormatError, read_tokens

__all__ = ["read_text_pair", "read_text_inputs", "check_max_tokens", "align_text"]


def read_text_pair(src_path: str, tgt_path: str) -> Tuple[List[List[str]], List[List[str]]]:
    """Word-tokenised parallel text; a different number of lines is an error naming both files."""
    try:
        src, tgt = read_tokens(src_path), read_tokens(tgt_path)
    except AlignmentFormatError as e:
        raise ExtractionError(str(e)) from None
    except OSError as e:
        raise ExtractionError(f"{e.filename}: cannot read: {e.strerror}") from None
    if len(src) != len(tgt):
        raise ExtractionError(f"--src-text {src_path} has {len(src)} lines but --tgt-text {tgt_path} has {len(tgt)}: "
                              "the two sides must be line-parallel")
    return src, tgt


def read_text_inputs(src_path: str, tgt_path: str, bpe_codes: Optional[str], spm_model: Optional[str]):
    """``(src_lines, tgt_lines, segmenter)`` for ``--src-text/--tgt-text`` with ``--bpe-codes`` or
    ``--spm-model``; read before any model is loaded, so that bad text fails fast."""
    src, tgt = read_text_pair(src_path, tgt_path)
    flag, path = ("--bpe-codes", bpe_codes) if bpe_codes else ("--spm-model", spm_model)
    try:
        segmenter = load_segmenter(bpe_codes, spm_model)
    except OSError as e:
        raise ExtractionError(f"{flag} {path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # the file's own error names the file and line
        raise ExtractionError(f"{flag}: {e}") from None
    return src, tgt, segmenter


def check_max_tokens(pairs, keep: Sequence[int], max_tokens: Optional[int], path: Optional[str] = None) -> None:
    """fairseq batches by ``max(source, target)`` tokens with EOS: a pair above ``max_tokens`` fits no batch.
    Refused naming --max-tokens and the line (rather than fairseq's assertion)."""
    if max_tokens is None:
        return
    sizes = {k: max(len(pairs[k].src), len(pairs[k].tgt)) for k in keep}
    for k, n in sizes.items():
        if n > max_tokens:
            where = f"line {k + 1} of {path}" if path else f"pair {k + 1}"
            raise ExtractionError(f"--max-tokens {max_tokens} is smaller than {where} ({len(pairs[k].src)} source / "
                                  f"{len(pairs[k].tgt)} target pieces with EOS): give --max-tokens "
                                  f"{max(sizes.values())} or more")


def align_text(model, task, src_lines: Sequence[Sequence[str]], tgt_lines: Sequence[Sequence[str]], segmenter,
               methods: Sequence[str], opts: Optional[LinkOptions] = None, layers: Optional[Sequence[int]] = None,
               batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False, rev=None,
               path: Optional[str] = None, scores: bool = False, directional: bool = False,
               parallel: bool = False):
    """Word links of word-tokenised sentence pairs, in input order.

    Returns ``({method: [links per line]}, stats, errors)``: a line with an empty side gets ``[]``; a line
    too long for a model gets ``[]`` and an entry ``(index, reason)`` in ``errors`` (the rest is aligned).
    With ``scores`` each link is ``(source word, target word, confidence)``. ``directional`` and
    ``parallel`` (with ``rev``): see :func:`hmm_nmt.aligner.pairs.align_encoded`.
    """
    pairs = [encode_pair(s, t, segmenter, task.source_dictionary, task.target_dictionary)
             for s, t in zip(src_lines, tgt_lines)]
    bad = too_long(model, pairs)
    rev_pairs = None
    if rev is not None:
        rt = rev[1]
        rev_pairs = [encode_pair(t, s, segmenter, rt.source_dictionary, rt.target_dictionary)
                     for s, t in zip(src_lines, tgt_lines)]
        for k, why in too_long(rev[0], rev_pairs).items():
            bad.setdefault(k, "reverse model: " + why)
    empty = [k for k, (s, t) in enumerate(zip(src_lines, tgt_lines)) if not s or not t]
    keep = [k for k in range(len(pairs)) if k not in bad and (src_lines[k] and tgt_lines[k])]
    check_max_tokens(pairs, keep, max_tokens, path)
    if rev_pairs is not None:
        check_max_tokens(rev_pairs, keep, max_tokens, path)
    by_method = align_encoded(model, task, pairs, keep, methods, opts, layers, batch_size, max_tokens, progress,
                              rev, rev_pairs, desc="aligning", scores=scores, directional=directional,
                              parallel=parallel)
    result = {m: [links.get(k, []) for k in range(len(pairs))] for m, links in by_method.items()}
    stats = {"sentences": len(pairs), "empty": len(empty), "links": sum(len(v) for v in result[methods[0]]),
             "unk": sum(p.unk for p in pairs), "too_long": len(bad)}
    # pieces without EOS, and how many are <unk>, per side (hmm-nmt-align warns when a side is mostly unknown)
    for side, d in (("src", task.source_dictionary), ("tgt", task.target_dictionary)):
        toks = [getattr(p, side)[:-1] for p in pairs]
        stats[f"pieces_{side}"] = sum(len(t) for t in toks)
        stats[f"unk_{side}"] = sum(int(t.eq(d.unk()).sum()) for t in toks)
    return result, stats, sorted(bad.items())
