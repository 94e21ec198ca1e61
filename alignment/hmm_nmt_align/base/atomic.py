"""Atomic file output: write to a temporary file in the destination's folder, then rename over it.

The one implementation behind every writer of the project (alignment files, CoNLL files, heat maps,
fairseq's checkpoint copies, benchmark results). A failure or a kill leaves either the old file or the
new one, never a truncated file, and no temporary file behind. An output that is a symbolic link is written
through (the link stays, its target gets the content), as shell redirection does.

Standard library only: the light readers and writers of :mod:`hmm_nmt_align` must not import torch or
fairseq, and the plugin (checkpoint copies, CoNLL output) uses it too, so it sits below everything else.
"""
import contextlib
import os
import sys
import tempfile

__all__ = ["atomic_output", "atomic_write", "resolved"]


@contextlib.contextmanager
def atomic_output(path: str, suffix: str = ".tmp", fixed: bool = False):
    """Yield a temporary path next to ``path``; when the block succeeds, rename it over ``path``.

    By default the temporary file is a fresh hidden ``mkstemp`` file that exists (empty) when the block
    starts; the writer overwrites it. ``suffix`` ends its name, for writers that infer the format from it or
    append an extension (``np.savez`` needs ``.npz``). With ``fixed=True`` it is ``path + suffix`` instead,
    for a single writer of large files (checkpoints): what a SIGKILL leaves behind is overwritten by the
    next write rather than piling up. The result gets the permissions of a newly created file (``0o666``
    minus the umask), not ``mkstemp``'s ``0600``. On any failure the temporary file is removed and ``path``
    is left as it was.

    A ``path`` that is a symbolic link is written through, as a shell's ``> path`` does: the link stays and
    the file it points to (created if the link dangles) gets the new content, renamed into place in that
    file's own folder (a rename across folders would not be atomic, and one over the link would replace it).
    """
    path = resolved(path)
    if fixed:
        tmp = path + suffix
    else:
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=suffix, dir=folder)
        os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def resolved(path: str) -> str:
    """``path`` with its symbolic links followed (the file a write to ``path`` lands in); ``path`` itself when
    it is no link and its folder holds none."""
    real = os.path.realpath(path)
    return path if real == os.path.abspath(path) else real


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; ``path == '-'`` writes to standard output."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
