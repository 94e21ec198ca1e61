"""The input of ``hmm-nmt-align-corpus`` (``-s``/``-t`` or ``-i``), read before anything is made, and the checks
of its outputs: an error names the file and line, or the flag."""
import os
from typing import List, Optional, Tuple

from .model_dir import CorpusError


def _decode_lines(path: str, flag: str) -> List[str]:
    """Lines split on "\\n" only (a U+2028 or form feed inside a line stays in it), a trailing "\\r" dropped."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CorpusError(f"{flag} {path}: cannot read: {e.strerror}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for k, raw in enumerate(lines):
        try:
            out.append(raw.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path}:{k + 1}: not UTF-8 (byte {e.start + 1} of the line)") from None
    return out


def read_corpus(src: Optional[str], tgt: Optional[str], joined: Optional[str]) -> Tuple[List[List[str]],
                                                                                         List[List[str]]]:
    """Word lists of both sides, line-parallel; ``joined`` is fast_align's ``src ||| tgt`` format."""
    if joined:
        pairs = []
        for k, line in enumerate(_decode_lines(joined, "-i")):
            if "|||" not in line:
                raise CorpusError(f"{joined}:{k + 1}: no '|||' between the source and the target")
            s, _, t = line.partition("|||")
            if "|||" in t:  # the rest would be read as target words, linked to words of no side
                raise CorpusError(f"{joined}:{k + 1}: a second '|||' (one 'source ||| target' pair per line)")
            pairs.append((s.split(), t.split()))
        return [p[0] for p in pairs], [p[1] for p in pairs]
    s, t = _decode_lines(src, "-s"), _decode_lines(tgt, "-t")
    if len(s) != len(t):
        raise CorpusError(f"-s {src} has {len(s)} lines but -t {tgt} has {len(t)}: the sides must be line-parallel")
    return [x.split() for x in s], [x.split() for x in t]


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
