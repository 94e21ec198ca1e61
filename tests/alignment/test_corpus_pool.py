"""hmm_nmt_align.corpus.pool: a chunk spread over workers in length-sorted shares comes back in input order."""
import os

import pytest

from hmm_nmt_align.corpus import pool


def _job(src, tgt):
    """Per line: its words joined; an error for a line whose source is "bad"; counts of lines and words."""
    out = {"joined": [" ".join(s + ["|"] + t) for s, t in zip(src, tgt)]}
    errors = [(k, "bad line") for k, s in enumerate(src) if s == ["bad"]]
    return out, errors, {"lines": len(src), "words": sum(map(len, src))}


@pytest.mark.parametrize("n", [0, 2])
def test_shares_come_back_in_input_order_with_their_errors_and_counts(monkeypatch, n):
    monkeypatch.setattr(pool, "SHARE", 3)
    src = [["a"] * (k % 5 + 1) for k in range(11)]
    src[7] = ["bad"]
    tgt = [[str(k)] for k in range(11)]
    with pool.mapper(_job, n) as run:
        out, errors, stats = pool.spread(run, n, src, tgt)
    assert out == _job(src, tgt)[0]
    assert errors == [(7, "bad line")]
    assert stats == {"lines": 11, "words": sum(map(len, src))}


def test_workers_are_forked_processes_of_one_thread(monkeypatch):
    def job(src, tgt):
        import torch

        return {"pid": [os.getpid()] * len(src), "threads": [torch.get_num_threads()] * len(src)}, [], {}

    monkeypatch.setattr(pool, "SHARE", 1)
    with pool.mapper(job, 2) as run:
        out, _, _ = pool.spread(run, 2, [["a"]] * 4, [["b"]] * 4)
    assert os.getpid() not in out["pid"] and set(out["threads"]) == {1}


def test_a_gpu_or_one_thread_aligns_in_the_calling_process():
    class Opts:
        threads = 2

    assert pool.workers(Opts, cuda=False) == 2 and pool.workers(Opts, cuda=True) == 0
    Opts.threads = 1
    assert pool.workers(Opts, cuda=False) == 0


@pytest.mark.parametrize("threads, asked, cuda, expected", [
    (2, None, False, 2), (1, None, False, 0), (4, 3, False, 3), (2, 0, False, 0), (1, 1, False, 0),
    (4, None, True, 0), (4, 3, True, 0),
])
def test_workers_follow_the_threads_unless_asked_and_never_on_a_gpu(threads, asked, cuda, expected):
    from types import SimpleNamespace

    assert pool.workers(SimpleNamespace(threads=threads, align_workers=asked), cuda) == expected
