"""Reading and writing CoNLL column files (pure Python, no fairseq).

A CoNLL file has one token per line, columns separated by white space (spaces or tabs), and a blank
line between sentences, e.g. CoNLL-2000 chunking (``word POS chunk``)::

    Confidence NN B-NP
    in IN B-PP
    ...

Lines starting with ``-DOCSTART-`` (CoNLL-2003) are document separators and are skipped. Files whose
name ends in ``.gz`` are read through gzip. Every token line of one file must have the same number of
columns; a line that does not, a column index out of range, or a file without any sentence raises
:class:`CoNLLFormatError` whose message starts with ``path:line:``.
"""
import gzip
import io
import os
import random

from hmm_nmt_io import atomic_output


class CoNLLFormatError(ValueError):
    """Malformed CoNLL input; the message names the file and the line."""


def _open_text(path):
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


class Sentence:
    """One sentence: its rows of columns and the 1-based line number of each row."""

    __slots__ = ("rows", "lines")

    def __init__(self, rows, lines):
        self.rows = rows
        self.lines = lines

    def __len__(self):
        return len(self.rows)

    def column(self, index):
        return [r[index] for r in self.rows]


def read_conll(path, num_columns=None, comment_prefix=None, min_columns=1):
    """Read ``path`` into a list of :class:`Sentence`.

    ``num_columns``: the number of columns every token line must have (``None``: that of the first
    token line). ``comment_prefix``: lines starting with it are ignored (e.g. ``#`` for CoNLL-U; off by
    default since ``#`` is a legitimate token in CoNLL-2000).
    """
    if not os.path.exists(path):
        raise CoNLLFormatError(f"{path}: no such file")
    sentences, rows, lines = [], [], []
    expected = num_columns
    try:
        with _open_text(path) as f:
            for lineno, raw in enumerate(f, start=1):
                line = raw.strip()
                if not line:
                    if rows:
                        sentences.append(Sentence(rows, lines))
                        rows, lines = [], []
                    continue
                if line.startswith("-DOCSTART-") or (comment_prefix and line.startswith(comment_prefix)):
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
    except (UnicodeDecodeError, OSError, EOFError) as e:
        raise CoNLLFormatError(f"{path}: cannot read as (gzipped) UTF-8 text: {e}") from e
    if rows:
        sentences.append(Sentence(rows, lines))
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


def write_conll(path, sentences_rows):
    """Write rows (lists of columns) as a CoNLL file, atomically (temporary file then rename)."""
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            for rows in sentences_rows:
                for cols in rows:
                    f.write(" ".join(cols) + "\n")
                f.write("\n")
