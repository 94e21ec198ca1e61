#!/usr/bin/env bash
# Multi30k de-en: prepare the data (if not done yet) and benchmark transformer and transformer_dhmm (zero order:
# exact, and the CPU path that prunes to 4 source positions for 80% of the updates, then trains exactly) with
# identical settings; lenpen and EOS penalty (--task translation_eos_penalty: lenpen alone cannot lengthen a
# model that ends too early) are chosen on the even dev lines and kept only if the odd dev lines confirm them
# against the stock search (--length-choice halves; both rows are reported); the table lands in
# <work>/benchmark/results.md.
#
#   examples/multi30k/run.sh [--work DIR] [--preset converge|ladder] [prepare.sh options] [-- benchmark_translation.py options]
#
# Without a source option the data come from ../shared/data/multi30k when that directory exists, else they
# are downloaded.  The defaults below are the CPU run of docs/translation.md (2000 BPE merges, d=128, 2+2 layers,
# 2000 updates per model, de-en); anything after "--" overrides them (argparse: the last value wins), e.g. two
# seeds with mean and spread, the first-order model too, or the recipe size on a GPU:
#   examples/multi30k/run.sh -- --seeds 1,2 --models transformer,dhmm0,dhmm0_fast,dhmm1
#   examples/multi30k/run.sh --merges 8000 -- --embed-dim 256 --ffn-dim 1024 --layers 3 --max-tokens 4096 \
#       --lr 1e-3 --warmup-updates 1000 --max-update 4000 --models transformer,dhmm0,dhmm1
# Presets of the converged tables (docs/translation.md): --preset converge trains these settings to convergence
# (--patience 8 on the validation loss, at most 24000 updates, dev BLEU per validation for time to quality);
# --preset ladder is the larger size of the same protocol (8000 merges, d=256, 3+3 layers, ffn 1024, 4096-token
# batches, lr 1e-3 with 1000 warm-up updates, at most 12000 updates; transformer and the CPU path):
#   examples/multi30k/run.sh --work runs/m30k-conv --preset converge -- --seed 2
#   examples/multi30k/run.sh --work runs/m30k-ladder --preset ladder
# Interrupt at any time; the same command resumes from the checkpoints.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
export PYTHON

WORK="runs/multi30k"
PRESET=""
PREP=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --work) [[ $# -ge 2 ]] || { echo "run.sh: error: --work needs a value" >&2; exit 2; }; WORK="${2%/}"; shift 2 ;;
    --preset) [[ $# -ge 2 ]] || { echo "run.sh: error: --preset needs a value (converge or ladder)" >&2; exit 2; }
      PRESET="$2"; shift 2 ;;
    --dest) echo "run.sh: error: use --work DIR (the data go to DIR/data, the benchmark to DIR/benchmark)" >&2; exit 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) PREP+=("$1"); shift ;;
  esac
done
[[ $# -gt 0 ]] && shift  # the "--"

has_source=0
for a in "${PREP[@]+"${PREP[@]}"}"; do
  [[ "$a" == "--local" || "$a" == "--download" ]] && has_source=1
done
if [[ $has_source -eq 0 ]]; then
  if [[ -d "$REPO/../shared/data/multi30k" ]]; then PREP+=(--local "$REPO/../shared/data/multi30k"); else PREP+=(--download); fi
fi

# 2000 joint merges (~2.1k types) rather than prepare.sh's 10000: the direct HMM's lexicon costs
# O(target x source x vocabulary) per sentence, which decides what a CPU can train in minutes
MERGES=2000
CONVERGE=(--patience 8 --dev-bleu)
case "$PRESET" in
  "") PRESET_ARGS=() ;;
  converge) PRESET_ARGS=("${CONVERGE[@]}" --max-update 24000) ;;
  ladder) MERGES=8000
    PRESET_ARGS=("${CONVERGE[@]}" --max-update 12000 --models transformer,dhmm0_fast --embed-dim 256 --ffn-dim 1024
                 --layers 3 --max-tokens 4096 --lr 1e-3 --warmup-updates 1000) ;;
  *) echo "run.sh: error: --preset must be converge or ladder, got '$PRESET'" >&2; exit 2 ;;
esac
"$HERE/prepare.sh" --dest "$WORK/data" --merges "$MERGES" "${PREP[@]}"

exec "$PYTHON" "$REPO/scripts/benchmark_translation.py" \
  --data "$WORK/data" --out "$WORK/benchmark" \
  --directions de-en --models transformer,dhmm0,dhmm0_fast \
  --embed-dim 128 --ffn-dim 512 --layers 2 --heads 4 \
  --max-tokens 2048 --lr 2e-3 --warmup-updates 200 --dropout 0.3 --label-smoothing 0.1 --seed 1 \
  --max-update 2000 --validate-interval-updates 250 \
  --beam 5 --tune-lenpen 0.6,0.8,1.0,1.2,1.4,1.7,2.0 --tune-eos-penalty 0,0.5,1,1.5,2,3 --length-choice halves \
  --generate-args "--max-len-a 1.5 --max-len-b 10" \
  "${PRESET_ARGS[@]+"${PRESET_ARGS[@]}"}" "$@"
