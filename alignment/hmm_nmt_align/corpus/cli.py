"""The command line of ``hmm-nmt-align-corpus`` (its options, and the stages run in order): see the package's
docstring, which is the parser's epilog."""
import argparse
import contextlib
import os
import signal
import sys
import textwrap
from typing import List, Optional

from hmm_nmt_align.base.console import LONG_LINES, too_long_warning

from .align import _HELD, _load_direction, align
from .budget import EPOCHS, MAX_UPDATES, MIN_UPDATES, resolve
from .checks import MAX_POSITIONS, check_batch_fits, check_options
from .device import _device
from .inputs import Corpus, _check_outputs
from .links import links
from .model_dir import (
    ARCH_KEYS,
    DEFAULT_LINKS,
    DEFAULT_SYMMETRIZE,
    GROWABLE,
    KEY_DEFAULTS,
    MODEL_KEYS,
    VERSION,
    CorpusError,
    ModelDir,
    _config,
    _log,
)
from .prepare import _run, prepare
from .train import _targets, popen_trainer, train


def _usage() -> str:
    """The package's docstring (the stages): read, not imported, as the package imports this module."""
    return sys.modules[__package__].__doc__


PROG = "hmm-nmt-align-corpus"


class _Parser(argparse.ArgumentParser):
    """argparse's errors in one line (no usage block): the flag and what is wrong, exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from hmm_nmt_align.base.argtypes import int_at_least
    from hmm_nmt_align.base.symmetrize import METHODS as HARD

    positive, nonnegative = int_at_least(1), int_at_least(0)

    def _hours(text):  # "1.5", "1.5h", "90m" or "5400s"
        scale = {"h": 1.0, "m": 1 / 60, "s": 1 / 3600}.get(text.strip()[-1:].lower())
        try:
            v = float(text.strip()[:-1] if scale else text) * (scale or 1.0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"hours (1.5), or minutes (90m) or seconds (5400s), got {text!r}") \
                from None
        if not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return v

    p = _Parser(prog=PROG, description=_usage().split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog=_usage().split("\n\n", 2)[2] + "\n\n" + textwrap.fill(LONG_LINES.format(prog=PROG), 115))
    io_ = p.add_argument_group("input and output")
    io_.add_argument("-s", "--src", metavar="FILE", help="source text, word-tokenised, one sentence per line")
    io_.add_argument("-t", "--tgt", metavar="FILE", help="target text, line-parallel to -s")
    io_.add_argument("-i", "--input", metavar="FILE", help="one 'source ||| target' pair per line (instead of -s/-t)")
    io_.add_argument("-o", "--output", metavar="FILE", help="the merged alignment (source-target Pharaoh)")
    io_.add_argument("-f", "--fwd", metavar="FILE", help="the source-to-target model's alignment alone")
    io_.add_argument("-r", "--rev", metavar="FILE", help="the target-to-source model's alignment alone, written "
                                                         "source-target")
    io_.add_argument("--scores", metavar="FILE",
                     help="with -o: the confidence of each merged link, one line per input line, in -o's order (the "
                          "soft-merged posterior the link was chosen on: filter links by it)")
    io_.add_argument("--model-dir", required=True, metavar="DIR",
                     help="where the model is made (BPE codes, dictionary, both checkpoints, manifest.json)")
    mode = io_.add_mutually_exclusive_group()
    mode.add_argument("--align-only", action="store_true", help="align with the finished model, train nothing")
    mode.add_argument("--continue", dest="cont", action="store_true",
                      help="train the finished model --max-update more updates on this text, then align")
    m = p.add_argument_group("model and training (a new model; the Hansards settings)")
    vocab = m.add_mutually_exclusive_group()
    vocab.add_argument("--vocab-size", type=positive, default=None, metavar="N",
                       help="joint BPE symbols, the characters included (default 4000: as many merges as the "
                            "characters leave, so about N types in any script; none where the script has more "
                            "characters than N)")
    vocab.add_argument("--merges", type=positive, default=None, metavar="N",
                       help="joint BPE merges instead of --vocab-size (the types are N plus the characters)")
    m.add_argument("--embed-dim", type=positive, default=128)
    m.add_argument("--ffn-dim", type=positive, default=512)
    m.add_argument("--layers", type=positive, default=2, help="encoder and decoder layers (default 2)")
    m.add_argument("--heads", type=positive, default=4)
    m.add_argument("--lexicon", choices=["softmax", "class", "separable"], default="separable",
                   help="the lexicon p(e | j): separable (default: the softmax lexicon without its ReLU, every "
                        "normaliser one matmul over V), softmax over the vocabulary (about twice the training time), "
                        "or class-factored")
    m.add_argument("--target-context", choices=["past", "both"], default="past",
                   help="what the lexicon and the alignment of target word i see: the words before i (past, "
                        "default: the models also translate), or the words after i too (both: aligners only)")
    m.add_argument("--max-tokens", type=positive, default=2048, help="tokens per training batch")
    m.add_argument("--lr", type=float, default=2e-3)
    m.add_argument("--warmup-updates", type=positive, default=None, metavar="N",
                   help="linear warm-up (default: 200, at most a tenth of --max-update)")
    m.add_argument("--lr-schedule", choices=["inverse-sqrt", "linear"], default="linear",
                   help="after the warm-up: linear decay to 0 at the last update (default), or inverse square root")
    m.add_argument("--dropout", type=float, default=0.1)
    m.add_argument("--label-smoothing", type=float, default=0.1,
                   help="label smoothing of the lexicon at each step of the sum over alignments (0: the exact NLL)")
    m.add_argument("--seed", type=nonnegative, default=1)
    m.add_argument("--seeds", type=positive, default=1,
                   help="train N models per direction, with seeds --seed, --seed+1, ...; the alignment averages their "
                        "posteriors (an ensemble: N times the training and alignment time). A finished model "
                        "directory rerun with a larger N trains only the new seeds")
    m.add_argument("--max-update", type=positive, default=None, metavar="N",
                   help="updates per direction (default: from the corpus, %d passes over its words within %d-%d "
                        "updates; with --continue, that many more)" % (EPOCHS, MIN_UPDATES, MAX_UPDATES))
    m.add_argument("--guide-updates", type=nonnegative, default=None, metavar="N",
                   help="the second pass: each model trains N more updates toward the links of the first pass (the "
                        "training pairs aligned by both directions, every seed; default: a quarter of --max-update; "
                        "0: one pass). A finished model directory rerun with another N (or --guide-weight) makes "
                        "only the second pass again")
    m.add_argument("--guide-weight", type=float, default=4.0,
                   help="the weight of -log p(first-pass links | E, F) in the second pass's loss (default 4: chosen "
                        "among 1, 4 and 16 on the Hansards trial pairs)")
    m.add_argument("--time-limit", type=_hours, metavar="HOURS",
                   help="stop each direction's first pass after this much training (1.5, 90m, 5400s) if --max-update "
                        "is not reached first; the linear schedule decays to 0 at whichever comes first")
    m.add_argument("--patience", type=nonnegative, default=0,
                   help="stop a direction when its loss on --valid-lines held-out pairs of the corpus has not "
                        "improved for this many validations (default 0: train --max-update updates)")
    m.add_argument("--validate-interval", type=positive, default=400, help="updates between validations")
    m.add_argument("--valid-lines", type=positive, default=500, help="held-out pairs (at most a tenth of the corpus)")
    a = p.add_argument_group("alignment")
    a.add_argument("--symmetrize", default=DEFAULT_SYMMETRIZE, choices=["prod", "mean"] + list(HARD),
                   help="how -o merges the directions (default mean)")
    a.add_argument("--links", default=DEFAULT_LINKS,
                   help="argmax, mutual, union or threshold:T (default threshold:0.5): T trades recall for precision")
    a.add_argument("--align-max-tokens", type=int_at_least(MAX_POSITIONS), default=4000,
                   help=f"tokens per alignment batch (default 4000; at least {MAX_POSITIONS}, the longest line a model "
                        "aligns)")
    r = p.add_argument_group("resources")
    r.add_argument("--threads", type=positive, default=max(1, min(os.cpu_count() or 1, 16)),
                   help="CPU threads, split between the two directions (default: the machine's cores)")
    r.add_argument("--align-workers", type=int_at_least(0), default=None, metavar="N",
                   help="processes of one thread each that share the pairs of the alignment stages on a CPU "
                        "(default: one per --threads; 0: the --threads in this process, a direction per thread)")
    r.add_argument("--cpu", action="store_true", help="stay on the CPU when a GPU is present")
    r.add_argument("--precision", choices=["fp32", "bf16", "auto"], default="fp32",
                   help="the matmuls of training and alignment: fp32 (default), bf16 (autocast; parameters, "
                        "optimizer and the HMM sums stay fp32), or auto: bf16 where the CPU multiplies it natively "
                        "(AVX512-BF16, AMX), else fp32. bf16 training is for CPUs")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def run(opts, launch=popen_trainer, preprocess=_run, load=_load_direction) -> int:
    """The stages in order, each skipped where the manifest says it is done. The trainer ``launch``
    (:func:`.train.train`), the command runner ``preprocess`` (:func:`.prepare.prepare`) and the model loader
    ``load`` (:func:`.align._aligners`) are parameters: a test passes fakes. Everything that can be refused is
    refused before the first stage; the model directory is locked while the command uses it."""
    from hmm_nmt_align.base.dirlock import DirectoryBusy, locked
    from hmm_nmt_align.base.links import parse_decision

    if bool(opts.input) == bool(opts.src or opts.tgt) or (not opts.input and not (opts.src and opts.tgt)):
        raise CorpusError("give -s SRC -t TGT, or -i FILE ('src ||| tgt' lines)")
    try:
        parse_decision(opts.links)
    except ValueError as e:
        raise CorpusError(f"--links: {e}") from None
    if opts.time_limit is not None and opts.align_only:
        raise CorpusError("--time-limit trains: it cannot go with --align-only")
    check_options(opts)
    _check_outputs(opts)
    if opts.precision == "bf16" and not opts.align_only and _device(opts).type == "cuda":
        raise CorpusError("--precision bf16 trains on CPUs only (fairseq 0.12's --bf16 is its TPU path): train on "
                          "the GPU in fp32, then --align-only --precision bf16")
    corpus = Corpus(opts.src, opts.tgt, opts.input)
    if opts.align_only:
        if not os.path.isdir(opts.model_dir):
            raise CorpusError(f"--align-only: --model-dir {opts.model_dir} holds no finished model (it does not exist)")
    else:  # a line takes at least as many pieces as words: a batch that cannot hold its words is refused now
        check_batch_fits(((k, max(a, b)) for k, (a, b) in enumerate(zip(corpus.src_len, corpus.tgt_len)) if a and b),
                         opts.max_tokens, "words")
        os.makedirs(opts.model_dir, exist_ok=True)
    try:
        with locked(opts.model_dir, exclusive=not opts.align_only):
            return _stages(opts, corpus, launch, preprocess, load)
    except DirectoryBusy as e:
        raise CorpusError(str(e)) from None


def _stages(opts, corpus, launch, preprocess, load) -> int:
    md = ModelDir(opts.model_dir)
    if opts.align_only:
        if not md.finished():
            raise CorpusError(f"--align-only: --model-dir {opts.model_dir} holds no finished model")
    else:
        # a model that has started training keeps its settings where the command line is silent; --continue
        # trains a new budget (that many more updates) from this corpus
        saved = {**KEY_DEFAULTS, **md.data["config"]} if _trained(md) and not opts.cont else None
        opts.budget_note = resolve(opts, corpus.src_len, corpus.tgt_len, saved)
        _settle_manifest(md, opts, corpus.digest, len(corpus))
        targets = _targets(md, opts)
        md.save()
        if opts.budget_note and not md.finished():
            _log(f"training budget from the corpus: {opts.budget_note}")
        if opts.cont or not md.done("bin"):
            _log(f"segmenting and binarizing {len(corpus)} pairs")
            with md.timed("prepare"):
                prepare(md, opts, corpus, run=preprocess)
        with md.timed("train"):
            train(md, opts, targets, not opts.no_progress, launch=launch)
        if opts.guide_updates:
            with md.timed("links"):
                links(md, opts, corpus, load=load)
            with md.timed("guide"):
                train(md, opts, {name: (opts.guide_updates, None) for pair in md.members(opts.seeds)
                                 for name in pair}, not opts.no_progress, stage="guide", launch=launch)
    _log(f"aligning {len(corpus)} pairs")
    # a reader (--align-only) writes nothing into the model directory: other readers may share it
    with (md.timed("align") if not opts.align_only else contextlib.nullcontext()):
        errors, warning = align(md, opts, corpus, load=load)
    if warning:
        _log(f"warning: {warning}")
    path = opts.input or opts.src
    for k, why in errors:  # the contract of hmm-nmt-align (LONG_LINES): the line left empty, exit 0
        sys.stderr.write(too_long_warning(PROG, path, k, why) + "\n")
    _log(f"{len(corpus)} lines aligned; {corpus.empty_sides()} with an empty side"
         + (f", {len(errors)} too long for the model (left empty)" if errors else ""))
    return 0


def _trained(md: ModelDir) -> bool:
    """Whether the directory's model has started training (its settings are then its own)."""
    return md.data is not None and (any(k.split(".", 1)[0] in ("train", "guide") for k in md.data.get("done", {}))
                                    or md.training_started())


def _settle_manifest(md: ModelDir, opts, digest: str, lines: int) -> None:
    """A new model directory's manifest; or the one there checked against this command: --continue takes its
    settings, more --seeds or another second pass grow it, anything else is refused."""
    finished = md.finished()
    trained = _trained(md)
    if md.data is None or (not trained and not opts.cont):
        # new; or nothing trained yet (a run refused or stopped before training): this command's settings hold
        if md.data is not None and (md.data["corpus"], md.data["config"]) != (digest, _config(opts)):
            md.discard_prepared()
        md.data = {"version": VERSION, "config": _config(opts), "corpus": digest, "lines": lines}
        md.save()
    elif opts.cont:
        if not finished:
            raise CorpusError(f"--continue: --model-dir {opts.model_dir} holds no finished model; rerun the "
                              "command that made it to finish it")
        saved = {**KEY_DEFAULTS, **md.data["config"]}
        # the checkpoints' shape and number, and the second pass, whatever this command line says
        for k in ARCH_KEYS + ("seeds", "guide_updates", "guide_weight"):
            setattr(opts, k, saved[k])
        md.forget_guide()  # the first pass trains on: its links and the second pass are made again
        md.data["continued"] = md.data.get("continued", []) + [
            {"corpus": digest, "updates": opts.max_update, "time_limit": opts.time_limit}]
        md.data["corpus"] = digest
        md.save()
    else:
        saved = {**KEY_DEFAULTS, **md.data["config"]}
        grown = {k: getattr(opts, k) for k in GROWABLE}
        if md.data["corpus"] == digest and opts.seeds >= saved["seeds"] and dict(saved, **grown) == _config(opts) \
                and any(saved[k] != v for k, v in grown.items()):  # more seeds, or another second pass
            if (saved["guide_updates"], saved["guide_weight"]) != (opts.guide_updates, opts.guide_weight):
                md.forget_guide()
            md.data["config"].update(grown)
            md.save()
            saved = _config(opts)
        if md.data["corpus"] != digest or saved != _config(opts):
            changed = [k for k in MODEL_KEYS if saved.get(k) != getattr(opts, k)]
            raise CorpusError(f"--model-dir {opts.model_dir} was made from another corpus or settings"
                              + (f" ({', '.join(changed)})" if changed else "")
                              + ": use --align-only to align with it, --continue to train it further, or "
                              "another --model-dir")


def _terminated(signum, frame):
    """A scheduler's SIGTERM stops the trainers and leaves no partial output, as Ctrl-C does; both wait while
    the outputs are created or renamed (_signals_held)."""
    if _HELD["depth"]:
        _HELD["pending"] = True
        return
    raise KeyboardInterrupt


def main(argv: Optional[List[str]] = None) -> int:
    opts = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell made it ignored
        signal.signal(signal.SIGINT, _terminated)
    try:
        return run(opts)
    except CorpusError as e:
        _log(f"error: {e}")
        return 2
    except OSError as e:  # a full disk, a folder without write permission: no output was replaced
        _log(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        return 2
    except KeyboardInterrupt:
        _log("interrupted; run the same command again to continue")
        return 130
