#!/usr/bin/env bash
# usage (here, after cont.sh ran on the GPU machine): docs/multi30k/h200-first-order/merge.sh FILES_AT
# FILES_AT: the folder the device tool put go.sh's $OUT in (runs.tgz.partNN, last.sS.dhmm1.partNN).  The previous
# runs/m30k-gpu3 moves to runs/m30k-gpu3-UPDATES (UPDATES: seed 1's count then); the returned jobs take its
# place, with checkpoint_last.pt rejoined from its parts and checkpoint_best.pt from best_slim.pt, ready for
# decode.sh (with cont.sh's --budget-minutes) and stage.sh.
set -eu
src=$1
# check every part first, so that a partial return leaves runs/m30k-gpu3 as it was
for f in runs.tgz last.s1.dhmm1 last.s2.dhmm1; do
  ls "$src/$f".part* >/dev/null 2>&1 || { echo "merge.sh: no $src/$f.partNN (go.sh prints NOT RETURNED for what did not fit)" >&2; exit 1; }
done
old=$(python3 -c "import json; print(json.load(open('runs/m30k-gpu3/seed-1/de-en/dhmm1/train_done.json'))['updates'])")
mv runs/m30k-gpu3 "runs/m30k-gpu3-$old"
mkdir -p runs/m30k-gpu3 && cat "$src"/runs.tgz.part* | tar xz -C runs/m30k-gpu3
for d in runs/m30k-gpu3/seed-*/de-en/dhmm1; do
  s=${d#runs/m30k-gpu3/seed-}; s=${s%%/*}
  mkdir -p "$d/checkpoints"
  cat "$src"/last.s"$s".dhmm1.part* > "$d/checkpoints/checkpoint_last.pt"
  cp "$d/best_slim.pt" "$d/checkpoints/checkpoint_best.pt"
  python3 -c "import json; d=json.load(open('$d/train_done.json')); print('$d', d['updates'], 'updates,', d['stop_reason'])"
done
