"""Statistical word-alignment baselines scored with this package's symmetrization and AER.

    python -m hmm_nmt_align.baselines SRC TGT GOLD [--method grow-diag] [--train-src X --train-tgt Y]
                                  [--aligners eflomal,fast_align] [--out-dir DIR]

(``scripts/statistical_baselines.sh`` is a thin wrapper.)  SRC/TGT are the tokenised sentences to
align (one per line) and GOLD their gold alignment (Pharaoh unless ``--gold-format``; ``-`` for none,
then only the alignments are written).  Unsupervised aligners need more text than a test set, so
``--train-src/--train-tgt`` sentences are aligned together with SRC/TGT and only the SRC/TGT part is
kept and scored.

Aligners (the ``[baselines]`` extra: ``pip install 'hmm_nmt[baselines]'``):

``eflomal``
    ``eflomal.Aligner(model=3)`` (IBM1 + HMM + fertility, Gibbs sampling; not seeded, so numbers move
    slightly between runs) writes forward and reverse links; they are scored on their own and merged
    with :func:`hmm_nmt_align.base.symmetrize.symmetrize` (``--method``).
``fast_align``
    the ``systran-align`` binding of fast_align, trained like ``fast_align -d -o -v``.  The binding
    only returns alignments already symmetrized by its own (undocumented) heuristic, not the two
    directions, so this row is *not* produced by our symmetrization; it is reported for reference.

Writes ``DIR/<aligner>.<fwd|rev|method|sym>.align`` (Pharaoh) and prints one
``AER=... P=... R=... F=... sentences=N`` line per alignment.
"""
import argparse
import os
import sys
import tempfile
import time
from typing import List, Optional, Sequence

from .aer import corpus_scores
from .base.console import interruptible
from .base.symmetrize import METHODS, symmetrize
from .cli import format_summary
from .io import FORMATS, Alignment, AlignmentFormatError, read_alignments, read_pharaoh, read_tokens, write_pharaoh

__all__ = ["run_eflomal", "run_fast_align", "main"]


def _log(msg: str) -> None:
    sys.stderr.write(f"[baselines] {msg}\n")
    sys.stderr.flush()


def run_eflomal(src: Sequence[str], tgt: Sequence[str], workdir: str, model: int = 3):
    """Forward and reverse eflomal links (both as source-target pairs), one list per sentence."""
    import eflomal

    fwd_path, rev_path = os.path.join(workdir, "eflomal.fwd"), os.path.join(workdir, "eflomal.rev")
    eflomal.Aligner(model=model).align(list(src), list(tgt), links_filename_fwd=fwd_path,
                                       links_filename_rev=rev_path, quiet=True)
    return read_pharaoh(fwd_path), read_pharaoh(rev_path)


def run_fast_align(src: Sequence[str], tgt: Sequence[str], workdir: str) -> List[Alignment]:
    """systran-align (fast_align -d -o -v) links, symmetrized by the binding itself."""
    import systran_align

    corpus = os.path.join(workdir, "fast_align.in")
    with open(corpus, "w", encoding="utf-8") as f:
        for s, t in zip(src, tgt):
            f.write(f"{s} ||| {t}\n")
    fwd_probs, bwd_probs = os.path.join(workdir, "fa.fwd.bin"), os.path.join(workdir, "fa.bwd.bin")
    systran_align.generate_alignment_probabilities(corpus, fwd_probs, bwd_probs, favor_diagonal=True,
                                                   optimize_tension=True, variational_bayes=True)
    aligner = systran_align.Aligner(fwd_probs, bwd_probs)
    out = aligner.align_batch([s.split() for s in src], [t.split() for t in tgt])
    return [Alignment.from_links(map(tuple, r["alignments"])) for r in out]


@interruptible("hmm-nmt-baselines")
def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="hmm-nmt-baselines", description=__doc__.split("\n\n")[0])
    p.add_argument("src", metavar="SRC")
    p.add_argument("tgt", metavar="TGT")
    p.add_argument("gold", metavar="GOLD", help="gold alignment of SRC/TGT, or - for none")
    p.add_argument("--method", default="grow-diag", choices=list(METHODS))
    p.add_argument("--train-src", help="extra source sentences aligned together with SRC (not scored)")
    p.add_argument("--train-tgt", help="extra target sentences aligned together with TGT (not scored)")
    p.add_argument("--aligners", default="eflomal,fast_align", help="comma-separated subset of eflomal,fast_align")
    p.add_argument("--out-dir", default=None, help="where to write the alignments (default: a temporary folder)")
    p.add_argument("--gold-format", choices=FORMATS, default="pharaoh")
    p.add_argument("--one-based", action="store_true", help="GOLD indices start at 1")
    args = p.parse_args(argv)
    aligners = [a.strip() for a in args.aligners.split(",") if a.strip()]
    bad = [a for a in aligners if a not in ("eflomal", "fast_align")]
    if bad or not aligners:
        p.error(f"--aligners: unknown {', '.join(bad) or '(empty)'}")
    if (args.train_src is None) != (args.train_tgt is None):
        p.error("--train-src and --train-tgt go together")
    try:
        src_tok, tgt_tok = read_tokens(args.src), read_tokens(args.tgt)
        if len(src_tok) != len(tgt_tok):
            raise AlignmentFormatError(f"{len(src_tok)} source sentences but {args.tgt} has {len(tgt_tok)}", args.src)
        gold = None
        if args.gold != "-":
            gold = read_alignments(args.gold, args.gold_format, args.one_based, len(src_tok),
                                   [len(s) for s in src_tok], [len(t) for t in tgt_tok])
        extra_src, extra_tgt = [], []
        if args.train_src:
            extra_src, extra_tgt = read_tokens(args.train_src), read_tokens(args.train_tgt)
            if len(extra_src) != len(extra_tgt):
                raise AlignmentFormatError(f"{len(extra_src)} sentences but {args.train_tgt} has {len(extra_tgt)}",
                                           args.train_src)
    except AlignmentFormatError as e:
        sys.stderr.write(f"{p.prog}: error: {e}\n")
        return 2
    src = [" ".join(s) for s in extra_src + src_tok]
    tgt = [" ".join(t) for t in extra_tgt + tgt_tok]
    n_extra, n = len(extra_src), len(src_tok)
    out_dir = args.out_dir or tempfile.mkdtemp(prefix="baselines.")
    os.makedirs(out_dir, exist_ok=True)
    _log(f"aligning {n} sentence pairs (+{n_extra} unscored) with {', '.join(aligners)}; output in {out_dir}")

    results = []  # (name, alignments)
    with tempfile.TemporaryDirectory() as work:
        if "eflomal" in aligners:
            t0 = time.time()
            fwd, rev = run_eflomal(src, tgt, work)
            fwd, rev = fwd[n_extra:], rev[n_extra:]
            sym = [Alignment.from_links(symmetrize(f.sure, r.sure, args.method)) for f, r in zip(fwd, rev)]
            _log(f"eflomal done in {time.time() - t0:.1f}s")
            results += [("eflomal.fwd", fwd), ("eflomal.rev", rev), (f"eflomal.{args.method}", sym)]
        if "fast_align" in aligners:
            t0 = time.time()
            sym = run_fast_align(src, tgt, work)[n_extra:]
            _log(f"fast_align (systran-align) done in {time.time() - t0:.1f}s")
            results.append(("fast_align.sym", sym))
    width = max(len(name) for name, _ in results)
    for name, al in results:
        write_pharaoh(os.path.join(out_dir, name + ".align"), al)
        if gold is not None:
            print(f"{name:<{width}}  {format_summary(corpus_scores(gold, al))}")
        else:
            print(f"{name:<{width}}  links={sum(len(a) for a in al)} sentences={len(al)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
