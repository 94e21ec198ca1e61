"""Reading and writing CoNLL column files (pure Python, no fairseq).

A CoNLL file has one token per line, columns separated by white space (spaces or tabs), and a blank
line between sentences, e.g. CoNLL-2000 chunking (``word POS chunk``)::

    Confidence NN B-NP
    in IN B-PP
    ...

Lines starting with ``-DOCSTART-`` (CoNLL-2003) are document boundaries: they end the current sentence
and are not tokens; every :class:`Sentence` carries the 0-based index of its document (``doc``; 0 before
the first boundary). A line holding only white space (WNUT-17's lone tabs) is a sentence break like an
empty one. Lines end at ``\n`` only: a ``\r`` (of CRLF), U+2028, U+0085 or form feed inside a line is white
space within it, never a line break, so line numbers are those of ``\n``-counting tools. Files whose name ends
in ``.gz`` are read through gzip. :func:`read_conllu` reads CoNLL-U
(Universal Dependencies) through the ``conllu`` library. :func:`write_conll_parallel` writes rows back on the
lines they were read from, the other lines copied through (what ``hmm-nmt-tag`` writes). Every token line of one file must have the same number of
columns; a line that does not, a column index out of range, bytes that are not UTF-8, a truncated gzip
stream, or a file without any sentence raises :class:`CoNLLFormatError` whose message starts with
``path:line:``.
"""
import gzip
import os
import random
import zlib

from hmm_nmt_align.base.atomic import atomic_output


class CoNLLFormatError(ValueError):
    """Malformed CoNLL input; the message names the file and the line."""


def _numbered_lines(path):
    """``(line number, line)`` of ``path`` (gzip if it ends in ``.gz``), lines split at ``\n`` only and kept
    with it; bytes that are not UTF-8, a truncated or corrupt gzip stream raise :class:`CoNLLFormatError`
    naming ``path:line``."""
    lineno = 0
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise CoNLLFormatError(f"{path}:{lineno}: not UTF-8 text (byte {raw[e.start]:#04x} at "
                                           f"column {len(raw[:e.start].decode('utf-8', 'replace')) + 1})") from None
    except (OSError, EOFError, zlib.error) as e:
        what = "not a complete gzip file" if path.endswith(".gz") else "cannot read"
        raise CoNLLFormatError(f"{path}:{lineno + 1}: {what}: {e}") from None


class Sentence:
    """One sentence: its rows of columns and the 1-based line number of each row."""

    __slots__ = ("rows", "lines", "doc")

    def __init__(self, rows, lines, doc=0):
        self.rows = rows
        self.lines = lines
        self.doc = doc

    def __len__(self):
        return len(self.rows)

    def column(self, index):
        return [r[index] for r in self.rows]


def read_conll(path, num_columns=None, comment_prefix=None, min_columns=1, others=None):
    """Read ``path`` into a list of :class:`Sentence`.

    ``num_columns``: the number of columns every token line must have (``None``: that of the first
    token line). ``comment_prefix``: lines starting with it are ignored (e.g. ``#`` for CoNLL-U; off by
    default since ``#`` is a legitimate token in CoNLL-2000). ``others``: a list to which every line that
    is not a token line (blank, ``-DOCSTART-``, comment) is appended as ``(line number, text)``, for
    :func:`write_conll_parallel`.
    """
    if not os.path.exists(path):
        raise CoNLLFormatError(f"{path}: no such file")
    sentences, rows, lines = [], [], []
    doc = 0
    expected = num_columns
    for lineno, raw in _numbered_lines(path):
        line = raw.strip()
        is_doc = line.startswith("-DOCSTART-")
        is_comment = bool(comment_prefix) and line.startswith(comment_prefix)
        if others is not None and (not line or is_doc or is_comment):
            others.append((lineno, raw.rstrip("\r\n")))
        if not line or is_doc:
            if rows:
                sentences.append(Sentence(rows, lines, doc))
                rows, lines = [], []
            if is_doc and sentences:
                doc += 1
            continue
        if is_comment:
            continue
        cols = line.split()
        if expected is None:
            expected = len(cols)
            if expected < min_columns:
                raise CoNLLFormatError(
                    f"{path}:{lineno}: expected at least {min_columns} columns, found {expected}: {line!r}"
                )
        if len(cols) != expected:
            raise CoNLLFormatError(
                f"{path}:{lineno}: expected {expected} columns, found {len(cols)}: {line!r}"
            )
        rows.append(cols)
        lines.append(lineno)
    if rows:
        sentences.append(Sentence(rows, lines, doc))
    if not sentences:
        raise CoNLLFormatError(f"{path}:1: empty file, no sentence found")
    return sentences


CONLLU_FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")


def conllu_column(name):
    """The 0-based index of a CoNLL-U field given by name (``form``, ``upos``, ``xpos``...) or number."""
    if isinstance(name, int):
        return name
    key = str(name).lower()
    if key in CONLLU_FIELDS:
        return CONLLU_FIELDS.index(key)
    try:
        return int(key)
    except ValueError:
        raise CoNLLFormatError(f"unknown CoNLL-U column {name!r} (one of {', '.join(CONLLU_FIELDS)} or a number)") from None


def read_conllu(path):
    """Read a CoNLL-U file into :class:`Sentence` objects through the ``conllu`` library.

    Each row holds the ten fields (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC, ``_`` for an empty
    one) of a syntactic word; multiword-token lines (ID ``n-m``) and empty nodes (ID ``n.m``) are skipped,
    as are ``#`` comments. A token line without ten tab-separated fields, or one the library rejects,
    raises :class:`CoNLLFormatError` naming ``path:line``.
    """
    import conllu

    if not os.path.exists(path):
        raise CoNLLFormatError(f"{path}: no such file")
    sentences, block, block_lines = [], [], []

    def flush():
        if not block_lines:
            return
        text = "".join(block) + "\n"
        try:
            parsed = conllu.parse(text)
        except Exception as e:  # the library's ParseException and friends
            raise CoNLLFormatError(f"{path}:{block_lines[0]}: {e}") from e
        rows, lines = [], []
        tokens = [t for tl in parsed for t in tl]
        if len(tokens) != len(block_lines):
            raise CoNLLFormatError(f"{path}:{block_lines[0]}: the conllu library read {len(tokens)} tokens "
                                   f"from {len(block_lines)} token lines")
        for tok, lineno in zip(tokens, block_lines):
            if not isinstance(tok["id"], int):  # (n, '-', m) multiword token or (n, '.', m) empty node
                continue
            rows.append(["_" if tok.get(f) is None else str(tok.get(f)) for f in CONLLU_FIELDS])
            lines.append(lineno)
        if rows:
            sentences.append(Sentence(rows, lines))

    for lineno, raw in _numbered_lines(path):
        line = raw.rstrip("\r\n")
        if not line.strip():
            flush()
            block, block_lines = [], []
            continue
        if line.startswith("#"):
            continue
        if len(line.split("\t")) != 10:
            raise CoNLLFormatError(f"{path}:{lineno}: expected 10 tab-separated CoNLL-U fields, found "
                                   f"{len(line.split(chr(9)))}: {line!r}")
        block.append(line + "\n")
        block_lines.append(lineno)
    flush()
    if not sentences:
        raise CoNLLFormatError(f"{path}:1: empty file, no sentence found")
    return sentences


def check_column(path, sentences, index, what):
    """Raise a :class:`CoNLLFormatError` if column ``index`` (negative counts from the end) is absent."""
    ncol = len(sentences[0].rows[0])
    if not -ncol <= index < ncol:
        raise CoNLLFormatError(
            f"{path}:{sentences[0].lines[0]}: {what} column {index} out of range, the file has {ncol} columns"
        )


def split_dev(sentences, fraction, seed):
    """Carve a dev set out of ``sentences``: a fixed-seed random ``fraction`` of them (at least one).

    Returns ``(train, dev)``, both in the original file order.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"dev fraction must be in (0, 1), got {fraction}")
    n = len(sentences)
    if n < 2:
        raise CoNLLFormatError("need at least two sentences to carve a dev split from the training file")
    n_dev = max(1, int(round(fraction * n)))
    order = list(range(n))
    random.Random(seed).shuffle(order)
    dev_ids = set(order[:n_dev])
    train = [s for i, s in enumerate(sentences) if i not in dev_ids]
    dev = [s for i, s in enumerate(sentences) if i in dev_ids]
    return train, dev


def write_conll(path, sentences_rows, sep=" "):
    """Write rows (lists of columns) as a CoNLL file, atomically (temporary file then rename)."""
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for rows in sentences_rows:
                for cols in rows:
                    f.write(sep.join(cols) + "\n")
                f.write("\n")


def write_conll_parallel(path, sentences, sentences_rows, others, sep=" "):
    """Write ``sentences_rows`` (the rows of each of ``sentences``, e.g. with a tag appended) line-parallel to
    the file the sentences were read from: row k of a sentence on its line ``sentence.lines[k]``, and the
    ``others`` lines :func:`read_conll` collected (blank, ``-DOCSTART-``, comment) copied through on theirs.
    Line N of the output is line N of the input; atomically, as :func:`write_conll`."""
    lines = dict(others)
    for s, rows in zip(sentences, sentences_rows):
        lines.update((n, sep.join(cols)) for n, cols in zip(s.lines, rows))
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines[n] + "\n" for n in sorted(lines))
