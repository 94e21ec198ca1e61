"""What every console script of the project shares: Ctrl-C, outputs that would overwrite an input, the user error.

* :func:`interruptible` wraps a ``main(argv) -> int``: a ``KeyboardInterrupt`` anywhere in it (Ctrl-C, or
  SIGINT from a job controller) prints one line ``PROG: interrupted`` on stderr and returns 130 (128 +
  SIGINT, what a shell reports), instead of a traceback. The writers go through
  :mod:`hmm_nmt_align.base.atomic`, so the old output (or none) is left, never a partial one.
* :func:`same_file` / :func:`clobbered_input`: is an output the same file as an input (a hard link, a symbolic
  link, another spelling of the path)? The commands refuse such an output before anything runs.
* :func:`output_inside`: does an output fall inside a directory the command must not write into (a model
  directory of ``hmm-nmt-align-corpus``, whose manifest, codes, text and checkpoints are one unit)?
* :func:`too_long_warning` / :data:`LONG_LINES`: the one contract of ``hmm-nmt-align`` and
  ``hmm-nmt-align-corpus`` for a line too long for the model (left empty, one warning line, exit 0).
* :class:`ExtractionError`: a user error of the checkpoint tools (bad path, subset, method or option); the
  command line prints it and exits with status 2. It lives here, below the model layer, so that a command
  can check its arguments (and answer ``--help``) before importing fairseq.

Standard library only.
"""
import functools
import os
import sys
from typing import Callable, Iterable, Optional, Tuple

__all__ = ["ExtractionError", "interruptible", "same_file", "clobbered_input", "output_inside", "too_long_warning",
           "LONG_LINES", "EXIT_INTERRUPTED", "UNKNOWN_SHARE", "unknown_share_warning"]

EXIT_INTERRUPTED = 130


class ExtractionError(Exception):
    """A user error (bad path, subset, method or option); the CLI prints it and exits with status 2."""


def interruptible(prog: str) -> Callable:
    """Decorator for a console ``main``: Ctrl-C -> ``PROG: interrupted`` on stderr, return 130."""

    def wrap(main):
        @functools.wraps(main)
        def run(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                try:
                    sys.stderr.write(f"{prog}: interrupted\n")
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
                return EXIT_INTERRUPTED

        return run

    return wrap


def same_file(a: str, b: str) -> bool:
    """True when the paths name one file: ``os.path.samefile`` when both exist, else the same real path."""
    if not a or not b or a == "-" or b == "-":
        return False
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def clobbered_input(output: str, inputs: Iterable[Tuple[str, Optional[str]]]) -> Optional[Tuple[str, str]]:
    """The first ``(flag, path)`` of ``inputs`` that ``output`` would overwrite, else None (``-`` is stdout)."""
    if not output or output == "-":
        return None
    for flag, path in inputs:
        if path and same_file(output, path):
            return flag, path
    return None


def output_inside(path: str, directory: str) -> bool:
    """True when writing ``path`` would land inside ``directory`` (or on it): both real paths (symbolic links,
    of the output or of its folders, and ``..`` followed), compared by path components. ``-`` (stdout) is
    nowhere."""
    if not path or path == "-" or not directory:
        return False
    out, folder = os.path.realpath(path), os.path.realpath(directory)
    return out == folder or out.startswith(folder.rstrip(os.sep) + os.sep)


# the --help text of the contract; {prog} is the command's name
LONG_LINES = ("A line longer than the model's positions (1,024 by default; pieces with EOS) is left empty in the "
              "output with one warning line on stderr, '{prog}: warning: FILE:LINE: ...'; the other lines are "
              "aligned and the exit status is 0.")


def too_long_warning(prog: str, path: str, index: int, why: str) -> str:
    """The warning for the 0-based line ``index`` of ``path``, too long for the model (``why``), whose output
    line is left empty: the one format of hmm-nmt-align and hmm-nmt-align-corpus (:data:`LONG_LINES`)."""
    return f"{prog}: warning: {path}:{index + 1}: {why}; its output line is left empty"


UNKNOWN_SHARE = 0.2  # share of <unk> pieces on one side of the text above which the aligners warn


def unknown_share_warning(stats: dict, unk_word: str, threshold: float = UNKNOWN_SHARE,
                          names: Tuple[str, str] = ("--src-text", "--tgt-text")) -> Optional[str]:
    """The warning for text whose pieces are mostly not in the dictionaries (another language, another
    segmentation, the two files swapped), or None: when either side's share of unknown pieces is above
    ``threshold``. ``names``: how the command calls its two sides."""
    shares = {side: stats[f"unk_{side}"] / stats[f"pieces_{side}"]
              for side in ("src", "tgt") if stats.get(f"pieces_{side}")}
    if not shares or max(shares.values()) <= threshold:
        return None
    unk = stats["unk_src"] + stats["unk_tgt"]
    total = stats["pieces_src"] + stats["pieces_tgt"]
    return (f"{unk} of {total} pieces are {unk_word} in the dictionary ({100 * shares.get('src', 0):.0f}% of "
            f"{names[0]}, {100 * shares.get('tgt', 0):.0f}% of {names[1]}; above {100 * threshold:.0f}%): is the text "
            "in the model's languages, source and target in that order, segmented as it was trained?")
