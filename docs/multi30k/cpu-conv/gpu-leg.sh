#!/usr/bin/env bash
# A leg of the CPU convergence runs trained on a lent GPU, then continued on the CPU.
#   here:           gpu-leg.sh stage JOBS              -> runs/gpuleg (job dirs with checkpoint_last.pt, data)
#   on the device:  gpu-leg.sh train JOBS DEADLINE_S   (carry .whl and runs/gpuleg; $OUT gets the parts)
#   here again:     gpu-leg.sh merge PARTS_DIR         -> the jobs in runs/m30k-cpuconv continue from the GPU's state
# A call returns at most 64 MiB (two d=128 jobs, about 26 MB each): `train` packs the jobs that fit and prints the
# `gpu-leg.sh pack "JOBS"` call that fetches the others from the still-warm machine; merge each call's parts.
# JOBS is "SLOT:SEED ..." (e.g. "dhmm1_fast:1 dhmm1_fast:2 hnmc:2"), or the older two words "SLOT" "SEEDS".
# A job with no run yet starts on the device from update 0.
# `train` resumes each job with docs/multi30k/cpu-conv/go.sh (the same command and flags as on the CPU, so the
# benchmark accepts the run as its own) and stops it at the first checkpoint written after DEADLINE_S seconds,
# so that no checkpoint is cut mid-write. It returns, in 15 MB parts (a device call returns 8 files of 16 MiB),
# a tar of each job's logs, JSON, checkpoint_last.pt (Adam state kept: the run continues exactly) and
# checkpoint_best.pt without its optimizer state.
set -u
mode=${1:?stage, train, pack or merge}
JOBS=(); shift
if [[ $mode != merge ]]; then
  if [[ ${1:?JOBS} == *:* ]]; then read -ra JOBS <<< "$1"; shift
  else for s in ${2:?SEEDS}; do JOBS+=("$1:$s"); done; shift 2; fi
fi
# pack JOB...: tar whole jobs (and their device logs) into $OUT in 15 MB parts, as many jobs as the device returns
# (64 MiB a call); the rest are named with the call that fetches them from the still-warm machine.
pack() {
  local O=${OUT:-/tmp/gpuleg-out} cap=${GPULEG_CAP:-66000000} used=0 sz job SLOT s inc=() left=()
  mkdir -p "$O"
  for job in "$@"; do
    SLOT=${job%%:*}; s=${job##*:}
    sz=$(du -sb "runs/m30k-cpuconv/seed-$s/de-en/$SLOT" 2>/dev/null | cut -f1); sz=$(( ${sz:-0} + 1000000 ))
    if (( used + sz <= cap )); then used=$(( used + sz )); inc+=("$job"); else left+=("$job"); fi
  done
  local paths=()
  for job in "${inc[@]}"; do
    SLOT=${job%%:*}; s=${job##*:}
    [[ -d runs/m30k-cpuconv/seed-$s/de-en/$SLOT ]] && paths+=("m30k-cpuconv/seed-$s/de-en/$SLOT")
    [[ -f runs/m30k-cpuconv/$SLOT.s$s.gpu.log ]] && paths+=("m30k-cpuconv/$SLOT.s$s.gpu.log")
  done
  (( ${#paths[@]} )) && tar -C runs -cf - "${paths[@]}" | split -b 15000000 -d - "$O/gpuleg.tar.part"
  ls -la "$O"; echo "packed: ${inc[*]:-none}"
  (( ${#left[@]} )) && echo "NOT PACKED (over the 64 MiB a call returns): run next, on the warm machine: bash docs/multi30k/cpu-conv/gpu-leg.sh pack \"${left[*]}\""
  return 0
}
case "$mode" in
stage)
  rm -rf runs/gpuleg && mkdir -p runs/gpuleg/data/bin
  for job in "${JOBS[@]}"; do
    SLOT=${job%%:*}; s=${job##*:}
    j=runs/m30k-cpuconv/seed-$s/de-en/$SLOT; d=runs/gpuleg/m30k-cpuconv/seed-$s/de-en/$SLOT
    mkdir -p "runs/gpuleg/m30k-cpuconv/seed-$s"
    [[ -f runs/m30k-cpuconv/seed-$s/benchmark.json ]] && cp -p "runs/m30k-cpuconv/seed-$s/benchmark.json" "runs/gpuleg/m30k-cpuconv/seed-$s/"
    [[ -d $j ]] || { echo "$SLOT seed $s: no run yet, starts from update 0 on the device"; continue; }
    mkdir -p "$d/checkpoints"
    (cd "$j" && find . -maxdepth 1 -type f -print0 | xargs -0 cp -p -t "$OLDPWD/$d/")
    cp -p "$j/checkpoints/checkpoint_last.pt" "$d/checkpoints/"
  done
  cp -rp runs/m30k/data/bin/de-en runs/gpuleg/data/bin/ && cp -p runs/m30k/data/prepare.json runs/gpuleg/data/
  du -sh runs/gpuleg .whl 2>/dev/null ;;
train)
  DL=${1:?DEADLINE_S}; T0=$(date +%s)
  if [[ -d .whl ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site:$PWD || exit 1
  fi
  export PY=${PY:-python3} OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1 EXTRA=--train-only
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; lscpu | grep "Model name"
  [[ -e runs/m30k-cpuconv ]] && { echo "gpu-leg.sh: runs/m30k-cpuconv exists; train runs on the device" >&2; exit 1; }
  mkdir -p runs/m30k && cp -r runs/gpuleg/data runs/m30k/data && cp -rp runs/gpuleg/m30k-cpuconv runs/ || exit 1
  echo "install and copy done at $(( $(date +%s) - T0 )) s"
  declare -A pid t_start
  for job in "${JOBS[@]}"; do
    SLOT=${job%%:*}; s=${job##*:}
    t_start[$job]=$(stat -c %Y "runs/m30k-cpuconv/seed-$s/de-en/$SLOT/checkpoints/checkpoint_last.pt" 2>/dev/null || echo 0)
    setsid bash docs/multi30k/cpu-conv/go.sh "$SLOT" 24000 "$s" > "runs/m30k-cpuconv/$SLOT.s$s.gpu.log" 2>&1 &
    pid[$job]=$!
  done
  n=0
  while :; do
    el=$(( $(date +%s) - T0 )); alive=0
    for job in "${JOBS[@]}"; do
      SLOT=${job%%:*}; s=${job##*:}
      kill -0 "${pid[$job]}" 2>/dev/null || continue
      alive=$((alive + 1)); (( el < DL )) && continue
      f=runs/m30k-cpuconv/seed-$s/de-en/$SLOT/checkpoints/checkpoint_last.pt
      mt=$(stat -c %Y "$f" 2>/dev/null || echo 0); age=$(( $(date +%s) - mt ))
      # just after a save (checkpoint_last.pt is written last), or DEADLINE+60 s without one
      if (( (mt > t_start[$job] && age >= 2 && age <= 15) || el > DL + 60 )); then
        echo "stopping $job at ${el}s (checkpoint_last.pt ${age}s old)"; kill -TERM -- "-${pid[$job]}"
      fi
    done
    if (( n % 10 == 0 || alive == 0 )); then
      echo "=== ${el}s alive=$alive $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"
      for job in "${JOBS[@]}"; do SLOT=${job%%:*}; s=${job##*:}
        echo "$job: $(tail -c 400 "runs/m30k-cpuconv/$SLOT.s$s.gpu.log" | tr '\r' '\n' | grep -v '^$' | tail -1)"; done
    fi
    (( alive == 0 )) && break; n=$((n + 1)); sleep 2
  done
  sleep 2; echo "training over at $(( $(date +%s) - T0 )) s"
  $PY - runs/m30k-cpuconv "${JOBS[@]}" <<'PYEOF' || exit 1
import glob, os, re, sys, torch
root, jobs = sys.argv[1], sys.argv[2:]
for job in jobs:
    slot, s = job.split(":")
    ck = f"{root}/seed-{s}/de-en/{slot}/checkpoints"
    # the newest checkpoint that loads becomes checkpoint_last.pt (a kill mid-copy leaves a torn one)
    cands = sorted(glob.glob(ck + "/checkpoint_last.pt") + glob.glob(ck + "/checkpoint_*_*.pt"), key=os.path.getmtime, reverse=True)
    for c in cands:
        try:
            st = torch.load(c, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001
            print(f"{c}: unreadable ({e}), trying an older one"); continue
        if c != ck + "/checkpoint_last.pt":
            os.replace(c, ck + "/checkpoint_last.pt")
        print(f"{job}: checkpoint_last.pt at update {st['optimizer_history'][-1]['num_updates']} ({os.path.basename(c)})")
        break
    if os.path.exists(ck + "/checkpoint_best.pt"):  # none when no validation improved on the leg
        b = torch.load(ck + "/checkpoint_best.pt", map_location="cpu", weights_only=False)
        b["last_optimizer_state"] = None
        torch.save(b, ck + "/checkpoint_best.pt")
    for c in glob.glob(ck + "/checkpoint_*_*.pt") + glob.glob(ck + "/checkpoint[0-9]*.pt"):
        os.remove(c)
PYEOF
  pack "${JOBS[@]}"; echo "all done at $(( $(date +%s) - T0 )) s" ;;
pack)
  pack "${JOBS[@]}" ;;
merge)
  P=${1:?PARTS_DIR}; T=$(mktemp -d runs/gpuleg-merge.XXXX)
  cat "$P"/gpuleg.tar.part* | tar -C "$T" -xf - || exit 1
  for j in "$T"/m30k-cpuconv/seed-*/de-en/*/; do
    rel=${j#"$T"/}; dst=runs/${rel%/}
    bak=runs/gpuleg-before/$(date +%s)/${rel%/}  # the CPU state the leg started from, kept aside
    [[ -d $dst ]] && mkdir -p "$(dirname "$bak")" && mv "$dst" "$bak"
    mkdir -p "$(dirname "$dst")" && cp -rp "$j" "$dst" && echo "gpu-leg.sh: $dst now holds the GPU leg's state"
    [[ -f $dst/checkpoints/checkpoint_best.pt || ! -f $bak/checkpoints/checkpoint_best.pt ]] \
      || cp -p "$bak/checkpoints/checkpoint_best.pt" "$dst/checkpoints/"
  done
  # one log per job across legs: a later leg's log goes after the earlier ones
  for l in "$T"/m30k-cpuconv/*.gpu.log; do cat "$l" >> "runs/m30k-cpuconv/$(basename "$l")"; done
  rm -rf "$T" ;;
*) echo "gpu-leg.sh: unknown mode '$mode' (stage, train, pack or merge)" >&2; exit 2 ;;
esac
