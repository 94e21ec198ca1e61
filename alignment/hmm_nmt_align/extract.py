"""Forced alignment of reference sentence pairs with a trained fairseq checkpoint (``hmm-nmt-align``).

For every sentence pair (F, E) of a binarized subset the model is run on the *reference* target (teacher
forcing), which gives a target-by-source matrix per sentence; each target token is linked to the source
token with the largest value (argmax per row):

``alignment``  (``transformer_dhmm``) the model's alignment distribution. Zero order: p(j | e_<i, f)
               (Eq. 8 of the paper). First order: the predicted distribution
               sum_j' p(j | j', e_<i, f) q_{i-1}(j'), where q_{i-1} is the forward (filtered) state
               p(b_{i-1} = j' | e_<i, f) over the reference prefix.
``posterior``  (``transformer_dhmm``) p(b_i = j | E, F), lexicon included (forward-backward; the HMM's
               "posterior alignment").
``attention``  (fairseq's plain ``transformer``) the cross-attention weights averaged over all heads of
               the chosen decoder layers (1-based ``--layers``; default the last two, i.e. layers 5 and 6 of
               a 6-layer model, the baseline of Wang et al. 2021 following Garg et al. 2019).

Row i of each matrix belongs to the reference token e_i (the decoder's query at step i predicts e_i from
e_<i). fairseq left-pads the source and right-pads the target, and appends EOS to both: matrices are cut
to the real tokens of each sentence (by the padding mask, so any padding side works), the argmax of a
target row is taken over the real source tokens (EOS excluded, as fairseq's ``--print-alignment`` does; with
``--null-eos`` a token whose argmax is EOS stays unaligned instead), and the target EOS row is dropped.
With ``--bpe subword_nmt`` (``@@``) or ``--bpe sentencepiece`` (``▁``) the piece links are mapped to
words by :mod:`hmm_nmt_align.base.subword` (two words are linked when any of their pieces are).

Output: word-level Pharaoh (``i-j``, 0-based source word i, target word j), one line per sentence, in
the original corpus order (fairseq sample ids). Sentences with an empty side give an empty line.

Raw text (``--src-text/--tgt-text`` with ``--bpe-codes``, ``--spm-model`` or ``--bpe none``): each word is
segmented on its own (:mod:`hmm_nmt_align.base.segment`), so the piece-to-word map is known before the pieces meet
the dictionary; they are binarized in memory with the checkpoint's dictionaries. Binarized input without
the text takes word boundaries from the dictionary's strings, where an ``<unk>`` piece has lost its marker:
it is taken to continue a word (:mod:`hmm_nmt_align.base.subword`), which never produces a link outside the sentence.

Links: ``--links`` chooses the decision on each matrix (:mod:`hmm_nmt_align.base.links`: argmax, mutual, union,
threshold:T); ``--rev-path`` adds the target-to-source model, merged before the decision (``prod``,
``mean``) or after it (the atools heuristics of :mod:`hmm_nmt_align.base.symmetrize`). ``--pool words`` pools each
matrix from pieces to words (:func:`hmm_nmt_align.base.links.pool_words`) before all of that, instead of deciding on
the pieces and linking two words when any of their pieces are (``--pool pieces``, the default).

This module is the command line; the work is done by, and its names re-exported from, the model layer's
:mod:`hmm_nmt.aligner` (matrices dispatched to the model's ``alignment_matrices`` or the attention path,
in-memory pairs) and :mod:`hmm_nmt_align.base.links` (link decisions), and by :mod:`hmm_nmt_align.loading` (checkpoint,
subset), :mod:`hmm_nmt_align.subset` (binarized input) and :mod:`hmm_nmt_align.raw_text` (text input).
"""
import argparse
import contextlib
import filecmp
import importlib
import logging
import os
import sys
import warnings
from typing import TYPE_CHECKING, List, Optional, Tuple

from hmm_nmt_align.base.console import (
    LONG_LINES,
    ExtractionError,
    clobbered_input,
    interruptible,
    output_inside,
    too_long_warning,
    unknown_share_warning,
)
from hmm_nmt_align.base.dirlock import DirectoryBusy, locked
from hmm_nmt_align.base.links import (  # noqa: F401
    METHODS,
    POOLS,
    SOFT,
    LinkOptions,
    argmax_links,
    parse_decision,
    sentence_word_links,
)
from hmm_nmt_align.base.subword import BPE_STYLES
from hmm_nmt_align.base.symmetrize import METHODS as HARD_SYMMETRIZATIONS

from .io import atomic_write, format_pharaoh

# The model layer (fairseq, torch) is imported once the arguments are checked, so that --help, a bad flag and
# Ctrl-C answer at once; its names are re-exported here on first use (PEP 562).
_LAZY = {
    "hmm_nmt.aligner.matrices": ("SentenceMatrices", "available_methods", "batch_matrices", "dataset_matrices",
                                 "default_layers", "model_type", "parse_layers", "unavailable"),
    "hmm_nmt.aligner.pairs": ("EncodedPair", "align_encoded", "encode_pair", "pair_dataset", "too_long"),
    "hmm_nmt_align.loading": ("load_model", "load_subset"),
    "hmm_nmt_align.raw_text": ("align_text", "read_text_inputs", "read_text_pair"),
    "hmm_nmt_align.subset": ("align_subset", "extract_matrices", "word_links"),
}
if TYPE_CHECKING:  # the lazy names, for linters and type checkers
    from hmm_nmt.aligner.matrices import (  # noqa: F401
        SentenceMatrices,
        available_methods,
        batch_matrices,
        dataset_matrices,
        default_layers,
        model_type,
        parse_layers,
        unavailable,
    )
    from hmm_nmt.aligner.pairs import EncodedPair, align_encoded, encode_pair, pair_dataset, too_long  # noqa: F401

    from .loading import load_model, load_subset  # noqa: F401
    from .raw_text import align_text, read_text_inputs, read_text_pair  # noqa: F401
    from .subset import align_subset, extract_matrices, word_links  # noqa: F401
_LAZY_NAMES = {name: module for module, names in _LAZY.items() for name in names}
_LAZY_NAMES["_unavailable"] = "hmm_nmt.aligner.matrices"  # its name before it moved there


def __getattr__(name):
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), "unavailable" if name == "_unavailable" else name)
    globals()[name] = value
    return value

__all__ = ["METHODS", "BPE_STYLES", "ExtractionError", "SentenceMatrices", "LinkOptions", "EncodedPair", "load_model",
           "model_type", "available_methods", "default_layers", "parse_layers", "load_subset", "batch_matrices",
           "extract_matrices", "dataset_matrices", "argmax_links", "word_links", "sentence_word_links",
           "align_subset", "encode_pair", "pair_dataset", "too_long", "align_encoded", "read_text_pair",
           "align_text", "main"]

# ----------------------------------------------------------------------------------------------- CLI


def setup_logging() -> None:
    """INFO on stderr for the command-line tools.

    Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in fairseq.tasks.text_to_speech), which
    would flood stderr with matplotlib's font search; fairseq's own CLIs avoid it the same way.
    """
    logging.getLogger().setLevel(logging.INFO)
    # fairseq's self-attention passes a float causal mask with a bool padding mask (harmless, per batch)
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask and attn_mask")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hmm-nmt-align",
        description="Forced word alignment of sentence pairs with a fairseq checkpoint, written as word-level "
                    "Pharaoh (source-target, 0-based) in input order. Input: the reference pairs of a binarized "
                    "subset (--data), or word-tokenised parallel text (--src-text/--tgt-text), segmented here.",
        epilog="Text input: " + LONG_LINES.format(prog="hmm-nmt-align"))
    p.add_argument("--path", metavar="CKPT[:CKPT...]",
                   help="checkpoint (.pt) of a transformer_dhmm or transformer; several transformer_dhmm checkpoints "
                        "of one dictionary, separated by ':', are an ensemble: their matrices are averaged")
    p.add_argument("--model-dir", metavar="DIR[:DIR...]",
                   help="instead of --path/--rev-path/--data/--bpe-codes: a model directory of hmm-nmt-align-corpus "
                        "(text input; both directions merged as that command does, --method posterior "
                        "--symmetrize mean --links threshold:0.5 --pool words, unless given); several, separated by "
                        "':', made from one corpus with other seeds, are an ensemble in each direction (as are the seeds of "
                        "one directory made with --seeds)")
    p.add_argument("--data", metavar="DIR",
                   help="fairseq-preprocess output directory (binarized input); with --src-text: a folder with the "
                        "model's dict.SRC.txt/dict.TGT.txt (default: next to the checkpoint, else its training data-bin)")
    p.add_argument("--subset", default="test", help="binarized input: subset to align (default: test)")
    p.add_argument("--src-text", metavar="FILE", help="word-tokenised source text, one sentence per line")
    p.add_argument("--tgt-text", metavar="FILE", help="word-tokenised target text, line-parallel to --src-text")
    p.add_argument("--bpe-codes", metavar="CODES", help="text input: subword-nmt codes the model was trained with")
    p.add_argument("--spm-model", metavar="MODEL", help="text input: SentencePiece model the model was trained with")
    p.add_argument("--method", metavar="M[,M2]",
                   help="alignment: the alignment distribution (transformer_dhmm); posterior: p(b_i=j|E,F) "
                        "(transformer_dhmm); attention: the cross-attention averaged over all heads of --layers "
                        "(plain transformer). Several, comma-separated, share one encoder pass; -o then needs "
                        "{method} in its name")
    p.add_argument("--links", metavar="D",
                   help="argmax (default: each target word its best source word), mutual, union or threshold:T "
                        "(every link with probability > T; many-to-many)")
    p.add_argument("--rev-path", metavar="CKPT[:CKPT...]",
                   help="target-to-source checkpoint (or an ensemble, as --path): align both directions and merge "
                        "them with --symmetrize")
    p.add_argument("--rev-data", metavar="DIR", help="--data of the reverse checkpoint (default: as for --data)")
    p.add_argument("--symmetrize", choices=list(SOFT) + list(HARD_SYMMETRIZATIONS),
                   help="with --rev-path: prod or mean combine the two directions' matrices before --links (soft); "
                        "the atools heuristics merge the two directions' links after it (default: grow-diag, the "
                        "best on the toy dev set)")
    p.add_argument("--pool", choices=list(POOLS),
                   help="pieces (default): --links and --symmetrize work on the subword-piece matrices and two words "
                        "are linked when any of their pieces are; words: each direction's matrix is first pooled to "
                        "words (per target word, the mean over its pieces of the probability summed over the pieces "
                        "of each source word), then --links/--symmetrize decide on the words (not with --null-eos)")
    p.add_argument("--layers", metavar="L1,L2", help="attention: 1-based decoder layers to average "
                                                    "(default: the last two, e.g. 5,6 of 6)")
    p.add_argument("--bpe", choices=sorted(BPE_STYLES),
                   help="binarized input: subword segmentation of the data, to map piece links back to words "
                        "(subword_nmt: '@@ ' continuation; sentencepiece: '\u2581' word start); text input: "
                        "'none' when the words are the model's tokens")
    p.add_argument("--pieces", metavar="PREFIX",
                   help="binarized input: segmented text the subset was binarized from (PREFIX.SRC_LANG, "
                        "PREFIX.TGT_LANG): its pieces' markers give the word boundaries (without it, pieces that "
                        "are <unk> in the dictionary are taken to continue a word)")
    p.add_argument("--null-eos", action="store_true",
                   help="--links argmax: a target token whose argmax is the source EOS stays unaligned (EOS as the "
                        "empty word); default: the argmax is over the real source tokens")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="sentences per batch (default 32)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="tokens per batch (default: no limit)")
    p.add_argument("--reverse", action="store_true",
                   help="write target-source pairs (j-i): for the reverse-direction model of a symmetrization")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is available")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-o", "--output", default="-", metavar="OUT", help="output file (default: stdout)")
    return p


def _apply_model_dir(args) -> None:
    """Fill the checkpoint, data and segmentation options from ``--model-dir`` (and the defaults of
    ``hmm-nmt-align-corpus``), or the plain defaults without it."""
    if not args.model_dir:
        if args.path is None:
            raise ExtractionError("give --path CKPT (or --model-dir DIR of hmm-nmt-align-corpus)")
        if args.method is None:
            raise ExtractionError("--method is required with --path (alignment, posterior or attention)")
        args.links = args.links or "argmax"
        args.pool = args.pool or "pieces"
        return
    from .corpus import DEFAULT_LINKS, DEFAULT_POOL, DEFAULT_SYMMETRIZE, ModelDir

    given = [f for f, a in (("--path", "path"), ("--rev-path", "rev_path"), ("--data", "data"),
                            ("--rev-data", "rev_data"), ("--bpe-codes", "bpe_codes"), ("--spm-model", "spm_model"),
                            ("--bpe", "bpe"), ("--pieces", "pieces")) if getattr(args, a) is not None]
    if given:
        raise ExtractionError(f"--model-dir holds the checkpoints, dictionaries and BPE codes: drop {', '.join(given)}")
    if args.src_text is None or args.tgt_text is None:
        raise ExtractionError("--model-dir aligns text: give --src-text and --tgt-text")
    from .corpus import CorpusError

    try:
        dirs = [ModelDir(d) for d in args.model_dir.split(os.pathsep)]
    except CorpusError as e:  # a manifest this tool did not write
        raise ExtractionError(str(e)) from None
    for md in dirs:
        if md.data is None or not md.finished():
            raise ExtractionError(f"--model-dir {md.path}: not a finished model directory of hmm-nmt-align-corpus "
                                  "(no manifest.json with both directions trained, both passes)")
    for md in dirs[1:]:  # an ensemble reads one segmentation and one dictionary
        for part in (("codes",), ("bin", "dict.src.txt"), ("bin", "dict.tgt.txt")):
            if not filecmp.cmp(dirs[0].file(*part), md.file(*part), shallow=False):
                raise ExtractionError(f"--model-dir: {md.path} and {dirs[0].path} have different "
                                      f"{'/'.join(part)}: not one corpus and --merges")
    # every seed of every directory (hmm-nmt-align-corpus --seeds) is a member of the ensemble
    args.path, args.rev_path = (os.pathsep.join(md.checkpoint(pair[k]) for md in dirs for pair in md.members())
                                for k in (0, 1))
    args.data = args.rev_data = dirs[0].file("bin")
    args.bpe_codes = dirs[0].file("codes")
    args.method = args.method or "posterior"
    args.symmetrize = args.symmetrize or DEFAULT_SYMMETRIZE
    args.links = args.links or DEFAULT_LINKS
    args.pool = args.pool or DEFAULT_POOL


def checkpoints(text: Optional[str]) -> List[str]:
    """The checkpoints of ``--path``/``--rev-path`` (several, separated by ':', are an ensemble)."""
    return [p for p in (text or "").split(os.pathsep) if p]


def _check_args(args) -> Tuple[List[str], LinkOptions]:
    _apply_model_dir(args)
    for name in ("batch_size", "max_tokens"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise ExtractionError(f"--{name.replace('_', '-')} must be positive, got {v}")
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if not methods or bad:
        raise ExtractionError(f"--method: unknown method {bad[0] if bad else args.method!r}; "
                              f"expected {', '.join(METHODS)} (comma-separated)")
    methods = list(dict.fromkeys(methods))
    if len(methods) > 1 and "{method}" not in args.output:
        raise ExtractionError("-o: with several methods the output name needs {method}, e.g. -o test.{method}.align")
    try:
        decision, threshold = parse_decision(args.links)
    except ValueError as e:
        raise ExtractionError(f"--links: {e}") from None
    if args.null_eos and decision != "argmax":
        raise ExtractionError("--null-eos applies to --links argmax only")
    if args.null_eos and args.pool == "words":
        raise ExtractionError("--null-eos does not apply to --pool words: the pooled word matrix has no EOS column "
                              "(its argmax is over the real source words); use --pool pieces")
    if args.symmetrize and not args.rev_path:
        raise ExtractionError("--symmetrize needs --rev-path (the target-to-source checkpoint)")
    sym = (args.symmetrize or "grow-diag") if args.rev_path else None
    for out in {args.output.replace("{method}", m) for m in methods}:
        if out != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise ExtractionError(f"-o: directory of {out} does not exist")
    if args.layers is not None and "attention" not in methods:
        raise ExtractionError("--layers applies to --method attention only")
    text = args.src_text is not None or args.tgt_text is not None
    if text:
        if args.src_text is None or args.tgt_text is None:
            raise ExtractionError("--src-text and --tgt-text go together")
        if args.pieces:
            raise ExtractionError("--pieces is for binarized input; with --src-text the pieces are made here")
        given = [n for n, v in (("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model),
                                ("--bpe none", args.bpe == "none")) if v]
        if len(given) != 1:
            raise ExtractionError("text input needs exactly one of --bpe-codes CODES, --spm-model MODEL or --bpe none"
                                  + (f" (got {' and '.join(given)})" if given else ""))
        need = {"subword_nmt": ("--bpe-codes", args.bpe_codes), "sentencepiece": ("--spm-model", args.spm_model)}
        if args.bpe in need and not need[args.bpe][1]:
            raise ExtractionError(f"--bpe {args.bpe} with text input needs {need[args.bpe][0]} (the model's segmentation)")
        for flag, path in (("--src-text", args.src_text), ("--tgt-text", args.tgt_text),
                           ("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model)):
            if path is not None and not readable_file(path):
                raise ExtractionError(f"{flag}: file not found: {path}")
    else:
        if args.data is None:
            raise ExtractionError("give --data DATA-BIN (binarized input) or --src-text/--tgt-text (text input)")
        if args.bpe_codes or args.spm_model:
            raise ExtractionError("--bpe-codes/--spm-model are for text input (--src-text/--tgt-text); binarized "
                                  "input takes --bpe subword_nmt|sentencepiece")
    outputs = sorted({args.output.replace("{method}", m) for m in methods} - {"-"})
    for out in outputs:
        for folder in (args.model_dir or "").split(os.pathsep):
            if folder and output_inside(out, folder):  # its manifest, codes, text and checkpoints are one unit
                raise ExtractionError(f"-o {out} is inside --model-dir {folder}: refusing to write into a model "
                                      "directory (hmm-nmt-align-corpus keeps it); write the alignment elsewhere")
        hit = clobbered_input(out, input_files(args))
        if hit:
            raise ExtractionError(f"-o {out} is the same file as {hit[0]} {hit[1]}: refusing to overwrite an input")
    return methods, LinkOptions(decision, threshold, args.null_eos, sym, args.pool)


def readable_file(path: str) -> bool:
    """An input that can be read once: a regular file, ``/dev/stdin``, a process substitution (``/dev/fd/N``)
    or a FIFO; not a folder, nothing missing. (Its size is never looked at.)"""
    return os.path.exists(path) and not os.path.isdir(path)


def _folder_files(flag: str, folder: Optional[str]):
    if folder and os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if name.startswith("dict.") or name.endswith((".bin", ".idx")):
                yield f"{flag}'s", os.path.join(folder, name)


def input_files(args) -> List[Tuple[str, str]]:
    """``(flag, path)`` of every file the command reads: the checkpoints, texts, segmentation models, the
    dictionaries and binarized subsets of ``--data``/``--rev-data``, the ``--pieces`` files."""
    out = [(f, getattr(args, a, None)) for f, a in (("--src-text", "src_text"), ("--tgt-text", "tgt_text"),
                                                    ("--bpe-codes", "bpe_codes"), ("--spm-model", "spm_model"))]
    out += list(_folder_files("--data", getattr(args, "data", None)))
    out += list(_folder_files("--rev-data", getattr(args, "rev_data", None)))
    for flag in ("--path", "--rev-path"):  # the dictionaries next to a checkpoint may be the ones it loads
        for ck in checkpoints(getattr(args, flag[2:].replace("-", "_"), None)):
            out += [(flag, ck)] + list(_folder_files(f"the {flag} folder", os.path.dirname(os.path.abspath(ck))))
    pieces = getattr(args, "pieces", None)
    if pieces:
        folder, base = os.path.split(os.path.abspath(pieces))
        if os.path.isdir(folder):
            out += [("--pieces", os.path.join(folder, n)) for n in sorted(os.listdir(folder))
                    if n.startswith(base + ".")]
    return [(f, p) for f, p in out if p]


@interruptible("hmm-nmt-align")
def main(argv: Optional[List[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    line_errors: List[Tuple[int, str]] = []
    stack = contextlib.ExitStack()
    try:
        methods, opts = _check_args(args)  # before fairseq is imported: a bad flag answers at once
        for d in (args.model_dir or "").split(os.pathsep) if args.model_dir else ():
            try:  # read while no run trains it (hmm-nmt-align-corpus holds it exclusively then)
                stack.enter_context(locked(d, exclusive=False))
            except DirectoryBusy as e:
                raise ExtractionError(str(e)) from None
        for flag, text in (("--path", args.path), ("--rev-path", args.rev_path)):
            for ck in checkpoints(text):
                if not os.path.isfile(ck):
                    raise ExtractionError(f"{flag}: checkpoint not found: {ck}")
        text = args.src_text is not None
        if text:  # fail on the text before spending time on the model
            from .raw_text import read_text_inputs

            src_lines, tgt_lines, segmenter = read_text_inputs(args.src_text, args.tgt_text, args.bpe_codes,
                                                                 args.spm_model)
        from hmm_nmt.aligner.matrices import available_methods, model_type, parse_layers, unavailable

        from .loading import load_aligner

        setup_logging()
        model, task = load_aligner(args.path, args.data, args.cpu)
        for m in methods:
            avail = available_methods(model)
            if m not in avail:
                raise ExtractionError(unavailable(m, model_type(model), avail))
        rev = None
        if args.rev_path:
            rev_data = args.rev_data or (args.data if not text else None)
            rev = load_aligner(args.rev_path, rev_data, args.cpu, flag="--rev-path",
                               data_flag="--rev-data" if args.rev_data else "--data")
            for m in methods:
                if m not in available_methods(rev[0]):
                    raise ExtractionError("--rev-path: " + unavailable(m, model_type(rev[0]), available_methods(rev[0])))
        layers = parse_layers(args.layers, model) if "attention" in methods else None
        progress = not args.no_progress
        if text:
            from .raw_text import align_text

            links, stats, line_errors = align_text(model, task, src_lines, tgt_lines, segmenter, methods, opts, layers,
                                                   args.batch_size, args.max_tokens, progress, rev, path=args.src_text)
            warn = unknown_share_warning(stats, task.source_dictionary.unk_word)
            if warn:
                sys.stderr.write(f"{p.prog}: warning: {warn}\n")
        else:
            from .subset import align_subset

            links, stats = align_subset(model, task, args.subset, methods, layers, args.bpe or "none", args.pieces,
                                        args.null_eos, args.batch_size, args.max_tokens, progress, opts, rev)
            if stats["unk"]:
                sys.stderr.write(f"{p.prog}: warning: {stats['unk']} pieces are {task.source_dictionary.unk_word} in "
                                 "the dictionary; their subword markers are lost, so each was taken to continue a "
                                 "word (links stay inside the sentence, but a word may be merged with its "
                                 "neighbour): give --pieces PREFIX with the segmented text, or align the text with "
                                 "--src-text/--tgt-text\n")
        for m in methods:
            out = "".join(format_pharaoh([(j, i) if args.reverse else (i, j) for i, j in sent]) + "\n"
                          for sent in links[m])
            atomic_write(args.output.replace("{method}", m), out)
    except ExtractionError as e:
        sys.stderr.write(f"{p.prog}: error: {e}\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"{p.prog}: error: {args.output}: cannot write: {e.strerror}\n")
        return 2
    finally:
        stack.close()
    for k, why in line_errors:
        sys.stderr.write(too_long_warning(p.prog, args.src_text, k, why) + "\n")
    desc = ",".join(methods) + (f" (layers {','.join(map(str, layers))})" if layers else "")
    if opts.symmetrize:
        desc += f", both directions merged by {opts.symmetrize}"
    sys.stderr.write(f"{p.prog}: {stats['sentences']} sentences ({stats['empty']} with an empty side"
                     + (f", {len(line_errors)} too long, left empty" if line_errors else "")
                     + f"), {stats['links']} word links, method {desc}, links {args.links}"
                     + (", pooled to words" if opts.pool == "words" else "") + "\n")
    return 0  # a line too long for the model is not a failure of the run (LONG_LINES)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
