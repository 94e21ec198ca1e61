"""Mean and spread over seeds of ``scripts/benchmark_translation.py`` results (its ``--seeds`` mode).

Moved to ``benchmarks/seeds.py``; this module only re-exports it for code that imported ``seed_summary``
with scripts/ on its path.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path.insert(0, ROOT)

from benchmarks.seeds import METRICS, aggregate, markdown, spread  # noqa: E402,F401
