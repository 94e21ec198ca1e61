"""Stage 4 of ``hmm-nmt-align-corpus``: the training pairs aligned by the first pass, written as the piece links
that the second pass's ``--load-alignments`` reads (``train.align.src-tgt`` and ``train.align.tgt-src``).

The second pass is a fixed number of updates (``--guide-updates``): on a large corpus it sees a fraction of the
pairs, and aligning all of them would cost as much as the final alignment. It trains instead on a random sample
of the training pairs that its updates cannot exhaust (``guide-bin/``, sliced from ``bin/``), and only those are
aligned; the first epoch of a shuffled corpus is such a sample too. When the updates cover the corpus, every pair
is aligned and the second pass trains on ``bin/``."""
import os
import shutil
import sys

from .align import ALIGN_CHUNK, _aligners
from .device import _align_batch, _bf16, _device
from .model_dir import DEFAULT_LINKS, DEFAULT_POOL, DEFAULT_SYMMETRIZE, GUIDE_DATA, CorpusError, ModelDir, _log
from .pool import mapper, spread
from .prepare import _split


def guide_sample(md: ModelDir, opts):
    """The training pairs (indices into ``bin/train``, increasing) of the second pass's sample: pairs in a random
    order (``--seed``) until their batch tokens (fairseq's: the longer side, end of sentence included) reach
    ``--guide-updates`` times ``--max-tokens``. A batch holds at most that many tokens with its padding, so the
    updates end before the sample does. None when that is every pair."""
    import numpy as np
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    sides = [MMapIndexedDataset(md.file("bin", f"train.src-tgt.{side}")) for side in ("src", "tgt")]
    sizes = np.maximum(*(d.sizes.astype(np.int64) for d in sides))  # a copy: .sizes dies with its dataset's map
    del sides
    quota = opts.guide_updates * opts.max_tokens
    if int(sizes.sum()) <= quota:
        return None
    order = np.random.default_rng(opts.seed).permutation(len(sizes))
    n = int(np.searchsorted(np.cumsum(sizes[order]), quota)) + 1
    return np.sort(order[:n])


def _write_sample(md: ModelDir, sample, dest: str) -> None:
    """``dest``: a fairseq data folder of ``bin/``'s dictionaries and held-out pairs and the ``sample`` of its
    training pairs (sliced from the binarized files: nothing segmented again)."""
    from fairseq.data import Dictionary, indexed_dataset

    os.makedirs(dest)
    for name in os.listdir(md.file("bin")):
        if name.startswith(("dict.", "valid.")):
            shutil.copyfile(md.file("bin", name), os.path.join(dest, name))
    for side in ("src", "tgt"):
        data = indexed_dataset.MMapIndexedDataset(md.file("bin", f"train.src-tgt.{side}"))
        out = os.path.join(dest, f"train.src-tgt.{side}")
        # the dtype fairseq-preprocess chose for this dictionary
        builder = indexed_dataset.make_builder(out + ".bin", impl="mmap",
                                               vocab_size=len(Dictionary.load(md.file("bin", f"dict.{side}.txt"))))
        for k in sample:
            builder.add_item(data[int(k)])
        builder.finalize(out + ".idx")


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
    sample = guide_sample(md, opts)
    dest = md.file(GUIDE_DATA + ".new")
    for stale in (dest, md.file(GUIDE_DATA)):
        if os.path.isdir(stale):
            shutil.rmtree(stale)
    if sample is None:
        _log(f"aligning the {len(train_lines)} training pairs with the first pass, for the second")
        dest = md.file("bin")
    else:
        _log(f"aligning {len(sample)} of the {len(train_lines)} training pairs with the first pass (the second "
             f"pass's {opts.guide_updates} updates see fewer)")
        _write_sample(md, sample, dest)
        train_lines = [train_lines[k] for k in sample]
    fwd, rev = _aligners(md, opts, "train", load=load)
    segmenter = load_segmenter(md.file("codes"), None)
    opts_links = LinkOptions(*parse_decision(DEFAULT_LINKS), False, DEFAULT_SYMMETRIZE, DEFAULT_POOL)
    bar = None
    if not opts.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(train_lines), desc="first-pass links", unit="pair", file=sys.stderr)

    def job(s, t):
        with autocast("bf16" if _bf16(opts) else "fp32", _device(opts)):
            out, _, _ = align_text(*fwd, s, t, segmenter, ["posterior"], opts_links, batch_size=_align_batch(opts),
                                   max_tokens=opts.align_max_tokens, rev=rev, parallel=opts.parallel_align)
        # a line too long for a model: no links, a free row
        return {"rows": [piece_links(words, segmenter.segment(a)[1], segmenter.segment(b)[1])
                         for words, a, b in zip(out["posterior"], s, t)]}, [], {}

    def rows():
        with mapper(job, opts.procs) as run:
            for _, s, t in corpus.chunks(ALIGN_CHUNK, train_lines):
                yield from spread(run, opts.procs, s, t)[0]["rows"]
                if bar is not None:
                    bar.update(len(s))

    prefixes = [os.path.join(dest, f"train.align.{side}.tmp") for side in ("src-tgt", "tgt-src")]
    n_rows, n_links = write_link_datasets(prefixes, rows())
    if bar is not None:
        bar.close()
    for tmp, side in zip(prefixes, ("src-tgt", "tgt-src")):
        for ext in (".bin", ".idx"):
            if n_links:
                os.replace(tmp + ext, os.path.join(dest, f"train.align.{side}{ext}"))
            else:  # fairseq cannot map an empty file: the second pass trains on without links
                os.remove(tmp + ext)
    if not n_links:
        _log("warning: the first pass agreed on no link; the second pass trains on without links")
    if sample is not None:
        os.replace(dest, md.file(GUIDE_DATA))
    md.mark("links", seeds=len(md.members()), pairs=n_rows, links=n_links,
            **({"sample": n_rows} if sample is not None else {}))
