"""The input of ``hmm-nmt-align-corpus`` (``-s``/``-t`` or ``-i``), checked before anything is made and streamed to
every stage (:class:`Corpus`), and the checks of its outputs: an error names the file and line, or the flag."""
import contextlib
import hashlib
import itertools
import os
import shutil
import tempfile
import weakref
from array import array
from typing import Iterator, List, Optional, Sequence, Tuple

from .model_dir import CorpusError


class Corpus:
    """The input pairs, never held in memory: one checking pass when made (UTF-8, line-parallel, one ``|||`` a
    line) keeps each line's word counts and the corpus's digest; every stage then reads the lines again, in
    order (:meth:`pairs`, :meth:`chunks`), so that memory stays flat in the corpus size. A file changed between
    two passes is an error, not a silent misalignment. An input that can be read only once (``<(zcat ...)``,
    ``/dev/stdin``, a FIFO) is copied to a temporary file first, removed with the object."""

    def __init__(self, src: Optional[str], tgt: Optional[str], joined: Optional[str]):
        self.src, self.tgt, self.joined = src, tgt, joined
        self._read_from = {p: self._rereadable(p, f) for p, f in ((src, "-s"), (tgt, "-t"), (joined, "-i")) if p}
        self.src_len, self.tgt_len = array("I"), array("I")
        h = hashlib.sha256()
        for s, t in self._read():
            self.src_len.append(len(s))
            self.tgt_len.append(len(t))
            h.update((" ".join(s) + "\t" + " ".join(t) + "\n").encode("utf-8"))
        self.digest = h.hexdigest()  # the manifest's "corpus": a model directory knows its text by it

    def __len__(self) -> int:
        return len(self.src_len)

    def _rereadable(self, path: str, flag: str) -> str:
        """``path``, or where a pipe's bytes were copied so that every stage can read them."""
        if os.path.isfile(path) or not os.path.exists(path):  # a missing file: _lines says so
            return path
        fd, tmp = tempfile.mkstemp(prefix="hmm-nmt-align-corpus.", suffix=flag.lstrip("-"))
        weakref.finalize(self, _remove, tmp)
        try:
            with open(path, "rb") as f, open(fd, "wb") as out:
                shutil.copyfileobj(f, out, 1 << 20)
        except OSError as e:
            raise CorpusError(f"{flag} {path}: cannot read: {e.strerror}") from None
        return tmp

    def _lines(self, path: str, flag: str) -> Iterator[str]:
        return _lines(self._read_from[path], flag, path)

    def _read(self) -> Iterator[Tuple[List[str], List[str]]]:
        if self.joined:
            for k, line in enumerate(self._lines(self.joined, "-i")):
                if "|||" not in line:
                    raise CorpusError(f"{self.joined}:{k + 1}: no '|||' between the source and the target")
                s, _, t = line.partition("|||")
                if "|||" in t:  # the rest would be read as target words, linked to words of no side
                    raise CorpusError(f"{self.joined}:{k + 1}: a second '|||' (one 'source ||| target' pair per "
                                      "line)")
                yield s.split(), t.split()
            return
        ns = nt = 0
        with contextlib.ExitStack() as stack:
            s_lines = stack.enter_context(contextlib.closing(self._lines(self.src, "-s")))
            t_lines = stack.enter_context(contextlib.closing(self._lines(self.tgt, "-t")))
            for s, t in itertools.zip_longest(s_lines, t_lines):
                ns, nt = ns + (s is not None), nt + (t is not None)
                if s is None or t is None:
                    continue  # counting the longer side's lines, for the message
                yield s.split(), t.split()
        if ns != nt:
            raise CorpusError(f"-s {self.src} has {ns} lines but -t {self.tgt} has {nt}: the sides must be "
                              "line-parallel")

    def pairs(self, lines: Optional[Sequence[int]] = None) -> Iterator[Tuple[int, List[str], List[str]]]:
        """``(line index, source words, target words)`` of every line, or of ``lines`` (increasing), in order."""
        want = iter(lines) if lines is not None else None
        nxt = next(want, None) if want is not None else None
        if want is not None and nxt is None:
            return
        k = -1
        for k, (s, t) in enumerate(self._read()):
            if k >= len(self) or (len(s), len(t)) != (self.src_len[k], self.tgt_len[k]):
                raise CorpusError(f"{self.joined or self.src}:{k + 1}: the input changed while the command ran")
            if want is None:
                yield k, s, t
            elif k == nxt:
                yield k, s, t
                nxt = next(want, None)
                if nxt is None:
                    return
        if k + 1 != len(self):
            raise CorpusError(f"{self.joined or self.src}: the input changed while the command ran ({k + 1} lines, "
                              f"{len(self)} before)")

    def chunks(self, size: int, lines: Optional[Sequence[int]] = None
               ) -> Iterator[Tuple[List[int], List[List[str]], List[List[str]]]]:
        """:meth:`pairs` ``size`` at a time, as (line indices, source word lists, target word lists)."""
        keys, src, tgt = [], [], []
        for k, s, t in self.pairs(lines):
            keys.append(k)
            src.append(s)
            tgt.append(t)
            if len(keys) == size:
                yield keys, src, tgt
                keys, src, tgt = [], [], []
        if keys:
            yield keys, src, tgt

    def empty_sides(self) -> int:
        """Lines with no word on one side or both."""
        return sum(1 for a, b in zip(self.src_len, self.tgt_len) if not a or not b)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _lines(path: str, flag: str, name: str) -> Iterator[str]:
    """Lines of ``path`` split on "\\n" only (a U+2028 or form feed inside a line stays in it), a trailing "\\r"
    dropped; an error names the input as the user gave it (``name``)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise CorpusError(f"{flag} {name}: cannot read: {e.strerror}") from None
    with f:
        for k, raw in enumerate(f):  # binary lines end at b"\n" alone
            try:
                yield raw.decode("utf-8").rstrip("\n").rstrip("\r")
            except UnicodeDecodeError as e:
                raise CorpusError(f"{name}:{k + 1}: not UTF-8 (byte {e.start + 1} of the line)") from None


def read_corpus(src: Optional[str], tgt: Optional[str], joined: Optional[str]) -> Tuple[List[List[str]],
                                                                                         List[List[str]]]:
    """Word lists of both sides, line-parallel, in memory (for a slice of a corpus; the command streams a
    :class:`Corpus`); ``joined`` is fast_align's ``src ||| tgt`` format."""
    corpus = Corpus(src, tgt, joined)
    src_words, tgt_words = [], []
    for _, s, t in corpus.pairs():
        src_words.append(s)
        tgt_words.append(t)
    return src_words, tgt_words


def _check_outputs(opts) -> None:
    """Every output: not an input, not another output, not a folder, and nowhere inside the model directory (its
    manifest, codes, texts and checkpoints are what the next run reads); its folder exists."""
    from hmm_nmt_align.base.console import output_inside

    inputs = [(f, p) for f, p in (("-s", opts.src), ("-t", opts.tgt), ("-i", opts.input)) if p]
    outputs = [(f, p) for f, p in (("-o", opts.output), ("-f", opts.fwd), ("-r", opts.rev),
                                   ("--scores", opts.scores)) if p]
    if not outputs:
        raise CorpusError("nothing to write: give -o (merged), -f and/or -r")
    if opts.scores and not opts.output:
        raise CorpusError("--scores are the merged links' (-o): give -o too")
    if os.path.exists(opts.model_dir) and not os.path.isdir(opts.model_dir):
        raise CorpusError(f"--model-dir {opts.model_dir} is a file, not a directory")
    seen = {}
    for flag, path in outputs:
        real = os.path.realpath(path)
        if real in seen:
            raise CorpusError(f"{flag} {path} is also {seen[real]}")
        seen[real] = flag
        for iflag, ipath in inputs:
            if os.path.exists(path) and os.path.exists(ipath) and os.path.samefile(path, ipath):
                raise CorpusError(f"{flag} {path} is the input {iflag}: refusing to overwrite it")
        if output_inside(path, opts.model_dir):
            raise CorpusError(f"{flag} {path} is inside --model-dir {opts.model_dir}: the model directory holds "
                              "only what the tool makes there; write the alignment elsewhere")
        if os.path.isdir(real):
            raise CorpusError(f"{flag} {path} is a directory: give a file name")
        if not os.path.isdir(os.path.dirname(real)):
            raise CorpusError(f"{flag}: the directory of {path} does not exist")
