"""Reading and writing word alignments: Pharaoh/TALP, NAACL/RWTH (WPT) and GIZA++ A3.

One sentence alignment is an :class:`Alignment`: a set of *sure* links S and a set of *possible* links
P with S ⊆ P (Och & Ney 2000).  A link is a pair ``(i, j)``: 0-based source position i, 0-based
target position j.  Hypotheses produced by aligners only have sure links (then P = S).

Formats
-------
Pharaoh/TALP
    one line per sentence pair, whitespace-separated links ``i-j`` (sure), ``i?j``, ``ipj`` or
    ``i p j`` (possible; ``ipj`` is the convention of the popular Europarl gold files).  Indices are 0-based,
    or 1-based with ``one_based=True``.  An empty line is a sentence with no links.
NAACL/RWTH (WPT 2003/2005 shared tasks)
    one link per line: ``sent i j [S|P] [confidence]``.  Sentences without links do not occur, so
    the number of sentences comes from the caller (``n_sentences``) or from the largest number
    seen.  With ``one_based=True`` (the WPT convention) sentence numbers and positions start at 1
    and position 0 means the NULL word: such links are dropped.
GIZA++ A3 (``*.A3.final``)
    three lines per sentence pair: a ``# Sentence pair (k) ...`` header, the target words, and the
    source words each followed by ``({ t1 t2 ... })`` (1-based target positions aligned to it),
    starting with ``NULL ({ ... })``, whose links are dropped.

Every reader takes an optional ``src_lens`` / ``tgt_lens`` (sentence lengths in tokens) and raises
:class:`AlignmentFormatError`, naming the file and the line, for a malformed token, an index out of
range, or a number of sentences that does not match.  Writers go through :func:`atomic_write`, so a
failure never leaves a half-written output file behind.
"""
import re
from typing import List, Optional, Sequence

from hmm_nmt_align.base.atomic import atomic_write  # noqa: F401  (re-exported: the project's one atomic writer)

# the alignment object and the Pharaoh line live in hmm_nmt_align.base.pharaoh (below the model layer's hub)
from hmm_nmt_align.base.pharaoh import Alignment, AlignmentFormatError, Link, format_pharaoh, parse_pharaoh_line  # noqa: F401

__all__ = [
    "Alignment",
    "AlignmentFormatError",
    "atomic_write",
    "check_same_count",
    "format_pharaoh",
    "parse_pharaoh_line",
    "read_alignments",
    "read_giza_a3",
    "read_naacl",
    "read_pharaoh",
    "read_tokens",
    "reverse_all",
    "split_lines",
    "validate_lengths",
    "write_giza_a3",
    "write_naacl",
    "write_pharaoh",
    "FORMATS",
]

FORMATS = ("pharaoh", "naacl", "giza")


def reverse_all(alignments: Sequence[Alignment]) -> List[Alignment]:
    """Swap source and target in every sentence (``i-j`` becomes ``j-i``)."""
    return [a.reversed() for a in alignments]


# --------------------------------------------------------------------------------------------- Pharaoh
def split_lines(text: str) -> List[str]:
    """Lines of a text as the line-parallel formats count them: split on ``\\n`` only (a ``\\r`` before it
    goes with it), never on the other characters ``str.splitlines`` breaks at (U+2028, U+2029, U+0085, form
    feed, vertical tab, a lone ``\\r``, ...), which stay inside their line. A final ``\\n`` ends the last
    line rather than starting an empty one; an empty text has no lines."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 file (:func:`split_lines`), read once into memory: a pipe, ``/dev/stdin`` or a
    process substitution (``/dev/fd/N``) works as well as a regular file."""
    try:
        with open(path, encoding="utf-8", newline="") as f:  # newline="": no universal-newline translation
            return split_lines(f.read())
    except OSError as e:
        raise AlignmentFormatError(f"cannot read: {e.strerror}", path) from None
    except UnicodeDecodeError as e:
        raise AlignmentFormatError(f"not UTF-8 text ({e.reason} at byte {e.start})", path) from None


def read_pharaoh(path: str, one_based: bool = False, src_lens: Optional[Sequence[int]] = None,
                 tgt_lens: Optional[Sequence[int]] = None, reverse: bool = False) -> List[Alignment]:
    """Read a Pharaoh/TALP file, one alignment per line.

    ``reverse=True`` swaps the direction after validation (so ``src_lens`` refers to the file's
    first index, ``tgt_lens`` to the second).
    """
    out = [parse_pharaoh_line(line, one_based, path, k + 1) for k, line in enumerate(_read_lines(path))]
    validate_lengths(out, path, src_lens, tgt_lens, lines=list(range(1, len(out) + 1)))
    return reverse_all(out) if reverse else out


def write_pharaoh(path: str, alignments: Sequence, one_based: bool = False, reverse: bool = False,
                  possible_mark: str = "?") -> None:
    """Write one Pharaoh line per sentence (atomically; ``path='-'`` writes to stdout)."""
    lines = []
    for a in alignments:
        if not isinstance(a, Alignment):
            a = Alignment.from_links(a)
        lines.append(format_pharaoh(a.reversed() if reverse else a, one_based, possible_mark) + "\n")
    atomic_write(path, "".join(lines))


# --------------------------------------------------------------------------------------------- NAACL
def read_naacl(path: str, n_sentences: Optional[int] = None, one_based: bool = False,
               src_lens: Optional[Sequence[int]] = None, tgt_lens: Optional[Sequence[int]] = None,
               reverse: bool = False) -> List[Alignment]:
    """Read ``sent i j [S|P] [confidence]`` lines (blank and ``#`` lines are skipped).

    A link without a label is sure.  ``n_sentences`` fixes the number of sentences (else: largest
    sentence number seen); a larger sentence number is an error.
    """
    off = 1 if one_based else 0
    sure, possible = {}, {}
    where = {}  # first line mentioning each sentence, for error messages
    if n_sentences is None and src_lens is not None:
        n_sentences = len(src_lens)
    lines = _read_lines(path)
    # without a count, the largest sentence number makes the count: a number far beyond what the file can
    # hold (every sentence with links has a line) is a typo or garbage, not a million sentences without links
    most = None if n_sentences is not None else 10 * len(lines) + 10_000
    for k, line in enumerate(lines, start=1):
        toks = line.split()
        if not toks or toks[0].startswith("#"):
            continue
        if len(toks) not in (3, 4, 5):
            raise AlignmentFormatError(f"expected 'sent i j [S|P] [confidence]', got {line.strip()!r}", path, k)
        try:
            s, i, j = (int(t) for t in toks[:3])
        except ValueError:
            raise AlignmentFormatError(f"non-integer field in {line.strip()!r}", path, k) from None
        label = toks[3].upper() if len(toks) >= 4 else "S"
        if label not in ("S", "P"):
            raise AlignmentFormatError(f"link type must be S or P, got {toks[3]!r}", path, k)
        if len(toks) == 5:
            try:
                float(toks[4])
            except ValueError:
                raise AlignmentFormatError(f"confidence must be a number, got {toks[4]!r}", path, k) from None
        s -= off
        if s < 0 or min(i, j) < 0:
            raise AlignmentFormatError(
                f"negative or zero sentence number / position in {line.strip()!r} "
                f"({'1' if one_based else '0'}-based numbering)", path, k)
        if n_sentences is not None and s >= n_sentences:
            raise AlignmentFormatError(f"sentence number {s + off} but only {n_sentences} sentences", path, k)
        if most is not None and s >= most:
            raise AlignmentFormatError(f"sentence number {s + off} is far beyond the {len(lines)} lines of the file "
                                       "(give the number of sentences, e.g. --src/--tgt)", path, k)
        if one_based and (i == 0 or j == 0):
            continue  # link to the NULL word
        link = (i - off, j - off)
        where.setdefault(s, k)
        (sure if label == "S" else possible).setdefault(s, set()).add(link)
    n = n_sentences if n_sentences is not None else (max(where) + 1 if where else 0)
    out = [Alignment(frozenset(sure.get(s, ())), frozenset(possible.get(s, ()))) for s in range(n)]
    validate_lengths(out, path, src_lens, tgt_lens, lines=[where.get(s) for s in range(n)])
    return reverse_all(out) if reverse else out


def write_naacl(path: str, alignments: Sequence, one_based: bool = True, reverse: bool = False) -> None:
    """Write ``sent i j S|P`` lines (1-based sentence numbers and positions by default)."""
    off = 1 if one_based else 0
    lines = []
    for s, a in enumerate(alignments):
        if not isinstance(a, Alignment):
            a = Alignment.from_links(a)
        if reverse:
            a = a.reversed()
        for i, j in sorted(a.possible):
            lines.append(f"{s + off} {i + off} {j + off} {'S' if (i, j) in a.sure else 'P'}\n")
    atomic_write(path, "".join(lines))


# --------------------------------------------------------------------------------------------- GIZA++
_GIZA_WORD = re.compile(r"(\S+) \(\{([\d ]*)\}\)")
_GIZA_HEADER = re.compile(r"^#.*source length (\d+) target length (\d+)")


def read_giza_a3(path: str, src_lens: Optional[Sequence[int]] = None, tgt_lens: Optional[Sequence[int]] = None,
                 reverse: bool = False, return_tokens: bool = False):
    """Read a GIZA++ ``A3.final`` file: links (source word index, target word index), 0-based.

    GIZA++ calls "source" the side whose words carry ``({ })`` (the third line); links to NULL are
    dropped.  With ``return_tokens=True`` also returns ``(src_tokens, tgt_tokens)`` lists.
    """
    lines = _read_lines(path)
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) % 3:
        raise AlignmentFormatError(
            f"{len(lines)} lines is not a multiple of 3 (header, target words, source words per pair)",
            path, len(lines))
    out, srcs, tgts = [], [], []
    for base in range(0, len(lines), 3):
        header, tgt_line, src_line = lines[base:base + 3]
        h = _GIZA_HEADER.match(header)
        if h is None:
            raise AlignmentFormatError("expected '# Sentence pair (k) source length I target length J ...'",
                                       path, base + 1)
        tgt_words = tgt_line.split()
        if len(tgt_words) != int(h.group(2)):
            raise AlignmentFormatError(
                f"header says target length {h.group(2)} but the line has {len(tgt_words)} words", path, base + 2)
        pieces = list(_GIZA_WORD.finditer(src_line))
        if "".join(m.group(0) for m in pieces).replace(" ", "") != src_line.replace(" ", ""):
            raise AlignmentFormatError("malformed 'word ({ positions })' sequence", path, base + 3)
        if not pieces or pieces[0].group(1) != "NULL":
            raise AlignmentFormatError("source line must start with 'NULL ({ ... })'", path, base + 3)
        src_words = [m.group(1) for m in pieces[1:]]
        if len(src_words) != int(h.group(1)):
            raise AlignmentFormatError(
                f"header says source length {h.group(1)} but the line has {len(src_words)} words", path, base + 3)
        links = set()
        for i, m in enumerate(pieces):
            for t in m.group(2).split():
                j = int(t)
                if not 1 <= j <= len(tgt_words):
                    raise AlignmentFormatError(
                        f"target position {j} out of range 1..{len(tgt_words)} for word {m.group(1)!r}", path, base + 3)
                if i > 0:
                    links.add((i - 1, j - 1))
        out.append(Alignment.from_links(links))
        srcs.append(src_words)
        tgts.append(tgt_words)
    validate_lengths(out, path, src_lens, tgt_lens, lines=[3 * k + 3 for k in range(len(out))])
    for k, (s, t) in enumerate(zip(srcs, tgts)):
        if src_lens is not None and len(s) != src_lens[k]:
            raise AlignmentFormatError(f"source sentence has {len(s)} words, --src has {src_lens[k]}", path, 3 * k + 3)
        if tgt_lens is not None and len(t) != tgt_lens[k]:
            raise AlignmentFormatError(f"target sentence has {len(t)} words, --tgt has {tgt_lens[k]}", path, 3 * k + 2)
    if reverse:
        out, srcs, tgts = reverse_all(out), tgts, srcs
    return (out, (srcs, tgts)) if return_tokens else out


def write_giza_a3(path: str, alignments: Sequence, src_tokens: Sequence[Sequence[str]],
                  tgt_tokens: Sequence[Sequence[str]]) -> None:
    """Write GIZA++ A3 triples (alignment score 0); target words linked to no source word are listed
    under ``NULL``, source words linked to nothing get an empty ``({ })``."""
    if not len(alignments) == len(src_tokens) == len(tgt_tokens):
        raise ValueError("alignments, src_tokens and tgt_tokens must have the same length")
    out = []
    for k, (a, s, t) in enumerate(zip(alignments, src_tokens, tgt_tokens)):
        links = a.links if isinstance(a, Alignment) else frozenset(a)
        by_src = [[] for _ in s]
        for i, j in sorted(links):
            if not (0 <= i < len(s) and 0 <= j < len(t)):
                raise ValueError(f"sentence {k + 1}: link {i}-{j} out of range for {len(s)}x{len(t)} words")
            by_src[i].append(j + 1)
        covered = {j for _, j in links}
        null = [j + 1 for j in range(len(t)) if j not in covered]
        words = " ".join(f"{w} ({{ {' '.join(map(str, js))}{' ' if js else ''}}})" for w, js in
                         [("NULL", null)] + list(zip(s, by_src)))
        out.append(f"# Sentence pair ({k + 1}) source length {len(s)} target length {len(t)} "
                   f"alignment score : 0\n{' '.join(t)}\n{words} \n")
    atomic_write(path, "".join(out))


# --------------------------------------------------------------------------------------------- common
def read_alignments(path: str, fmt: str = "pharaoh", one_based: bool = False, n_sentences: Optional[int] = None,
                    src_lens: Optional[Sequence[int]] = None, tgt_lens: Optional[Sequence[int]] = None,
                    reverse: bool = False) -> List[Alignment]:
    """Dispatch on ``fmt`` in :data:`FORMATS`."""
    if fmt == "pharaoh":
        return read_pharaoh(path, one_based, src_lens, tgt_lens, reverse)
    if fmt == "naacl":
        return read_naacl(path, n_sentences, one_based, src_lens, tgt_lens, reverse)
    if fmt == "giza":
        return read_giza_a3(path, src_lens, tgt_lens, reverse)
    raise ValueError(f"unknown alignment format {fmt!r}; expected one of {', '.join(FORMATS)}")


def read_tokens(path: str) -> List[List[str]]:
    """Whitespace-tokenised sentences, one per line."""
    return [line.split() for line in _read_lines(path)]


def validate_lengths(alignments: Sequence[Alignment], path: str, src_lens: Optional[Sequence[int]] = None,
                     tgt_lens: Optional[Sequence[int]] = None, lines: Optional[Sequence[Optional[int]]] = None) -> None:
    """Check the sentence count and that every link lies inside its sentence pair."""
    for lens, side in ((src_lens, "source"), (tgt_lens, "target")):
        if lens is not None and len(lens) != len(alignments):
            raise AlignmentFormatError(
                f"{len(alignments)} alignment lines but {len(lens)} {side} sentences", path,
                min(len(lens), len(alignments)) + 1)
    if src_lens is None and tgt_lens is None:
        return
    for k, a in enumerate(alignments):
        line = lines[k] if lines is not None else k + 1
        for i, j in sorted(a.possible):
            if src_lens is not None and i >= src_lens[k]:
                raise AlignmentFormatError(
                    f"source index {i} out of range: sentence {k + 1} has {src_lens[k]} source words (0-based)",
                    path, line)
            if tgt_lens is not None and j >= tgt_lens[k]:
                raise AlignmentFormatError(
                    f"target index {j} out of range: sentence {k + 1} has {tgt_lens[k]} target words (0-based)",
                    path, line)


def check_same_count(a: Sequence, b: Sequence, path_a: str, path_b: str) -> None:
    """Raise naming the shorter file and its first missing line when the counts differ."""
    if len(a) != len(b):
        short, n_short, n_long, other = (path_a, len(a), len(b), path_b) if len(a) < len(b) else (
            path_b, len(b), len(a), path_a)
        raise AlignmentFormatError(
            f"has {n_short} sentences but {other} has {n_long} (mismatched line counts)", short, n_short + 1)
