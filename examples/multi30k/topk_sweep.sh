#!/usr/bin/env bash
# --lexicon-topk sweep on Multi30k: train and decode transformer_dhmm of both alignment orders with
# K in {1, 2, 4, 8} and exact, plus zero order K=4 with the bf16 lexicon and a transformer reference, all
# with the same sizes, data, seed and number of updates; BLEU/TER/chrF/speed land in <out>/topk.md.
#
#   examples/multi30k/topk_sweep.sh --data DIR --out DIR [-j N] [--configs "o0-k4 o1-exact ..."] \
#       [-- benchmark_translation.py options]
#
# --data is a directory made by examples/multi30k/prepare.sh. Each configuration is one
# scripts/benchmark_translation.py run in <out>/<config> (resumable: the same command skips what is done);
# -j N runs N of them at once (each with --threads 1 unless overridden). The defaults below are the CPU
# sweep of docs/speed.md (run there on the 2000-merge data of examples/multi30k/run.sh, -j 2); options after
# "--" override them (the last value wins), e.g. on a GPU:
#   examples/multi30k/topk_sweep.sh --data runs/multi30k/data --out runs/topk -- --max-update 20000 --fp16
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}

DATA="" OUT="" JOBS=1
# the slow exact models first, so that -j 2 finishes about together
CONFIGS="o0-exact o1-exact transformer o0-k1 o0-k2 o0-k4 o0-k8 o0-k4-bf16 o1-k1 o1-k2 o1-k4 o1-k8"
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --data) DATA="${2:?--data needs a value}"; shift 2 ;;
    --out) OUT="${2:?--out needs a value}"; shift 2 ;;
    -j) JOBS="${2:?-j needs a value}"; shift 2 ;;
    --configs) CONFIGS="${2:?--configs needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "topk_sweep.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] && shift
[[ -n "$DATA" && -n "$OUT" ]] || { echo "topk_sweep.sh: error: --data and --out are required" >&2; exit 2; }
[[ -f "$DATA/prepare.json" ]] || { echo "topk_sweep.sh: error: --data $DATA: no prepare.json (run examples/multi30k/prepare.sh)" >&2; exit 2; }
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "topk_sweep.sh: error: -j must be a positive integer" >&2; exit 2; }

# name -> benchmark_translation.py slot and extra fairseq-train flags
slot_of() {
  local name=$1 order k dtype=""
  [[ "$name" == transformer ]] && { echo "transformer|"; return; }
  [[ "$name" =~ ^o([01])-(exact|k([0-9]+))(-bf16)?(-w([0-9]+))?$ ]] || {
    echo "topk_sweep.sh: error: bad config '$name' (transformer or o{0,1}-{exact,kN}[-bf16][-wN])" >&2; return 2; }
  order=${BASH_REMATCH[1]} k=${BASH_REMATCH[3]:-0}
  [[ -n "${BASH_REMATCH[4]}" ]] && dtype=" --lexicon-dtype bf16"
  [[ -n "${BASH_REMATCH[6]}" ]] && dtype="$dtype --lexicon-topk-warmup ${BASH_REMATCH[6]}"
  echo "dhmm$order|--lexicon-topk $k$dtype"
}
for c in $CONFIGS; do slot_of "$c" >/dev/null; done

run_one() {
  local name=$1; shift
  local spec slot flags
  spec=$(slot_of "$name"); slot=${spec%%|*}; flags=${spec#*|}
  local extra=()
  [[ -n "$flags" ]] && extra=(--slot-args "$slot=$flags")
  "$PYTHON" "$REPO/scripts/benchmark_translation.py" --data "$DATA" --out "$OUT/$name" --models "$slot" \
    --directions de-en --embed-dim 256 --ffn-dim 1024 --layers 3 --heads 4 \
    --max-tokens 1024 --lr 1e-3 --warmup-updates 100 --dropout 0.1 --label-smoothing 0.1 --seed 1 \
    --max-update 500 --beam 5 --generate-args "--max-len-a 1.5 --max-len-b 10" --threads 1 --no-plots \
    "${extra[@]+"${extra[@]}"}" "$@" > "$OUT/$name.log" 2>&1 \
    || { echo "topk_sweep.sh: $name failed, see $OUT/$name.log" >&2; return 1; }
  echo "topk_sweep.sh: $name done" >&2
}

mkdir -p "$OUT"
pids=() status=0
for c in $CONFIGS; do
  while [[ $(jobs -rp | wc -l) -ge $JOBS ]]; do wait -n || status=1; done
  echo "topk_sweep.sh: $c -> $OUT/$c" >&2
  run_one "$c" "$@" &
done
while [[ $(jobs -rp | wc -l) -gt 0 ]]; do wait -n || status=1; done
"$PYTHON" "$REPO/scripts/topk_table.py" "$OUT" $CONFIGS
exit $status
