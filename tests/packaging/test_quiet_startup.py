"""Start-up of the command lines: every console script's ``--help`` without importing torch (or fairseq), and
``import hmm_nmt`` printing nothing and leaving the logging configuration as it found it.

The console scripts are read from pyproject.toml's ``[project.scripts]`` and run through a tiny runner (import the
entry point, call it with ``--help``, report whether torch was imported), so the declared entry points are what is
tested, installed or not. No wall-clock threshold: importing torch is what costs the seconds.
"""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def console_scripts():
    text = open(os.path.join(ROOT, "pyproject.toml")).read()
    block = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"', block, re.M))


SCRIPTS = console_scripts()

RUNNER = """
import contextlib, importlib, io, json, sys
module, func = sys.argv[1].split(":")
out = io.StringIO()
code = None
with contextlib.redirect_stdout(out):
    try:
        getattr(importlib.import_module(module), func)(["--help"])
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "fairseq": "fairseq" in sys.modules,
                  "help": out.getvalue()}))
"""


def test_the_list_is_read():
    assert {"hmm-nmt-tags", "hmm-nmt-tag", "hmm-nmt-user-dir", "hmm-nmt-align"} <= set(SCRIPTS), SCRIPTS


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_help_imports_neither_torch_nor_fairseq(script):
    p = subprocess.run([sys.executable, "-c", RUNNER, SCRIPTS[script]], env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["code"] in (0, None) and "usage" in res["help"].lower(), res
    assert not res["torch"] and not res["fairseq"], f"{script} --help imported torch or fairseq"


QUIET = """
import logging, sys
{before}
root = logging.getLogger()
level, handlers = root.level, list(root.handlers)
import hmm_nmt
assert (root.level, root.handlers) == (level, handlers), (root.level, root.handlers, level, handlers)
assert logging.getLogger("fairseq.tasks.text_to_speech").level == logging.NOTSET
"""


@pytest.mark.slow
@pytest.mark.parametrize("before", ["", "logging.basicConfig(level=logging.INFO)",
                                    "logging.getLogger().setLevel(logging.ERROR)"],
                         ids=["unconfigured", "info-handler", "level-only"])
def test_import_hmm_nmt_prints_nothing_and_leaves_logging_as_found(before):
    """fairseq's import sets the root logger to DEBUG with a stderr handler and logs "Please install
    tensorboardX" through it; importing the plugin must do neither."""
    p = subprocess.run([sys.executable, "-c", QUIET.format(before=before)], env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout == "" and p.stderr == "", (p.stdout, p.stderr)


GUARD = """
import logging
import hmm_nmt
root = logging.getLogger()
with hmm_nmt._quiet_fairseq_import():
    logging.basicConfig(level=logging.DEBUG)  # what fairseq's wav2vec2_classification does on import
    logging.getLogger("fairseq.tasks.text_to_speech").info("Please install tensorboardX")
    logging.getLogger("fairseq.somewhere").debug("debug noise")
    logging.getLogger("fairseq.somewhere").warning("a real warning")
assert root.level == logging.WARNING and root.handlers == [], (root.level, root.handlers)
"""


@pytest.mark.slow
def test_the_import_guard_keeps_real_warnings():
    p = subprocess.run([sys.executable, "-c", GUARD], env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.strip().splitlines() == ["a real warning"], p.stderr
