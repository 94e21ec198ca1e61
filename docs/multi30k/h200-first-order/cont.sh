#!/usr/bin/env bash
# usage (on the GPU machine): docs/multi30k/h200-first-order/cont.sh BUDGET_MINUTES DEADLINE_SECONDS
# Continues the H200 first-order runs from their checkpoint_last.pt, carried in runs/gpu3carry (data/ with
# bin/de-en and prepare.json; m30k-gpu3/ with each job's logs, json and checkpoint_last.pt: under the 64 MiB
# carry limit); go.sh sends back the logs, best_slim.pt and the last checkpoints in parts for merge.sh.
set -u
[[ -e runs/m30k-gpu3 ]] && { echo "cont.sh: runs/m30k-gpu3 exists: run this on the GPU machine, with runs/gpu3carry carried" >&2; exit 1; }
[[ -d runs/m30k/data ]] || { mkdir -p runs/m30k && cp -r runs/gpu3carry/data runs/m30k/data; }
cp -r runs/gpu3carry/m30k-gpu3 runs/ || exit 1
bash docs/multi30k/h200-first-order/go.sh "$1" runs/m30k-gpu3 "$2" "1 2" dhmm1 2>&1 | grep -v "upd/s"
