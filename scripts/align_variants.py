#!/usr/bin/env python
"""AER of every link variant of ``hmm-nmt-align`` for one pair of checkpoints, from one matrix extraction.

    python scripts/align_variants.py --fwd FWD.pt --rev REV.pt --data DATA-BIN --subset valid \
        --gold valid.align [--methods posterior,alignment] [--thresholds 0.1,0.2,...] [--json OUT]

The matrices of each model are computed once (``hmm_nmt_align.extract.extract_matrices``) and every variant is
read off them with the same function ``hmm-nmt-align`` uses (``sentence_word_links``), so a row's links
are exactly what ``hmm-nmt-align --method M --links D [--rev-path REV --symmetrize S]`` writes.
Variants: one direction (fwd, and rev written source-target) with argmax / mutual / union / threshold:T;
both directions with the atools heuristics on argmax links; soft prod / mean with every decision; each
with ``--pool pieces`` and ``--pool words`` (a ``pool`` field per row). Word-level data only here (no subword
mapping; the raw-text input of ``--src-text/--tgt-text`` maps pieces to words). Tune thresholds on a dev
subset, report on test.
The work is ``benchmarks/align_variants.py``'s (its ``main`` is this command line).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]

from benchmarks.align_variants import main  # noqa: E402

if __name__ == "__main__":
    main()
