#!/usr/bin/env python3
"""``hmm-nmt-tag`` from a checkout without the console script (see :mod:`hmm_nmt.cli.tag`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hmm_nmt.cli.tag import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
