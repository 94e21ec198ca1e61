"""``hmm-nmt-tags``: convert, detect and score entity tag schemes on CoNLL column files.

What the command does, its input and its errors: :data:`hmm_nmt_align.base.tag_args.TAGS_USAGE` (what ``--help``
prints; the parser is :func:`hmm_nmt_align.base.tag_args.tags_parser`, buildable without torch, so that the console
script, :func:`hmm_nmt_align.tag_commands.tags_main`, parses before importing the plugin). This module is the work:
:class:`ColumnFile` reads a column file, :func:`run` runs the parsed subcommand.
"""
import gzip
import os
import re
import sys
import zlib
from typing import Dict, List, Optional, Tuple

from hmm_nmt.data import tag_schemes as ts
from hmm_nmt_align.base.atomic import atomic_write
from hmm_nmt_align.base.tag_args import tags_parser

PROG = "hmm-nmt-tags"


class _Error(Exception):
    pass


def _read_text(path: str) -> str:
    chunks: List[bytes] = []
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            for raw in f:  # binary lines: split at b"\n" only
                chunks.append(raw)
    except FileNotFoundError:
        raise _Error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise _Error(f"{path}: is a folder, not a file") from None
    except (EOFError, zlib.error, OSError) as e:
        what = "not a complete gzip file" if path.endswith(".gz") else "cannot read"
        raise _Error(f"{path}:{len(chunks) + 1}: {what}: {e}") from None
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise _Error(f"{path}:{line}: not UTF-8 text (byte {data[e.start]:#04x})") from None


def _pieces(content: str, tab: bool) -> Tuple[List[str], List[int]]:
    """``content`` cut into fields and the separators between them (fields at even indexes), and the indexes
    of the real (non-blank) fields: a tab file is cut at tabs only, any other file at runs of spaces."""
    pieces = re.split(r"(\t)" if tab else r"( +)", content)
    return pieces, [i for i in range(0, len(pieces), 2) if pieces[i].strip()]


class ColumnFile:
    """A CoNLL column file as ``hmm-nmt-tags`` reads it.

    ``lines``: the file's lines (without the ``\n``); ``sentences``: lists of (line index, tag); ``words``:
    line index -> first column (``None`` on a file of one column); ``tab``: the column separator, decided
    for the whole file: tabs if any token line has a tab, else runs of spaces. A tab file whose token
    lines do not all have the same number of columns (a line that mixes tabs and spaces) is refused.
    """

    def __init__(self, path: str, column: int):
        self.path, self.column = path, column
        text = _read_text(path)
        self.lines = text.split("\n")
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        token_lines = [k for k, line in enumerate(self.lines) if not self._is_break(line)]
        self.tab = any("\t" in self.lines[k] for k in token_lines)
        self.sentences: List[List[Tuple[int, str]]] = []
        self.words: Dict[int, Optional[str]] = {}
        cur: List[Tuple[int, str]] = []
        expected = None
        for k, line in enumerate(self.lines):
            if self._is_break(line):
                if cur:
                    self.sentences.append(cur)
                cur = []
                continue
            pieces, real = _pieces(self._content(line), self.tab)
            n = len(real)
            if self.tab:
                if expected is None:
                    expected = (n, k)
                elif n != expected[0]:
                    raise _Error(f"{path}:{k + 1}: {n} tab-separated columns where line {expected[1] + 1} has "
                                 f"{expected[0]} (a line that mixes tabs and spaces?): {line!r}")
            if not -n <= column < n:
                raise _Error(f"{path}:{k + 1}: --column {column} out of range: the line has {n} columns: {line!r}")
            tag = pieces[real[column]]
            try:
                ts.split_tag(tag)
            except ts.TagSchemeError as e:
                mixed = " (a line that mixes tabs and spaces?)" if self.tab and " " in tag else ""
                raise _Error(f"{path}:{k + 1}: {e}{mixed}") from None
            self.words[k] = pieces[real[0]] if n > 1 else None
            cur.append((k, tag))
        if cur:
            self.sentences.append(cur)
        if not self.sentences:
            raise _Error(f"{path}:1: no token line (an empty file?)")

    @staticmethod
    def _is_break(line: str) -> bool:
        fields = line.split()
        return not fields or fields[0] == "-DOCSTART-"

    @staticmethod
    def _content(line: str) -> str:
        return line[:-1] if line.endswith("\r") else line

    def tags(self) -> List[List[str]]:
        return [[t for _, t in s] for s in self.sentences]

    def has_entities(self) -> bool:
        return any(t != "O" for s in self.sentences for _, t in s)

    def replace_tag(self, k: int, value: str) -> None:
        line = self.lines[k]
        content = self._content(line)
        pieces, real = _pieces(content, self.tab)
        pieces[real[self.column]] = value
        self.lines[k] = "".join(pieces) + line[len(content):]

    def first_foreign(self, scheme: str) -> Optional[Tuple[int, str]]:
        """(line index, tag) of the first tag whose prefix has no place in ``scheme``, or ``None``."""
        allowed = ts._PREFIXES[scheme]
        for s in self.sentences:
            for k, tag in s:
                if tag != "O" and tag[0] not in allowed:
                    return k, tag
        return None


def read_blocks(path: str, column: int) -> Tuple[List[str], List[List[Tuple[int, str]]]]:
    """The file's lines and its sentences as lists of (line index, tag)."""
    f = ColumnFile(path, column)
    return f.lines, f.sentences


def _scheme_of(f: ColumnFile, given, flag: str) -> str:
    if given:
        return ts.canonical(given)
    if not f.has_entities():
        raise _Error(f"{f.path}: cannot tell the tag scheme: no entity tag (only O); pass {flag}")
    return ts.detect(f.tags())


def _check_output(output: str, *inputs: str) -> None:
    if output == "-":
        return
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise _Error(f"{output}: no such folder {os.path.dirname(output) or '.'}")
    if os.path.isdir(output):
        raise _Error(f"{output}: is a folder; give the output file's name")
    for path in inputs:
        if os.path.exists(output) and os.path.exists(path) and os.path.samefile(output, path):
            raise _Error(f"{output}: is the input {path}; write to another file")


def convert(opts):
    _check_output(opts.output, opts.input)
    f = ColumnFile(opts.input, opts.column)
    src, dst = _scheme_of(f, opts.src, "--from"), ts.canonical(opts.dst)
    foreign = f.first_foreign(src)
    if foreign is not None:
        raise _Error(f"{opts.input}:{foreign[0] + 1}: {foreign[1]!r} has no place in {src} (prefixes "
                     f"{', '.join(ts._PREFIXES[src])})" + ("" if opts.src is None else "; check --from"))
    merges = invalid = 0
    for sent in f.sentences:
        tags = [t for _, t in sent]
        invalid += not ts.is_valid(tags, src)
        try:
            new, m = ts.convert(tags, src, dst)
        except ts.TagSchemeError as e:
            raise _Error(f"{opts.input}:{sent[0][0] + 1}: {e}") from e
        merges += m
        for (k, _), tag in zip(sent, new):
            f.replace_tag(k, tag)
    try:
        atomic_write(opts.output, "\n".join(f.lines) + "\n")
    except OSError as e:
        raise _Error(f"{opts.output}: cannot write: {e.strerror or e}") from None
    print(f"{PROG}: {len(f.sentences)} sentences {src} -> {dst}; {invalid} invalid under {src} (read leniently); "
          f"{merges} adjacent same-type entity pairs merged" + (" (IO cannot separate them)" if merges else ""),
          file=sys.stderr)


def detect(opts):
    f = ColumnFile(opts.input, opts.column)
    print(_scheme_of(f, None, "--from to convert"))


def _check_parallel(gold: ColumnFile, pred: ColumnFile) -> None:
    """Refuse a prediction whose sentences or tokens are not those of the gold, naming the first mismatch."""
    for gs, ps in zip(gold.sentences, pred.sentences):
        for (gk, _), (pk, _) in zip(gs, ps):
            gw, pw = gold.words[gk], pred.words[pk]
            if gw is not None and pw is not None and gw != pw:
                raise _Error(f"{pred.path}:{pk + 1}: token {pw!r} where {gold.path}:{gk + 1} has {gw!r}: "
                             "the files are not token-parallel")
        if len(gs) != len(ps):
            k = min(len(gs), len(ps))
            where = f"{pred.path}:{ps[k][0] + 1}" if k < len(ps) else f"{pred.path}:{ps[-1][0] + 2}"
            raise _Error(f"{where}: sentence of {len(ps)} tokens where {gold.path}:{gs[0][0] + 1} starts one of "
                         f"{len(gs)}: the files are not token-parallel")
    if len(gold.sentences) != len(pred.sentences):
        n = min(len(gold.sentences), len(pred.sentences))
        longer = gold if len(gold.sentences) > n else pred
        raise _Error(f"{longer.path}:{longer.sentences[n][0][0] + 1}: sentence {n + 1}, but "
                     f"{(pred if longer is gold else gold).path} has only {n} sentences")


def score(opts):
    from hmm_nmt.data.entity_eval import entity_scores

    gold = ColumnFile(opts.gold, opts.column)
    pred = ColumnFile(opts.pred, opts.column)
    _check_parallel(gold, pred)
    scheme = _scheme_of(gold, opts.scheme, "--scheme")
    for f in (gold, pred):
        foreign = f.first_foreign(scheme)
        if foreign is None:
            continue
        k, tag = foreign
        guess = ts.detect(f.tags())
        hint = (f"it reads as {guess}: pass --scheme {guess}" if f is gold else
                f"it reads as {guess}: convert it first (hmm-nmt-tags convert --from {guess} --to {scheme})")
        raise _Error(f"{f.path}:{k + 1}: {tag!r} has no place in {scheme}, the scheme "
                     f"{'given' if opts.scheme else 'of ' + opts.gold}; {hint}")
    if pred.has_entities():
        guess = ts.detect(pred.tags())
        if guess != scheme:
            print(f"{PROG}: warning: {opts.pred} reads as {guess}, scored as {scheme}", file=sys.stderr)
    res = entity_scores(gold.tags(), pred.tags(), scheme, report=opts.report)
    if opts.report:
        print(res["report"])
    print(f"precision {res['precision']:.2f} recall {res['recall']:.2f} "
          f"F1 {res['f1']:.2f} ({scheme}, strict spans); invalid sequences {res['invalid']}")


def run(opts) -> int:
    """Run the parsed command: 0, 2 on bad input (one line on stderr), 130 on Ctrl-C."""
    try:
        {"convert": convert, "detect": detect, "score": score}[opts.cmd](opts)
    except (_Error, ts.TagSchemeError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0


def main(argv=None) -> int:
    return run(tags_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
