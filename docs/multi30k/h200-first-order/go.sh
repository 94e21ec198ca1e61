#!/usr/bin/env bash
# usage: docs/multi30k/h200-first-order/go.sh BUDGET_MINUTES WORK_OUT DEADLINE_SECONDS [SEEDS] [MODELS]
# Trains the Multi30k recipe size (--train-only) for each seed x model side by side, then packs into $OUT what
# the device returns (8 files, 16 MiB each): logs, json and each best checkpoint without its optimizer state in
# runs.tgz.partNN, and as many checkpoint_last.pt as fit in last.sSEED.MODEL.partNN.  merge.sh joins them here.
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
  [[ -f $j/checkpoints/checkpoint_best.pt ]] || continue
  $PY - "$j" <<'PYEOF'
import sys, torch
p = sys.argv[1] + "/checkpoints/checkpoint_best.pt"
st = torch.load(p, map_location="cpu", weights_only=False)
st.pop("last_optimizer_state", None)
torch.save(st, sys.argv[1] + "/best_slim.pt")
PYEOF
done; done
# The device returns at most 8 files of 16 MiB, 64 MiB together: the logs, json and best_slim.pt of every job go
# in one tarball cut into 15 MB parts; then each job's checkpoint_last.pt (Adam state kept, so that a later
# session continues the run exactly) in parts while they fit.  merge.sh joins them.
O=${OUT:-/tmp/go-out}; mkdir -p "$O"
PART=15000000; MAXF=8; MAXB=$(( 64 * 1024 * 1024 - 1000000 ))
(cd "$W" && tar czf /tmp/go-runs.tgz --exclude='*/checkpoints' seed-* logs) && split -b $PART -d /tmp/go-runs.tgz "$O/runs.tgz.part"
nf=$(ls "$O" | wc -l); nb=$(du -cb "$O"/* | tail -1 | cut -f1)
for s in $SEEDS; do for m in $MODELS; do
  f="$W/seed-$s/de-en/$m/checkpoints/checkpoint_last.pt"; [[ -f $f ]] || continue
  sz=$(stat -c %s "$f"); n=$(( (sz + PART - 1) / PART ))
  if (( nf + n <= MAXF && nb + sz <= MAXB )); then
    split -b $PART -d "$f" "$O/last.s$s.$m.part"; nf=$((nf + n)); nb=$((nb + sz)); sha256sum "$f"
  else
    echo "NOT RETURNED (device limit: $MAXF files, 64 MiB): $f"
  fi
done; done
ls -la "$O"; echo "all done at $(( $(date +%s) - T0 )) s"
