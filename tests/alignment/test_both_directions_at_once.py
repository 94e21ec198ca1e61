"""The two alignment directions computed side by side (hmm_nmt.aligner.pairs._both_at_once)."""
import itertools
import time

import pytest

from hmm_nmt.aligner.pairs import _both_at_once


def test_both_generators_run_to_the_end_in_their_own_order():
    fwd, rev = _both_at_once(iter(range(50)), (x * x for x in range(30)))
    assert fwd == list(range(50)) and rev == [x * x for x in range(30)]


def test_an_error_in_one_direction_stops_the_other_promptly():
    """An endless direction is stopped at its next item when the other fails (or Ctrl-C arrives): an
    interrupted alignment exits within a batch instead of finishing its chunk."""
    produced = itertools.count()

    def endless():
        for k in produced:
            time.sleep(0.01)
            yield k

    def failing():
        yield 0
        time.sleep(0.1)
        raise ValueError("the reverse model failed")

    start = time.monotonic()
    with pytest.raises(ValueError, match="reverse model failed"):
        _both_at_once(endless(), failing())
    assert time.monotonic() - start < 30
    assert next(produced) < 3000  # the endless direction stopped instead of running on


@pytest.mark.parametrize("cast", [False, True])
def test_the_directions_compute_in_the_callers_precision(cast):
    """Autocast is per thread: under the caller's bf16 autocast both workers' matmuls are bf16, else fp32."""
    import contextlib

    import torch

    def products():
        yield (torch.ones(2, 3) @ torch.ones(3, 2)).dtype

    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if cast else contextlib.nullcontext()
    with ctx:
        fwd, rev = _both_at_once(products(), products())
    want = torch.bfloat16 if cast else torch.float32
    assert fwd == [want] and rev == [want]
