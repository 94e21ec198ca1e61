import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_sigint():
    """``preexec_fn`` for a child that must see a simulated Ctrl-C: a shell without job control starts
    background jobs with SIGINT ignored, and an ignored SIGINT is inherited across exec (Python then installs
    no KeyboardInterrupt handler), so the tests restore the default before exec."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
# the checkout under test comes first, whatever is installed in the environment
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")


@pytest.fixture(scope="session")
def scale_toy(tmp_path_factory):
    """A 200-pair toy corpus binarised by fairseq-preprocess, shared by the scaling tests (distributed, resume,
    bf16) of one session; each test writes its checkpoints under its own subdirectory."""
    import subprocess

    work = tmp_path_factory.mktemp("scale_toy")
    raw = work / "raw"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw),
                    "--train", "200", "--valid", "20", "--test", "20"], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--destdir", str(work / "bin"),
                    "--joined-dictionary", "--workers", "1"], check=True, capture_output=True, env=env)
    return work
