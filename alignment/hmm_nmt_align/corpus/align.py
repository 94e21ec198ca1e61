"""Stage 6 of ``hmm-nmt-align-corpus``: the corpus aligned by both directions, streamed to temporary files that
replace the outputs when every line is done; Ctrl-C and SIGTERM wait while the outputs are created or renamed.

The models are loaded by a parameter, ``load(md, names, cpu, bf16, stage) -> (model, task)`` (:func:`_load_direction`;
a test passes a fake)."""
import contextlib
import functools
import os
import sys
import warnings
from typing import List, Optional, Sequence, Tuple

from hmm_nmt_align.base.atomic import atomic_output

from .device import _align_batch, _bf16, _device, _gpus
from .model_dir import DEFAULT_POOL, CorpusError, ModelDir
from .pool import mapper, spread, workers

ALIGN_CHUNK = 20000  # pairs aligned at a time: memory stays bounded whatever the corpus size


def _align_chunk(fwd, rev, opts, segmenter, decision, threshold, src, tgt) -> Tuple[dict, List[Tuple[int, str]],
                                                                                   dict]:
    """Links of one slice of lines, merged and per direction (as asked), its too-long lines and its piece counts:
    one pass of each model (with two threads and no workers, the two directions side by side)."""
    from hmm_nmt.hmm.precision import autocast
    from hmm_nmt_align.base.links import LinkOptions

    from ..raw_text import align_text

    both = bool(opts.output or opts.rev)
    with autocast("bf16" if _bf16(opts) else "fp32", _device(opts)):
        links, stats, errors = align_text(*fwd, src, tgt, segmenter, ["posterior"],
                                          LinkOptions(decision, threshold, False, opts.symmetrize if both else None,
                                                      DEFAULT_POOL),
                                          batch_size=_align_batch(opts), max_tokens=opts.align_max_tokens,
                                          rev=rev if both else None, scores=bool(opts.scores),
                                          directional=both and bool(opts.fwd or opts.rev),
                                          parallel=opts.parallel_align)
    out = {}
    if opts.output:
        sents = [sorted(sent) for sent in links["posterior"]]
        out["output"] = [[(i, j) for i, j, *_ in sent] for sent in sents]
        if opts.scores:
            out["scores"] = [[p for _, _, p in sent] for sent in sents]
    if opts.fwd:
        out["fwd"] = links["fwd:posterior" if both else "posterior"]
    if opts.rev:
        out["rev"] = links["rev:posterior"]
    return out, errors, stats


def _aligners(md: ModelDir, opts, stage: Optional[str] = None, both: bool = True, load=None):
    """The alignment setup (threads, logging) and both directions' models of ``stage`` (default: the final ones),
    each loaded by ``load`` (:func:`_load_direction`)."""
    import logging

    import torch

    # on a CPU with two threads or more: worker processes of one thread each (.pool); on a GPU, the two
    # directions side by side in two threads, as in training
    opts.procs = workers(opts, _device(opts).type == "cuda")
    opts.parallel_align = not opts.procs and opts.threads >= 2 and both
    torch.set_num_threads(1 if opts.procs else max(1, opts.threads // 2) if opts.parallel_align
                          else max(1, opts.threads))
    logging.getLogger("fairseq").setLevel(logging.WARNING)  # its per-model dictionary lines
    # torch's deprecation note on fairseq's attention masks, once per model: not the user's business
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask and attn_mask")
    load = load or _load_direction
    fwd, rev = (load(md, [pair[k] for pair in md.members()], opts.cpu, _bf16(opts), stage) for k in (0, 1))
    if _gpus(opts) >= 2:  # the two directions side by side on two GPUs, as in training
        rev[0].to("cuda:1")
    return fwd, rev


def align(md: ModelDir, opts, corpus, load=None) -> Tuple[List[Tuple[int, str]], Optional[str]]:
    """Stage 6: every line's links, merged and per direction (as asked), read from ``corpus`` (an
    :class:`.inputs.Corpus`) and streamed in input order to temporary
    files that replace the outputs when all lines are done; returns the lines too long for a model, and the
    warning for text mostly unknown to the model's dictionary (None when it is not). ``load``: see
    :func:`_aligners`."""
    from hmm_nmt_align.base.console import unknown_share_warning
    from hmm_nmt_align.base.links import parse_decision
    from hmm_nmt_align.base.segment import load_segmenter

    decision, threshold = parse_decision(opts.links)
    segmenter = load_segmenter(md.file("codes"), None)
    fwd, rev = _aligners(md, opts, both=bool(opts.output or opts.rev), load=load)
    bar = None
    if not opts.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(corpus), desc="aligning both directions", unit="pair", file=sys.stderr)
    paths = {k: p for k, p in (("output", opts.output), ("fwd", opts.fwd), ("rev", opts.rev),
                               ("scores", opts.scores)) if p}
    errors, counts = [], {}
    # Ctrl-C / SIGTERM only while aligning: never between creating the temporary files and registering their
    # cleanup, nor between the renames (a signal then is taken when the outputs are complete)
    job = functools.partial(_align_chunk, fwd, rev, opts, segmenter, decision, threshold)
    with _signals_held(), contextlib.ExitStack() as stack:
        files = {k: stack.enter_context(open(stack.enter_context(atomic_output(p)), "w", encoding="utf-8"))
                 for k, p in paths.items()}
        with _signals_held(False), mapper(job, opts.procs) as run:
            for keys, s, t in corpus.chunks(ALIGN_CHUNK):
                start = keys[0]
                out, e, stats = spread(run, opts.procs, s, t)
                errors += [(start + k, why) for k, why in e]
                for k in ("unk_src", "unk_tgt", "pieces_src", "pieces_tgt"):
                    counts[k] = counts.get(k, 0) + stats[k]
                for k, f in files.items():
                    if k == "scores":
                        f.write("".join(" ".join(f"{p:.4f}" for p in sent) + "\n" for sent in out[k]))
                    else:
                        f.write(_pharaoh(out[k]))
                if bar is not None:
                    bar.update(len(s))
        for f in files.values():
            f.close()  # before atomic_output renames them
    if bar is not None:
        bar.close()
    return errors, unknown_share_warning(counts, fwd[1].source_dictionary.unk_word, names=(
        "-i's sources" if opts.input else "-s", "-i's targets" if opts.input else "-t"))


def _load_direction(md: ModelDir, names: Sequence[str], cpu: bool, bf16: bool, stage: Optional[str] = None):
    """``(model, task)`` of one direction: its checkpoint (of ``stage``, default the final one), or with several
    seeds hmm-nmt-align's ensemble of theirs (their posteriors averaged)."""
    from hmm_nmt_align.base.console import ExtractionError
    from hmm_nmt_align.safe_checkpoint import CheckpointError

    from ..loading import load_aligner

    try:
        model, task = load_aligner(os.pathsep.join(md.checkpoint(name, stage) for name in names), md.file("bin"), cpu)
    except (ExtractionError, CheckpointError) as e:  # a checkpoint removed, emptied or replaced: one line
        raise CorpusError(f"--model-dir {md.path}: {e}") from None
    for member in getattr(model, "members", [model]):  # whatever precision trained it
        member.decoder.lexicon_dtype_name = "bf16" if bf16 else "fp32"
    return model, task


_HELD = {"depth": 0, "pending": False}  # _signals_held's state, read by the SIGINT/SIGTERM handler


@contextlib.contextmanager
def _signals_held(hold: bool = True):
    """Defer (``hold``) or allow Ctrl-C and SIGTERM in the block; one deferred is raised as KeyboardInterrupt
    where they are allowed again. A flag, not a signal mask: any thread may receive the signal, and Python runs
    the handler in the main thread."""
    saved = _HELD["depth"]
    _HELD["depth"] = saved + 1 if hold else 0
    try:
        if not hold:
            _raise_pending()
        yield
    finally:
        _HELD["depth"] = saved
    if not saved:
        _raise_pending()


def _raise_pending() -> None:
    if _HELD["pending"]:
        _HELD["pending"] = False
        raise KeyboardInterrupt


def _pharaoh(links) -> str:
    return "".join(" ".join(f"{i}-{j}" for i, j in sorted(sent)) + "\n" for sent in links)
