"""Command-line entry points ``hmm-nmt-aer`` and ``hmm-nmt-symmetrize``.

Bad input (malformed link, index out of range, mismatched sentence counts, unreadable file, empty files, an
output that is one of the inputs) prints one line ``PROG: error: FILE:LINE: message`` on stderr and exits
with status 2; no output file is written. Ctrl-C: ``PROG: interrupted``, status 130. ``hmm-nmt-aer`` warns
when one file never uses index 0 while the other does (a 1-based file scored as 0-based).
"""
import argparse
import json
import math
import sys
from typing import List, Optional

from .aer import corpus_scores, sentence_scores
from .base.console import clobbered_input, interruptible
from .base.symmetrize import METHODS, symmetrize
from .io import (
    FORMATS,
    AlignmentFormatError,
    atomic_write,
    check_same_count,
    format_pharaoh,
    read_alignments,
    read_pharaoh,
    read_tokens,
    validate_lengths,
)

__all__ = ["aer_main", "symmetrize_main", "format_summary"]


def _die(prog: str, err: Exception) -> int:
    sys.stderr.write(f"{prog}: error: {err}\n")
    return 2


def _pct(x: float) -> str:
    return "nan" if math.isnan(x) else f"{100 * x:.2f}"


def format_summary(scores: dict) -> str:
    """``AER=<pct> P=<pct> R=<pct> F=<pct> sentences=<n>``."""
    return " ".join(f"{k}={_pct(scores[k])}" for k in ("AER", "P", "R", "F")) + f" sentences={scores['sentences']}"


def _json_value(x):
    if isinstance(x, float):
        return None if math.isnan(x) else round(100 * x, 4)
    return x


def _uses_zero(alignments) -> bool:
    return any(i == 0 or j == 0 for a in alignments for i, j in a.possible)


def base_hint(gold, hyp) -> Optional[str]:
    """A warning when one file never uses index 0 (on either side) while the other does: the sign of a
    1-based file read as 0-based (every link then misses by one), e.g. a 1-based gold against the 0-based
    output of hmm-nmt-align."""
    if not any(a.possible for a in gold) or not any(a.possible for a in hyp):
        return None
    g0, h0 = _uses_zero(gold), _uses_zero(hyp)
    if g0 == h0:
        return None
    one, other, flag = ("GOLD", "HYP", "--gold-one-based") if h0 else ("HYP", "GOLD", "--hyp-one-based")
    return (f"{one} never uses index 0 (source or target) while {other} does: if {one} is 1-based, give {flag} "
            "(or --one-based when both are); scored as given")


@interruptible("hmm-nmt-aer")
def aer_main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="hmm-nmt-aer",
        description="Alignment error rate (Och & Ney 2000) of HYP against GOLD, with precision, recall and F. "
                    "GOLD may mark possible links (i?j, ipj, or P in naacl format); every HYP link counts.")
    p.add_argument("gold", metavar="GOLD")
    p.add_argument("hyp", metavar="HYP")
    p.add_argument("--src", metavar="S", help="source sentences (one per line) to check indices and line counts")
    p.add_argument("--tgt", metavar="T", help="target sentences (one per line) to check indices and line counts")
    p.add_argument("--json", action="store_true",
                   help="print a JSON object (percentages) with the same keys plus per-sentence values")
    p.add_argument("--one-based", action="store_true", help="indices (and naacl sentence numbers) start at 1")
    p.add_argument("--gold-one-based", action="store_true",
                   help="GOLD only is 1-based (e.g. the Hansards gold's i-j/ipj against hmm-nmt-align's 0-based HYP)")
    p.add_argument("--hyp-one-based", action="store_true", help="HYP only is 1-based")
    p.add_argument("--format", choices=FORMATS, default="pharaoh", help="format of both files (default pharaoh)")
    p.add_argument("--gold-format", choices=FORMATS, help="format of GOLD (overrides --format)")
    p.add_argument("--hyp-format", choices=FORMATS, help="format of HYP (overrides --format)")
    p.add_argument("--reverse-hyp", action="store_true", help="swap source and target in HYP before scoring")
    args = p.parse_args(argv)
    gfmt, hfmt = args.gold_format or args.format, args.hyp_format or args.format
    gold_one = args.one_based or args.gold_one_based
    hyp_one = args.one_based or args.hyp_one_based
    try:
        src_lens = [len(s) for s in read_tokens(args.src)] if args.src else None
        tgt_lens = [len(s) for s in read_tokens(args.tgt)] if args.tgt else None
        if src_lens is not None and tgt_lens is not None and len(src_lens) != len(tgt_lens):
            check_same_count(src_lens, tgt_lens, args.src, args.tgt)
        n = len(src_lens) if src_lens is not None else (len(tgt_lens) if tgt_lens is not None else None)

        def read_hyp(count):
            if args.reverse_hyp:  # the file's first index is a target position
                return read_alignments(args.hyp, hfmt, hyp_one, count, tgt_lens, src_lens, reverse=True)
            return read_alignments(args.hyp, hfmt, hyp_one, count, src_lens, tgt_lens)

        # a naacl file does not know how many sentences there are: take the other file's count
        if gfmt == "naacl" and hfmt != "naacl" and n is None:
            hyp = read_hyp(None)
            gold = read_alignments(args.gold, gfmt, gold_one, len(hyp), src_lens, tgt_lens)
        else:
            gold = read_alignments(args.gold, gfmt, gold_one, n, src_lens, tgt_lens)
            hyp = read_hyp(len(gold) if n is None else n)
        check_same_count(gold, hyp, args.gold, args.hyp)
        if not gold:
            raise AlignmentFormatError(f"no sentences in GOLD nor in HYP ({args.hyp}): empty files, nothing to score",
                                       args.gold)
        if not any(g.possible for g in gold) and not any(h.possible for h in hyp):
            raise AlignmentFormatError(f"no link in GOLD nor in HYP ({args.hyp}, {len(gold)} sentences): the AER "
                                       "is undefined", args.gold)
    except AlignmentFormatError as e:
        return _die(p.prog, e)
    hint = base_hint(gold, hyp)
    if hint:
        sys.stderr.write(f"{p.prog}: warning: {hint}\n")
    scores = corpus_scores(gold, hyp)
    if args.json:
        obj = {k: _json_value(v) for k, v in scores.items()}
        obj["per_sentence"] = [{k: _json_value(v) for k, v in d.items()} for d in sentence_scores(gold, hyp)]
        sys.stdout.write(json.dumps(obj) + "\n")
    else:
        sys.stdout.write(format_summary(scores) + "\n")
    return 0


@interruptible("hmm-nmt-symmetrize")
def symmetrize_main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="hmm-nmt-symmetrize",
        description="Merge two directional Pharaoh alignments exactly like fast_align's `atools -c METHOD "
                    "-i FWD -j REV`. FWD: source-to-target; REV: target-to-source, already written as "
                    "source-target pairs.")
    p.add_argument("fwd", metavar="FWD")
    p.add_argument("rev", metavar="REV")
    p.add_argument("--method", "-c", required=True, choices=list(METHODS))
    p.add_argument("-o", "--output", default="-", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("--src", metavar="S", help="source sentences, to check indices and line counts")
    p.add_argument("--tgt", metavar="T", help="target sentences, to check indices and line counts")
    p.add_argument("--one-based", action="store_true", help="input and output indices start at 1")
    args = p.parse_args(argv)
    hit = clobbered_input(args.output, (("FWD", args.fwd), ("REV", args.rev), ("--src", args.src), ("--tgt", args.tgt)))
    if hit:
        return _die(p.prog, AlignmentFormatError(f"-o is the same file as {hit[0]} {hit[1]}: refusing to overwrite "
                                                 "an input", args.output))
    try:
        src_lens = [len(s) for s in read_tokens(args.src)] if args.src else None
        tgt_lens = [len(s) for s in read_tokens(args.tgt)] if args.tgt else None
        fwd = read_pharaoh(args.fwd, args.one_based)
        rev = read_pharaoh(args.rev, args.one_based)
        check_same_count(fwd, rev, args.fwd, args.rev)
        # indices are checked after the count so that a short file is reported as such
        validate_lengths(fwd, args.fwd, src_lens, tgt_lens)
        validate_lengths(rev, args.rev, src_lens, tgt_lens)
        for path, al in ((args.fwd, fwd), (args.rev, rev)):
            for k, a in enumerate(al):
                if a.sure != a.possible:
                    raise AlignmentFormatError("possible links (i?j / ipj) are not allowed in aligner output",
                                               path, k + 1)
        out = "".join(format_pharaoh(symmetrize(f.sure, r.sure, args.method), args.one_based) + "\n"
                      for f, r in zip(fwd, rev))
        atomic_write(args.output, out)
    except AlignmentFormatError as e:
        return _die(p.prog, e)
    except OSError as e:
        return _die(p.prog, AlignmentFormatError(f"cannot write: {e.strerror}", args.output))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(aer_main())
