"""hmm_nmt_align.base.heap: glibc's thresholds in a trainer's environment, and what they do in the child."""
import ctypes
import json
import os
import subprocess
import sys

import pytest

from hmm_nmt_align.base.heap import MMAP_THRESHOLD, trainer_env

# glibc's mallinfo2 (2.33+): hblks counts the blocks served by mmap
PROBE = r"""
import ctypes, json

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = libc.mallinfo2().hblks
block = libc.malloc(40 << 20)  # a (2,500, 3,984) float32 tensor's size
during = libc.mallinfo2().hblks
libc.free(block)
print(json.dumps(during - before))
"""


def _glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's mallinfo2 (Linux, glibc 2.33 or later) only")
def test_a_trainer_serves_large_blocks_from_its_heap():
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def mmapped(env):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env=env)
        return json.loads(out.stdout)

    assert mmapped(plain) == 1  # glibc's own threshold: a fresh mmap
    assert mmapped(trainer_env(plain)) == 0


def test_trainer_env_adds_the_thresholds_and_keeps_the_users():
    env = trainer_env({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["MALLOC_MMAP_THRESHOLD_"] == str(MMAP_THRESHOLD)
    assert int(env["MALLOC_TRIM_THRESHOLD_"]) >= MMAP_THRESHOLD
    assert trainer_env({"MALLOC_TRIM_THRESHOLD_": "0"})["MALLOC_TRIM_THRESHOLD_"] == "0"
