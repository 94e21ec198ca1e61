"""Shared by every stage: repository paths, the user-facing error, and atomic file I/O."""
import json
import os

from hmm_nmt_align.base.atomic import atomic_write  # noqa: F401  (the project's one atomic writer; stages import it from here)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "hmm_nmt")  # fairseq's --user-dir: the plugin of this checkout
SCRIPTS = os.path.join(REPO, "scripts")


class BenchmarkError(Exception):
    """A problem the user must fix; reported without a traceback."""


def write_json(path, obj):
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
