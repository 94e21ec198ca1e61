"""Stage 4 of ``hmm-nmt-align-corpus``: the training pairs aligned by the first pass, written as the piece links
that the second pass's ``--load-alignments`` reads (``bin/train.align.src-tgt`` and ``bin/train.align.tgt-src``)."""
import os
import sys

from .align import ALIGN_CHUNK, _aligners
from .device import _align_batch, _bf16, _device
from .model_dir import DEFAULT_LINKS, DEFAULT_POOL, DEFAULT_SYMMETRIZE, CorpusError, ModelDir, _log
from .prepare import _split


def links(md: ModelDir, opts, corpus, load=None) -> None:
    """Stage 4: the training pairs aligned by the first pass (every seed; both directions merged by the default
    merge), as fairseq's piece alignments ``bin/train.align.src-tgt`` (and ``tgt-src``) for the second pass,
    streamed to both files a chunk at a time. ``load``: how a direction's first-pass models are loaded (see
    :func:`.align._aligners`)."""
    if md.done("links"):
        if md.data["done"]["links"].get("seeds") == len(md.members()):
            return
        md.forget_guide()  # more seeds: new links from all of them, and every second pass again
    from hmm_nmt.hmm.precision import autocast
    from hmm_nmt_align.base.links import LinkOptions, parse_decision
    from hmm_nmt_align.base.segment import load_segmenter

    from ..guide import piece_links, write_link_datasets
    from ..raw_text import align_text

    train_lines, _ = _split(corpus, opts.valid_lines, opts.patience)
    if len(train_lines) != md.data["done"]["bin"]["train_pairs"]:  # the binarized pairs are another split
        raise CorpusError(f"--model-dir {md.path}: bin/ holds {md.data['done']['bin']['train_pairs']} training "
                          f"pairs, the corpus {len(train_lines)} with --valid-lines {opts.valid_lines}")
    _log(f"aligning the {len(train_lines)} training pairs with the first pass, for the second")
    fwd, rev = _aligners(md, opts, "train", load=load)
    segmenter = load_segmenter(md.file("codes"), None)
    opts_links = LinkOptions(*parse_decision(DEFAULT_LINKS), False, DEFAULT_SYMMETRIZE, DEFAULT_POOL)
    bar = None
    if not opts.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(train_lines), desc="first-pass links", unit="pair", file=sys.stderr)

    def rows():
        for _, s, t in corpus.chunks(ALIGN_CHUNK, train_lines):
            with autocast("bf16" if _bf16(opts) else "fp32", _device(opts)):
                out, _, _ = align_text(*fwd, s, t, segmenter, ["posterior"], opts_links,
                                       batch_size=_align_batch(opts), max_tokens=opts.align_max_tokens, rev=rev,
                                       parallel=opts.parallel_align)
            for words, a, b in zip(out["posterior"], s, t):  # a line too long for a model: no links, a free row
                yield piece_links(words, segmenter.segment(a)[1], segmenter.segment(b)[1])
            if bar is not None:
                bar.update(len(s))

    prefixes = [md.file("bin", f"train.align.{side}.tmp") for side in ("src-tgt", "tgt-src")]
    n_rows, n_links = write_link_datasets(prefixes, rows())
    if bar is not None:
        bar.close()
    for tmp, side in zip(prefixes, ("src-tgt", "tgt-src")):
        for ext in (".bin", ".idx"):
            if n_links:
                os.replace(tmp + ext, md.file("bin", f"train.align.{side}{ext}"))
            else:  # fairseq cannot map an empty file: the second pass trains on without links
                os.remove(tmp + ext)
    if not n_links:
        _log("warning: the first pass agreed on no link; the second pass trains on without links")
    md.mark("links", seeds=len(md.members()), pairs=n_rows, links=n_links)
