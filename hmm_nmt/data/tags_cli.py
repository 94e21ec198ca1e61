"""``hmm-nmt-tags``: convert, detect and score entity tag schemes on CoNLL column files.

    hmm-nmt-tags convert --from iob1 --to bioes eng.train eng.train.bioes     # --from omitted: detected
    hmm-nmt-tags detect eng.train
    hmm-nmt-tags score --scheme iob2 gold.txt pred.txt                        # entity P/R/F1 (seqeval strict)

Column files: one token per line, the tag in ``--column`` (default the last), blank lines between sentences;
``-DOCSTART-`` lines and lines without a token (WNUT-17's lone tabs) are sentence breaks and are copied
through unchanged, as is every column but the tag. Errors name ``path:line``; the output file appears
only complete (written to a temporary file, then renamed).
"""
import argparse
import sys
from typing import List, Tuple

from hmm_nmt.data import tag_schemes as ts
from hmm_nmt_align.base.atomic import atomic_write

PROG = "hmm-nmt-tags"


class _Error(Exception):
    pass


def _open(path):
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_blocks(path: str, column: int) -> Tuple[List[str], List[List[Tuple[int, str]]]]:
    """The file's lines and its sentences as lists of (line index, tag)."""
    try:
        with _open(path) as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise _Error(f"{path}: {e}") from e
    if lines and lines[-1] == "":
        lines.pop()
    sentences, cur = [], []
    for k, line in enumerate(lines):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if cur:
                sentences.append(cur)
            cur = []
            continue
        try:
            tag = fields[column]
            ts.split_tag(tag)
        except IndexError:
            raise _Error(f"{path}:{k + 1}: no column {column} in {line!r}") from None
        except ts.TagSchemeError as e:
            raise _Error(f"{path}:{k + 1}: {e}") from e
        cur.append((k, tag))
    if cur:
        sentences.append(cur)
    return lines, sentences


def _replace_field(line: str, column: int, value: str) -> str:
    sep = "\t" if "\t" in line else " "
    fields = line.split(sep)
    real = [i for i, f in enumerate(fields) if f != ""]
    fields[real[column]] = value
    return sep.join(fields)


def _scheme_of(path, sentences, given):
    if given:
        return ts.canonical(given)
    return ts.detect([[t for _, t in s] for s in sentences])


def convert(opts):
    lines, sentences = read_blocks(opts.input, opts.column)
    src, dst = _scheme_of(opts.input, sentences, opts.src), ts.canonical(opts.dst)
    merges = invalid = 0
    for sent in sentences:
        tags = [t for _, t in sent]
        invalid += not ts.is_valid(tags, src)
        try:
            new, m = ts.convert(tags, src, dst)
        except ts.TagSchemeError as e:
            raise _Error(f"{opts.input}:{sent[0][0] + 1}: {e}") from e
        merges += m
        for (k, _), tag in zip(sent, new):
            lines[k] = _replace_field(lines[k], opts.column, tag)
    atomic_write(opts.output, "\n".join(lines) + "\n")
    print(f"{PROG}: {len(sentences)} sentences {src} -> {dst}; {invalid} invalid under {src} (read leniently); "
          f"{merges} adjacent same-type entity pairs merged" + (" (IO cannot separate them)" if merges else ""),
          file=sys.stderr)


def detect(opts):
    _, sentences = read_blocks(opts.input, opts.column)
    print(_scheme_of(opts.input, sentences, None))


def score(opts):
    from hmm_nmt.data.entity_eval import entity_scores

    _, gold = read_blocks(opts.gold, opts.column)
    _, pred = read_blocks(opts.pred, opts.column)
    if [len(s) for s in gold] != [len(s) for s in pred]:
        raise _Error(f"{opts.pred}: sentence lengths differ from {opts.gold}")
    scheme = _scheme_of(opts.gold, gold, opts.scheme)
    res = entity_scores([[t for _, t in s] for s in gold], [[t for _, t in s] for s in pred], scheme,
                        report=opts.report)
    if opts.report:
        print(res["report"])
    print(f"precision {res['precision']:.2f} recall {res['recall']:.2f} "
          f"F1 {res['f1']:.2f} ({scheme}, strict spans); invalid sequences {res['invalid']}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="re-tag a column file in another scheme")
    c.add_argument("--from", dest="src", help=f"scheme of the input ({', '.join(ts.SCHEMES)}; default: detected)")
    c.add_argument("--to", dest="dst", required=True, help="scheme to write")
    c.add_argument("input")
    c.add_argument("output")
    d = sub.add_parser("detect", help="print the scheme a column file is written in")
    d.add_argument("input")
    s = sub.add_parser("score", help="entity precision/recall/F1 of PRED against GOLD")
    s.add_argument("--scheme", help="scheme of both files (default: detected from GOLD)")
    s.add_argument("--report", action="store_true", help="per-type table too")
    s.add_argument("gold")
    s.add_argument("pred")
    for p in (c, d, s):
        p.add_argument("--column", type=int, default=-1, help="the tag column (default -1: the last)")
    opts = ap.parse_args(argv)
    try:
        {"convert": convert, "detect": detect, "score": score}[opts.cmd](opts)
    except (_Error, ts.TagSchemeError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
