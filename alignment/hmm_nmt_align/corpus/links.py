"""Stage 4 of ``hmm-nmt-align-corpus``: the training pairs aligned by the first pass, written as the piece links
that the second pass's ``--load-alignments`` reads (``bin/train.align.src-tgt`` and ``bin/train.align.tgt-src``)."""
import os
import sys

from .align import ALIGN_CHUNK, _aligners
from .device import _bf16, _device
from .model_dir import DEFAULT_LINKS, DEFAULT_POOL, DEFAULT_SYMMETRIZE, CorpusError, ModelDir, _log
from .prepare import _split


def links(md: ModelDir, opts, src, tgt, load=None) -> None:
    """Stage 4: the training pairs aligned by the first pass (every seed; both directions merged by the default
    merge), as fairseq's piece alignments ``bin/train.align.src-tgt`` (and ``tgt-src``) for the second pass.
    ``load``: how a direction's first-pass models are loaded (see :func:`.align._aligners`)."""
    if md.done("links"):
        if md.data["done"]["links"].get("seeds") == len(md.members()):
            return
        md.forget_guide()  # more seeds: new links from all of them, and every second pass again
    from hmm_nmt.hmm.precision import autocast
    from hmm_nmt_align.base.links import LinkOptions, parse_decision
    from hmm_nmt_align.base.segment import load_segmenter

    from ..guide import piece_links, write_link_dataset
    from ..raw_text import align_text

    train_lines, _ = _split(src, tgt, opts.valid_lines, opts.patience)
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
