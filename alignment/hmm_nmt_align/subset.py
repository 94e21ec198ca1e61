"""Forced alignment of the reference pairs of a binarized fairseq subset (``hmm-nmt-align --data``).

Matrices come from :mod:`hmm_nmt.aligner.matrices` (the model layer), cut to each sentence's real tokens;
word boundaries come from the dictionary's strings (``--bpe``) or from the segmented text the subset was
binarized from (``--pieces``). See :mod:`hmm_nmt_align.extract` for the conventions.
"""
from typing import Iterator, List, Optional, Sequence, Tuple

from hmm_nmt.aligner.matrices import ExtractionError, SentenceMatrices, dataset_matrices, links_by_method
from hmm_nmt_align.base.links import LinkOptions
from hmm_nmt_align.base.subword import BPE_STYLES, subword_to_word_links, word_index

from .io import AlignmentFormatError, read_tokens
from .loading import load_subset

__all__ = ["BPE_STYLES", "extract_matrices", "word_links", "align_subset"]



def _sentence_ids(dataset, ids: Optional[Sequence[int]]) -> Tuple[List[int], List[int]]:
    """(ids to compute, ids skipped because a side is empty); sizes include the EOS fairseq appends."""
    n = len(dataset)
    if ids is None:
        ids = range(n)
        strict = False
    else:
        strict = True
    keep, empty = [], []
    for k in ids:
        if not 0 <= k < n:
            raise ExtractionError(f"sentence index {k} out of range: the subset has {n} sentences (0-based)")
        if dataset.src_sizes[k] <= 1 or dataset.tgt_sizes[k] <= 1:
            if strict:
                side = "source" if dataset.src_sizes[k] <= 1 else "target"
                raise ExtractionError(f"sentence {k} has an empty {side} side: nothing to align")
            empty.append(int(k))
        else:
            keep.append(int(k))
    return keep, empty


def _check_positions(model, dataset, ids: Sequence[int]) -> None:
    from fairseq import utils

    max_src, max_tgt = utils.resolve_max_positions(model.max_positions())
    for k in ids:
        if dataset.src_sizes[k] > max_src or dataset.tgt_sizes[k] > max_tgt:
            raise ExtractionError(
                f"sentence {k} ({dataset.src_sizes[k]} source / {dataset.tgt_sizes[k]} target tokens with EOS) is "
                f"longer than the model allows ({max_src} / {max_tgt} positions)")


def extract_matrices(model, task, subset: str, ids: Optional[Sequence[int]] = None,
                     methods: Sequence[str] = ("alignment",), layers: Optional[Sequence[int]] = None,
                     transition: bool = False, batch_size: Optional[int] = 32, max_tokens: Optional[int] = None,
                     progress: bool = False) -> Iterator[SentenceMatrices]:
    """Yield :class:`SentenceMatrices` for the sentences ``ids`` (sample ids = 0-based line numbers of the
    subset; default all sentences with two non-empty sides), in batch order (sort by ``.id`` if needed).

    Sentences are batched by length (``batch_size`` sentences and/or ``max_tokens`` tokens per batch);
    the result does not depend on the batching (tested). All ``methods`` share one encoder pass per batch.
    """
    dataset = load_subset(task, subset)
    keep, _ = _sentence_ids(dataset, ids)
    _check_positions(model, dataset, keep)
    yield from dataset_matrices(model, dataset, task.source_dictionary, task.target_dictionary, keep, methods,
                                layers, transition, batch_size, max_tokens, progress, f"aligning {subset}")


def word_links(links: Sequence[Tuple[int, int]], src_pieces: Sequence[str], tgt_pieces: Sequence[str],
               bpe: str = "none", unk: Optional[str] = None) -> List[Tuple[int, int]]:
    """Map piece links to word links (``bpe`` is a key of :data:`BPE_STYLES`); pieces exclude EOS.

    Pieces equal to ``unk`` continue a word (:mod:`hmm_nmt_align.base.subword`), so no link leaves the sentence.
    """
    style = BPE_STYLES[bpe]
    if style is None:
        return sorted(set(links))
    return subword_to_word_links(links, src_pieces, tgt_pieces, style=style, eos=None, unk=unk)


def _read_pieces(prefix: str, task, dataset) -> Tuple[List[List[str]], List[List[str]]]:
    """Segmented text PREFIX.SRC / PREFIX.TGT, checked against the binarized subset, line by line."""
    out = []
    for lang, sizes in ((task.cfg.source_lang, dataset.src_sizes), (task.cfg.target_lang, dataset.tgt_sizes)):
        path = f"{prefix}.{lang}"
        try:
            lines = read_tokens(path)
        except AlignmentFormatError as e:
            raise ExtractionError(f"--pieces: {e}") from None
        if len(lines) != len(sizes):
            raise ExtractionError(f"--pieces: {path} has {len(lines)} lines but the subset has {len(sizes)} sentences")
        for k, (toks, size) in enumerate(zip(lines, sizes)):
            if len(toks) + 1 != size:
                raise ExtractionError(f"--pieces: {path}:{k + 1}: {len(toks)} tokens but the binarized sentence "
                                      f"has {size - 1} (+ EOS): not the text this subset was made from")
        out.append(lines)
    return out[0], out[1]


def _owners(pieces: Sequence[str], style: Optional[str], unk: Optional[str] = None) -> List[int]:
    return list(range(len(pieces))) if style is None else word_index(pieces, style, eos=None, unk=unk)


def align_subset(model, task, subset: str, method, layers: Optional[Sequence[int]] = None,
                 bpe: str = "none", pieces: Optional[str] = None, null_eos: bool = False,
                 batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False,
                 opts: Optional[LinkOptions] = None, rev=None):
    """Word links ``[(i source word, j target word), ...]`` for every sentence of ``subset`` in corpus order,
    and statistics (``sentences``, ``empty``, ``links``, ``unk``).

    ``method`` is one method name (returns a list of links per sentence) or a sequence of them (returns
    ``{method: links}``; one encoder pass per batch for all). ``rev``: ``(model, task)`` of the
    target-to-source model on the same data-bin, for ``opts.symmetrize``.
    """
    methods = [method] if isinstance(method, str) else list(method)
    opts = opts or LinkOptions(null_eos=null_eos)
    dataset = load_subset(task, subset)
    _, empty = _sentence_ids(dataset, None)
    text = _read_pieces(pieces, task, dataset) if pieces else None
    sd, td = task.source_dictionary, task.target_dictionary
    style = BPE_STYLES[bpe]
    n_unk = [0]

    def owners(it):
        eos_s, eos_t = it.src_tokens[-1] == sd.eos_word, it.tgt_tokens[-1] == td.eos_word
        src = it.src_tokens[:-1] if eos_s else it.src_tokens
        tgt = it.tgt_tokens[:-1] if eos_t else it.tgt_tokens
        if text is not None:
            return _owners(text[0][it.id], style), _owners(text[1][it.id], style), eos_s, eos_t
        if style is not None:
            n_unk[0] += src.count(sd.unk_word) + tgt.count(td.unk_word)
        return _owners(src, style, sd.unk_word), _owners(tgt, style, td.unk_word), eos_s, eos_t

    items = extract_matrices(model, task, subset, None, methods, layers, False, batch_size, max_tokens, progress)
    rev_items = None
    if rev is not None:
        rev_items = extract_matrices(rev[0], rev[1], subset, None, methods, layers, False, batch_size, max_tokens,
                                     progress)
    by_method = links_by_method(items, methods, owners, opts, rev_items)
    result = {}
    for m in methods:
        links = [by_method[m].get(k) for k in range(len(dataset))]
        for k in empty:
            links[k] = []
        missing = [k for k, v in enumerate(links) if v is None]
        assert not missing, f"sentences {missing[:5]} were not aligned"
        result[m] = links
    stats = {"sentences": len(dataset), "empty": len(empty), "links": sum(len(v) for v in result[methods[0]]),
             "unk": n_unk[0]}
    return (result[methods[0]] if isinstance(method, str) else result), stats
