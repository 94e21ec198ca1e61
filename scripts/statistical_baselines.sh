#!/usr/bin/env bash
# Statistical word-alignment baselines (eflomal, fast_align via systran-align), symmetrized and scored
# with this repository's alignment package.
#   scripts/statistical_baselines.sh SRC TGT GOLD [--method grow-diag] [--train-src X --train-tgt Y]
#                                    [--aligners eflomal,fast_align] [--out-dir DIR]
# GOLD may be '-' (no gold: alignments are written, link counts printed).
# Needs the [baselines] extra:  pip install -e '.[baselines]'
set -euo pipefail
if [ "$#" -lt 3 ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"

PYTHONPATH="${ROOT}:${ROOT}/alignment${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m hmm_nmt_align.baselines "$@"
