"""Word-tokenised sentence pairs segmented and binarized in memory for a model, and aligned.

Each word is segmented on its own (:class:`hmm_nmt_align.base.segment.Segmenter`), so the piece-to-word map is known
before the pieces meet the dictionary; the pieces are binarized with the model's dictionaries into a fairseq
``LanguagePairDataset`` and aligned by :mod:`hmm_nmt.aligner.matrices`. Used by the hub's ``align`` and
``translate(..., alignment=True)`` and by the raw-text path of ``hmm-nmt-align``.
"""
import concurrent.futures
import contextlib
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from hmm_nmt.aligner.matrices import dataset_matrices, links_by_method
from hmm_nmt_align.base.links import LinkOptions

__all__ = ["EncodedPair", "encode_pair", "pair_dataset", "too_long", "align_encoded"]


@dataclass
class EncodedPair:
    """A word-tokenised sentence pair segmented and binarized for one model (EOS appended to both sides).

    ``src_owner[k]``/``tgt_owner[k]``: the word of piece k, from the segmenter (never from the dictionary).
    """

    src: torch.Tensor
    tgt: torch.Tensor
    src_owner: List[int]
    tgt_owner: List[int]
    unk: int = 0


def _ids(pieces: Sequence[str], d) -> List[int]:
    """The dictionary's ids of the pieces, EOS appended: ``Dictionary.encode_line`` of the pieces joined by
    spaces, without its one tensor write per piece."""
    return [d.index(p) for p in pieces] + [d.eos()]


def encode_pair(src_words: Sequence[str], tgt_words: Sequence[str], segmenter, src_dict, tgt_dict) -> EncodedPair:
    sp, so = segmenter.segment(src_words)
    tp, to = segmenter.segment(tgt_words)
    src, tgt = _ids(sp, src_dict), _ids(tp, tgt_dict)
    unk = src.count(src_dict.unk()) + tgt.count(tgt_dict.unk())
    return EncodedPair(torch.tensor(src, dtype=torch.long), torch.tensor(tgt, dtype=torch.long), so, to, unk)


def pair_dataset(pairs: Sequence[EncodedPair], task):
    """An in-memory fairseq ``LanguagePairDataset`` of the pairs, padded as the task pads."""
    from fairseq.data import LanguagePairDataset

    src_sizes = np.array([len(p.src) for p in pairs], dtype=np.int64)
    tgt_sizes = np.array([len(p.tgt) for p in pairs], dtype=np.int64)
    cfg = task.cfg
    return LanguagePairDataset([p.src for p in pairs], src_sizes, task.source_dictionary,
                               [p.tgt for p in pairs], tgt_sizes, task.target_dictionary,
                               left_pad_source=getattr(cfg, "left_pad_source", True),
                               left_pad_target=getattr(cfg, "left_pad_target", False), shuffle=False)


def too_long(model, pairs: Sequence[EncodedPair]) -> Dict[int, str]:
    """{index: reason} of the pairs longer than the model's positions."""
    from fairseq import utils

    max_src, max_tgt = utils.resolve_max_positions(model.max_positions())
    bad = {}
    for k, p in enumerate(pairs):
        if len(p.src) > max_src or len(p.tgt) > max_tgt:
            bad[k] = (f"{len(p.src)} source / {len(p.tgt)} target pieces with EOS, longer than the model allows "
                      f"({max_src} / {max_tgt} positions)")
    return bad


def align_encoded(model, task, pairs: Sequence[EncodedPair], keep: Sequence[int], methods: Sequence[str],
                  opts: Optional[LinkOptions] = None, layers: Optional[Sequence[int]] = None,
                  batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False,
                  rev=None, rev_pairs: Optional[Sequence[EncodedPair]] = None,
                  desc: str = "aligning", scores: bool = False, directional: bool = False,
                  parallel: bool = False) -> Dict[str, Dict[int, list]]:
    """{method: {index: word links}} for the pairs ``keep`` (indices into ``pairs``).

    ``rev = (model, task)`` and ``rev_pairs`` (the same sentences encoded target-to-source for it) add the
    reverse direction for ``opts.symmetrize``; ``scores`` makes each link ``(source, target, confidence)``;
    ``directional`` adds each direction's own links (:func:`links_by_method`). ``parallel``: the two
    directions' matrices are computed at the same time in two threads (torch releases the GIL in its ops),
    each with the calling thread's torch thread count; their matrices are then held until both are done.
    """
    opts = opts or LinkOptions()
    items = dataset_matrices(model, pair_dataset(pairs, task), task.source_dictionary, task.target_dictionary,
                             keep, methods, layers, False, batch_size, max_tokens, progress, desc)
    rev_items = None
    if rev is not None:
        rm, rt = rev
        rev_items = dataset_matrices(rm, pair_dataset(rev_pairs, rt), rt.source_dictionary, rt.target_dictionary,
                                     keep, methods, layers, False, batch_size, max_tokens, progress, desc + " (reverse)")
        if parallel:
            items, rev_items = _both_at_once(items, rev_items)

    def owners(it):
        return pairs[it.id].src_owner, pairs[it.id].tgt_owner, True, True

    return links_by_method(items, methods, owners, opts, rev_items, scores, directional)


def _both_at_once(items, rev_items):
    """Both generators run to the end side by side. An error in either (or Ctrl-C here) stops the other at
    its next sentence and is raised here, so an interrupted run exits within one batch."""
    threads = torch.get_num_threads()
    # autocast is per thread: the workers compute in the caller's precision
    cast = {d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")}
    stop = threading.Event()

    def run(gen):
        torch.set_num_threads(threads)  # the worker thread's own intra-op setting
        out = []
        with contextlib.ExitStack() as stack:
            for d, (on, dtype) in cast.items():
                if on:
                    stack.enter_context(torch.autocast(d, dtype=dtype))
            for it in gen:
                if stop.is_set():
                    break
                out.append(it)
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(run, items), pool.submit(run, rev_items)]
        try:
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    raise f.exception()
        except BaseException:
            stop.set()
            raise
        return futures[0].result(), futures[1].result()
