#!/bin/bash
# babysit.sh carry RUN CARRY [EVERY_S] | babysit.sh pause RUN
# The two helpers a session needs around the long convergence runs (their commands were lost with /tmp):
#   carry: every EVERY_S seconds (default 900), `carry.sh save RUN CARRY`, but only at a moment when every
#          running job's checkpoint_last.pt is between 5 and 150 s old: fairseq copies a new checkpoint to
#          checkpoint_last.pt non-atomically, so a copy taken mid-write would not resume.
#   pause: stop every benchmark writing under RUN right after its next checkpoint (age 5-100 s), with the
#          SIGTERM the benchmark turns into "interrupted; run the same command again to resume", so the
#          least work is redone on resume.  Run it before the test suite or the end of a session.
set -euo pipefail
mode=${1:?carry or pause}; run=${2:?}
here=$(dirname "$0")

running_pids() {  # benchmark processes whose --out lies under $run
  pgrep -f "scripts/benchmark_translation.py.*--out $run" || true
}

fresh() {  # every checkpoint_last.pt of a running job is $1..$2 s old
  local lo=$1 hi=$2 now age f
  now=$(date +%s)
  for f in $(find "$run" -path '*/checkpoints/checkpoint_last.pt' -mmin -30); do
    age=$(( now - $(stat -c %Y "$f") ))
    (( age >= lo && age <= hi )) || return 1
  done
}

case "$mode" in
  carry)
    dst=${3:?CARRY}; every=${4:-900}
    while true; do
      sleep "$every"
      for _ in $(seq 600); do fresh 5 150 && break; sleep 2; done
      bash "$here/carry.sh" save "$run" "$dst" && echo "babysit: carried at $(date +%T)"
    done ;;
  pause)
    for pid in $(running_pids); do (  # one watcher per job: each stops right after its own next checkpoint
      out=$(tr '\0' ' ' < "/proc/$pid/cmdline" | sed -n 's/.*--out \([^ ]*\).*/\1/p')
      model=$(tr '\0' ' ' < "/proc/$pid/cmdline" | sed -n 's/.*--models \([^ ]*\).*/\1/p')
      last=$(find "$out" -path "*/$model/checkpoints/checkpoint_last.pt" | head -1)
      start=$(date +%s)
      while kill -0 "$pid" 2>/dev/null; do
        if [[ -n "$last" && -f "$last" ]]; then
          t=$(stat -c %Y "$last"); age=$(( $(date +%s) - t ))
          if (( t > start && age >= 5 && age <= 100 )); then
            kill -TERM "$pid"; echo "babysit: paused $model ($out) after its checkpoint"; break
          fi
        fi
        sleep 2
      done ) &
    done
    wait
    while [[ -n "$(running_pids)" ]]; do sleep 2; done ;;
  *) echo "babysit.sh: unknown mode '$mode' (carry or pause)" >&2; exit 2 ;;
esac
