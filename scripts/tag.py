#!/usr/bin/env python3
"""``hmm-nmt-tag`` from a checkout without the console script (see :mod:`hmm_nmt.cli.tag`)."""
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "alignment")]  # this checkout's packages

from hmm_nmt.cli.tag import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
