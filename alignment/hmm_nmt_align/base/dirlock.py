"""One run at a time in a model directory: an advisory lock on ``DIR/.lock`` (``flock``).

A run that trains (or writes anything into the directory) holds it exclusively; runs that only read a finished
model (``--align-only``, ``hmm-nmt-align --model-dir``) share it, so several may align with one model at once but
never while it trains. The kernel drops the lock when its holder dies, however it dies (SIGKILL included), so a
stale lock never blocks a rerun: it is taken over by the next run. The file holds the last holder's pid, for the
one-line refusal (the exclusive holder's; readers write none). Where ``fcntl`` is missing (not POSIX) there is no
lock.
"""
import contextlib
import os
from typing import Iterator

LOCK_FILE = ".lock"


class DirectoryBusy(Exception):
    """Another live run holds the directory; ``str()`` is one line naming it and that run's pid."""


def _holder(path: str) -> str:
    """``pid N`` of the writer the lock file names while that process lives, else ``another run``."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            pid = f.read().strip()
        if pid.isdigit():
            os.kill(int(pid), 0)  # alive? (a reader may hold the lock after a killed writer)
            return f"pid {pid}"
    except (OSError, ValueError, OverflowError):
        pass
    return "another run"


@contextlib.contextmanager
def locked(directory: str, exclusive: bool = True, what: str = "--model-dir") -> Iterator[None]:
    """Hold ``directory``'s lock for the block (``exclusive``: to write it; else shared, to read it), or raise
    :class:`DirectoryBusy` at once when another run holds it in a conflicting mode."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform
        yield
        return
    path = os.path.join(directory, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by children (PEP 446)
    except OSError:
        if exclusive:
            raise
        try:  # a model on a read-only disk: readers lock what is there, or nothing
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield
            return
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(path)
            if exclusive and holder == "another run":  # no live writer named: readers hold it
                holder = "another run that reads it"
            raise DirectoryBusy(f"{what} {directory} is in use by {holder}; wait for it to finish, or stop it") \
                from None
        if exclusive:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        try:
            yield
        finally:
            if exclusive:
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock
