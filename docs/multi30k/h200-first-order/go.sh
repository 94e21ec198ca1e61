#!/usr/bin/env bash
# usage: docs/multi30k/h200-first-order/go.sh BUDGET_MINUTES WORK_OUT DEADLINE_SECONDS [SEEDS] [MODELS]
# Trains the Multi30k recipe size (--train-only) for each seed x model side by side, then packs one tarball per
# model (the best checkpoint without its optimizer state, logs and json) into $OUT.
set -u
T0=$(date +%s); BUDGET=$1; W=$2; DL=$3; SEEDS=${4:-"1 2"}; MODELS=${5:-"transformer dhmm0 dhmm1"}
if [[ -d .whl && -z ${SKIP_INSTALL:-} ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
PY=${PY:-python3}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; lscpu | grep "Model name"; pwd
echo "install done at $(( $(date +%s) - T0 )) s"
mkdir -p "$W/logs"
MT="$PY scripts/benchmark_translation.py --directions de-en --heads 4 --dropout 0.3 --label-smoothing 0.1
 --validate-interval-updates 250 --beam 5 --tune-lenpen 0.6,0.8,1.0,1.2,1.4,1.7,2.0 --tune-eos-penalty 0,0.5,1,1.5,2,3
 --length-choice halves --patience 8 --threads 1 --no-plots --data runs/m30k/data --embed-dim 128 --ffn-dim 512
 --layers 2 --max-tokens 2048 --lr 2e-3 --warmup-updates 200 --max-update 24000 --budget-minutes $BUDGET --train-only"
pids=()
for s in $SEEDS; do for m in $MODELS; do
  $MT --generate-args "--max-len-a 1.5 --max-len-b 10" --out "$W/seed-$s" --seed "$s" --models "$m" \
    > "$W/logs/$m.s$s.log" 2>&1 &
  pids+=($!)
done; done
while :; do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive+1)); done
  el=$(( $(date +%s) - T0 ))
  echo "=== ${el}s alive=$alive $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"
  for f in "$W"/seed-*/de-en/*/train.log; do
    [[ -f $f ]] && echo "$f: $(grep '"train_inner"\|train_inner' "$f" | tail -1 | grep -oE '"num_updates": "[0-9]+"') $(grep '| valid |' "$f" | tail -1 | grep -oE '"valid_(nll_loss|num_updates|best_loss)": "[0-9.]+"' | tr '\n' ' ')"
  done
  (( alive == 0 )) && break
  (( el > DL )) && { echo "DEADLINE: killing"; kill "${pids[@]}"; sleep 3; break; }
  sleep 10
done
echo "training over at $(( $(date +%s) - T0 )) s"
for s in $SEEDS; do for m in $MODELS; do
  j="$W/seed-$s/de-en/$m"; [[ -f $j/train_done.json ]] || echo "NOT DONE: $j"
  $PY - "$j" <<'PYEOF'
import sys, torch
p = sys.argv[1] + "/checkpoints/checkpoint_best.pt"
st = torch.load(p, map_location="cpu", weights_only=False)
st.pop("last_optimizer_state", None)
torch.save(st, sys.argv[1] + "/best_slim.pt")
PYEOF
  # checkpoint_last.pt keeps its Adam state so that a later session (or this CPU) continues the run exactly
  tar czf "${OUT:-/tmp}/$m.s$s.tgz" --exclude='*/checkpoints/checkpoint[0-9]*' --exclude='*/checkpoints/checkpoint_best.pt' "$j" "$W/seed-$s/benchmark.json"
done; done
tar czf "${OUT:-/tmp}/logs.tgz" "$W/logs"
ls -la "${OUT:-/tmp}"; echo "all done at $(( $(date +%s) - T0 )) s"
