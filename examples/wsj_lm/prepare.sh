#!/usr/bin/env bash
# WSJ (CoNLL-2000 sections 15-18) language-model data in one command: PTB-style text, Brown clusters,
# fairseq binarisation.   usage: examples/wsj_lm/prepare.sh OUT [extra prepare.py options]
# The same stages serve other sources through prepare.py's options (examples/multi30k_lm/prepare.sh passes
# --multi30k DIR).
# needs the `lm` extra: pip install brown-clustering nltk   (or pip install -e .[lm])
set -euo pipefail
OUT=${1:?usage: $0 OUT [prepare.py options]}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python}
$PYTHON "$HERE/prepare.py" --out "$OUT/raw" --brown-clusters 64 "$@"
$PYTHON -m fairseq_cli.preprocess --only-source --trainpref "$OUT/raw/train.txt" --validpref "$OUT/raw/valid.txt" \
    --testpref "$OUT/raw/test.txt" --destdir "$OUT/bin" --workers 1
echo "prepared: $OUT/raw (text, Brown clusters) and $OUT/bin (fairseq)"
