#!/bin/bash
# babysit.sh carry RUN CARRY [EVERY_S] | babysit.sh pause RUN
# The two helpers a session needs around the long convergence runs (their commands were lost with /tmp):
#   carry: every EVERY_S seconds (default 900), `carry.sh save RUN CARRY`, but only at a moment when every
#          running job's checkpoint_last.pt is between 5 and 150 s old: fairseq copies a new checkpoint to
#          checkpoint_last.pt non-atomically, so a copy taken mid-write would not resume. Only running jobs
#          count (found by their processes): a finished job's older checkpoint held the carry back for
#          30 minutes. Tested: tests/test_babysit.py.
#   pause: stop every benchmark writing under RUN right after its next checkpoint (age 5-100 s), with the
#          SIGTERM the benchmark turns into "interrupted; run the same command again to resume", so the
#          least work is redone on resume.  Run it before the test suite or the end of a session.
set -euo pipefail
mode=${1:?carry or pause}; run=${2:?}
here=$(dirname "$0")

running_pids() {  # benchmark processes whose --out lies under $run
  pgrep -f "scripts/benchmark_translation.py.*--out $run" || true
}

job_last() {  # job_last PID: the checkpoint_last.pt of that benchmark's job (its --out and --models)
  local out model
  out=$(tr '\0' ' ' < "/proc/$1/cmdline" | sed -n 's/.*--out \([^ ]*\).*/\1/p')
  model=$(tr '\0' ' ' < "/proc/$1/cmdline" | sed -n 's/.*--models \([^ ]*\).*/\1/p')
  find "$out" -path "*/$model/checkpoints/checkpoint_last.pt" 2>/dev/null | head -1
}

fresh() {  # every running job's checkpoint_last.pt is $1..$2 s old (a finished job's old one does not count)
  local lo=$1 hi=$2 now age f pid
  now=$(date +%s)
  for f in $(for pid in $(running_pids); do job_last "$pid"; done); do
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
      last=$(job_last "$pid"); model=${last%/checkpoints/*}; model=${model##*/}
      start=$(date +%s)
      while kill -0 "$pid" 2>/dev/null; do
        if [[ -n "$last" && -f "$last" ]]; then
          t=$(stat -c %Y "$last"); age=$(( $(date +%s) - t ))
          if (( t > start && age >= 5 && age <= 100 )); then
            kill -TERM "$pid"; echo "babysit: paused $model ($last) after its checkpoint"; break
          fi
        fi
        sleep 2
      done ) &
    done
    wait
    while [[ -n "$(running_pids)" ]]; do sleep 2; done ;;
  *) echo "babysit.sh: unknown mode '$mode' (carry or pause)" >&2; exit 2 ;;
esac
