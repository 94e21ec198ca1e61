"""Shared by every stage: repository paths, the user-facing error, and atomic file I/O."""
import json
import os
import sys
import time

from hmm_nmt_align.base.atomic import atomic_write  # noqa: F401  (the project's one atomic writer; stages import it from here)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "hmm_nmt")  # fairseq's --user-dir: the plugin of this checkout
SCRIPTS = os.path.join(REPO, "scripts")


class BenchmarkError(Exception):
    """A problem the user must fix; reported without a traceback."""


def write_json(path, obj):
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def stamped(doc: dict, prog: str, argv) -> dict:
    """``doc`` with the command line that made it (``prog`` and ``argv``, default sys.argv) and today's date."""
    return {**doc, "command": " ".join([prog, *(argv if argv is not None else sys.argv[1:])]),
            "date": time.strftime("%Y-%m-%d")}


def publish(doc: dict, table, out) -> None:
    """Print ``table(doc)`` and write ``doc`` to ``out`` (when given) as JSON."""
    print(table(doc), end="")
    if out:
        write_json(out, doc)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
