"""The alignment stages' pairs shared among worker processes on a CPU.

Each of ``--threads`` processes (one thread each) aligns its share of a chunk with both directions, from
segmenting to the merged links. Two threads, one per direction, left the segmenting and the merge to one core and
contended for the GIL between their many small kernels; processes leave nothing serial but the writing, and scale
with the cores. The models reach the workers by fork (nothing is pickled but text and links). A GPU, a single
thread, or a platform without fork aligns in the calling process."""
import contextlib
import multiprocessing
import signal
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

SHARE = 500  # pairs per task: a chunk's last tasks leave the other workers idle for at most this many pairs

_JOB = None  # the job of the pool being made: inherited by its forked workers


def workers(opts, cuda: bool) -> int:
    """Worker processes on this device: ``--align-workers``, by default one per ``--threads`` on a CPU; none (0)
    on a GPU, with one thread, or without fork."""
    if cuda or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    asked = getattr(opts, "align_workers", None)
    n = opts.threads if asked is None else asked
    return n if n >= 2 else 0


def _start() -> None:
    import torch

    # Ctrl-C reaches the whole process group: the parent decides, and ends the workers (SIGTERM) when it stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(1)


def _run(task):
    return _JOB(*task)


def spread(run: Callable, n: int, src: Sequence, tgt: Sequence) -> Tuple[Dict[str, list], List[Tuple[int, str]],
                                                                         Dict[str, int]]:
    """A chunk's pairs through ``run`` (of :func:`mapper`), whose job maps ``(src, tgt)`` to ``(out, errors,
    stats)``: per-line lists under each key of ``out``, ``(line, why)`` pairs, counts. With workers the pairs go in
    shares of ``SHARE`` sorted by length (each share batches with little padding; a worker takes the next share
    when it is done with one) and come back in input order; without, the chunk is one job, as before."""
    if n <= 0:
        return run([(src, tgt)])[0]
    order = sorted(range(len(src)), key=lambda k: (len(src[k]), len(tgt[k])))
    parts = [order[k:k + SHARE] for k in range(0, len(order), SHARE)]
    results = run([([src[k] for k in part], [tgt[k] for k in part]) for part in parts])
    out, errors, stats = {}, [], {}
    for part, (o, e, st) in zip(parts, results):
        for key, rows in o.items():
            dest = out.setdefault(key, [None] * len(src))
            for k, row in zip(part, rows):
                dest[k] = row
        errors += [(part[k], why) for k, why in e]
        for key, value in st.items():
            stats[key] = stats.get(key, 0) + value
    return out, sorted(errors), stats


@contextlib.contextmanager
def mapper(job: Callable, n: int) -> Iterator[Callable[[Sequence[Tuple]], list]]:
    """A function mapping a list of argument tuples to ``job``'s results, in order: in ``n`` forked workers, or in
    this process when ``n`` is 0. The parent must not have started OpenMP threads (its torch runs one thread):
    a forked child of a process with a thread pool can hang in it."""
    global _JOB
    if n <= 0:
        yield lambda tasks: [job(*task) for task in tasks]
        return
    _JOB = job
    try:
        with multiprocessing.get_context("fork").Pool(n, initializer=_start) as pool:
            yield lambda tasks: pool.map(_run, tasks, chunksize=1)
    finally:
        _JOB = None
