#!/usr/bin/env bash
# English-French Hansards (the HLT-NAACL 2003 gold: 37 trial pairs as the dev part, 447 test pairs, with the
# 310,661 ISI training pairs), normalized to one form (examples/hansards/normalize.py): hmm-nmt-align-corpus with
# its defaults against eflomal and fast_align in the same run (scripts/align_benchmark.py).
#
#   examples/alignment/hansards.sh [--data DIR] [--work DIR] [--seeds "1 2 3"] [--eflomal-runs N]
#                                  [--ensemble-seeds "1 2"] [--results FILE]
#                                  [-- hmm-nmt-align-corpus options]
#
# DIR is the hansards_enfr folder (gold/, train/isi_train.{e,f}.gz; default ../shared/data/hansards_enfr).
# `all` in the results is trial + test; the published figures are on the 447 test pairs.
set -euo pipefail
export ALIGN_BENCHMARK_COMMAND="examples/alignment/hansards.sh${1+$(printf " %q" "$@")}"  # as typed, quoted
DATA="$(cd "$(dirname "$0")/../.." && pwd)/../shared/data/hansards_enfr" WORK="runs/align/hansards-enfr" SEEDS="1 2 3" RUNS=3
RESULTS="$(cd "$(dirname "$0")/../.." && pwd)/results/alignment/hansards-enfr.json"
source "$(dirname "$0")/common.sh"
for f in gold/enfr.src-tgt gold/enfr.gold gold/trial/trial.align train/isi_train.e.gz train/isi_train.f.gz; do
  [[ -f "$DATA/$f" ]] || die "$DATA/$f not found (--data DIR: the hansards_enfr folder)"
done
N="$WORK/normalized"
mkdir -p "$N"
if [[ ! -f "$N/done" ]]; then
  "$PYTHON" "$REPO/examples/hansards/normalize.py" gold --local "$DATA" --out "$N"
  "$PYTHON" "$REPO/examples/hansards/normalize.py" train --lang en "$DATA/train/isi_train.e.gz" "$N/train.en"
  "$PYTHON" "$REPO/examples/hansards/normalize.py" train --lang fr "$DATA/train/isi_train.f.gz" "$N/train.fr"
  for side in en fr gold; do cat "$N/trial.$side" "$N/test.$side" > "$N/gold.$side"; done
  touch "$N/done"
fi
# shellcheck disable=SC2086
exec "$PYTHON" "$REPO/scripts/align_benchmark.py" --name hansards-enfr --work "$WORK" \
  --gold-src "$N/gold.en" --gold-tgt "$N/gold.fr" --gold "$N/gold.gold" --gold-one-based --dev-pairs 37 \
  --train-src "$N/train.en" --train-tgt "$N/train.fr" --seeds $SEEDS "${ENSEMBLE[@]}" --eflomal-runs "$RUNS" --fast-align \
  --results "$RESULTS" --data-note "Hansards trial (37, dev) + test (447) gold + 310,661 ISI pairs, normalized" \
  -- "${EXTRA[@]}"
