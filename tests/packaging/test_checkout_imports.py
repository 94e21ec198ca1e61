"""The tests import the checkout's code, whichever tree is installed in the environment (``tests/conftest.py``):
both import names resolve to folders of this checkout, in this process and in the children the tests start."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _inside_checkout(path):
    return os.path.realpath(path).startswith(os.path.realpath(ROOT) + os.sep)


def test_both_packages_come_from_this_checkout():
    import hmm_nmt_align
    import hmm_nmt_align.base.atomic

    assert _inside_checkout(hmm_nmt_align.__file__), hmm_nmt_align.__file__
    assert os.path.realpath(hmm_nmt_align.__file__) == \
        os.path.realpath(os.path.join(ROOT, "alignment", "hmm_nmt_align", "__init__.py"))
    # hmm_nmt imports fairseq: its location without importing it
    import importlib.util

    spec = importlib.util.find_spec("hmm_nmt")
    assert os.path.realpath(spec.origin) == os.path.realpath(os.path.join(ROOT, "hmm_nmt", "__init__.py"))


def test_children_import_this_checkout_too():
    code = ("import importlib.util, hmm_nmt_align; print(hmm_nmt_align.__file__); "
            "print(importlib.util.find_spec('hmm_nmt').origin)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/",
                         env=dict(os.environ)).stdout.split()
    assert len(out) == 2 and all(_inside_checkout(p) for p in out), out
