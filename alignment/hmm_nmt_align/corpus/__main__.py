"""``python -m hmm_nmt_align.corpus ARGS...``: ``hmm-nmt-align-corpus`` without installing."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
