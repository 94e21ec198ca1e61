#!/usr/bin/env bash
# WSJ (CoNLL-2000 sections 15-18) language-model data in one command: PTB-style text, Brown clusters,
# fairseq binarisation.   usage: examples/wsj_lm/prepare.sh OUT [extra prepare.py options]
# The input is CoNLL-2000's train.txt (--conll FILE; default ../shared/data/conll2000/train.txt.gz beside the
# checkout). It is public: python -m nltk.downloader conll2000, then --conll ~/nltk_data/corpora/conll2000/train.txt
# (or train.txt.gz of https://www.clips.uantwerpen.be/conll2000/chunking/).
# The same stages serve other sources through prepare.py's options (examples/multi30k_lm/prepare.sh passes
# --multi30k DIR).
# Needs the `lm` extra (brown-clustering): pip install '.[lm]' (in a checkout: pip install -e '.[lm]').
# The input files and the extras are checked before the first stage: a missing one is one line, exit 2, nothing made.
set -euo pipefail
PROG=wsj_lm/prepare.sh
die() { echo "$PROG: error: $*" >&2; exit 2; }
[[ $# -ge 1 && "$1" != -* ]] || die "usage: examples/wsj_lm/prepare.sh OUT [prepare.py options]"
OUT=$1
shift
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-$(command -v python3 || command -v python || echo python3)}
command -v "$PYTHON" > /dev/null 2>&1 || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
"$PYTHON" -c "import brown_clustering" 2> /dev/null \
  || die "the brown-clustering package (the [lm] extra) is missing: pip install '.[lm]' (in a checkout: pip install -e '.[lm]')"
"$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('fairseq_cli') is None)" 2> /dev/null \
  || die "$PYTHON lacks fairseq: pip install . (in a checkout: pip install -e .)"
"$PYTHON" "$HERE/prepare.py" --check --out "$OUT/raw" --brown-clusters 64 "$@"  # the input files: one line, exit 2
"$PYTHON" "$HERE/prepare.py" --out "$OUT/raw" --brown-clusters 64 "$@"
"$PYTHON" -m fairseq_cli.preprocess --only-source --trainpref "$OUT/raw/train.txt" --validpref "$OUT/raw/valid.txt" \
    --testpref "$OUT/raw/test.txt" --destdir "$OUT/bin" --workers 1
echo "prepared: $OUT/raw (text, Brown clusters) and $OUT/bin (fairseq)"
