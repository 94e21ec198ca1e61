#!/usr/bin/env bash
# German-English Europarl (the RWTH gold, 508 pairs, with 23,580 in-domain training pairs): hmm-nmt-align-corpus
# with its defaults against eflomal and fast_align in the same run (scripts/align_benchmark.py).
#
#   examples/alignment/europarl_deen.sh [--data DIR] [--work DIR] [--seeds "1 2 3"] [--eflomal-runs N]
#                                       [--ensemble-seeds "1 2"] [--results FILE]
#                                       [-- hmm-nmt-align-corpus options]
#
# DIR is the europarl_deen folder (gold/deen.{de,en,talp}, train/comtrans.{de,en}.gz; default
# ../shared/data/europarl_deen). The gold is 1-based, German first; its first 100 pairs are the dev part (every
# choice is made there), the other 408 the test part; `all` is the 508 of the published figures.
set -euo pipefail
export ALIGN_BENCHMARK_COMMAND="examples/alignment/europarl_deen.sh${1+$(printf " %q" "$@")}"  # as typed, quoted
DATA="$(cd "$(dirname "$0")/../.." && pwd)/../shared/data/europarl_deen" WORK="runs/align/europarl-deen" SEEDS="1 2 3" RUNS=3
RESULTS="$(cd "$(dirname "$0")/../.." && pwd)/results/alignment/europarl-deen.json"
source "$(dirname "$0")/common.sh"
for f in gold/deen.de gold/deen.en gold/deen.talp train/comtrans.de.gz train/comtrans.en.gz; do
  [[ -f "$DATA/$f" ]] || die "$DATA/$f not found (--data DIR: the europarl_deen folder)"
done
# shellcheck disable=SC2086
exec "$PYTHON" "$REPO/scripts/align_benchmark.py" --name europarl-deen --work "$WORK" \
  --gold-src "$DATA/gold/deen.de" --gold-tgt "$DATA/gold/deen.en" --gold "$DATA/gold/deen.talp" --gold-one-based \
  --dev-pairs 100 --train-src "$DATA/train/comtrans.de.gz" --train-tgt "$DATA/train/comtrans.en.gz" \
  --seeds $SEEDS "${ENSEMBLE[@]}" --eflomal-runs "$RUNS" --fast-align --results "$RESULTS" \
  --data-note "RWTH de-en Europarl gold (dev: first 100 pairs) + 23,580 ComTrans Europarl pairs" -- "${EXTRA[@]}"
