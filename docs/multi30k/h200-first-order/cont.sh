#!/usr/bin/env bash
# usage (on the GPU machine): docs/multi30k/h200-first-order/cont.sh BUDGET_MINUTES DEADLINE_SECONDS
# Continues the H200 first-order runs from their checkpoint_last.pt, carried in runs/gpu3carry (data/ with
# bin/de-en and prepare.json; m30k-gpu3/ with each job's logs, json and checkpoint_last.pt: under the 64 MiB
# carry limit), then sends back the last checkpoints in 8 MB parts (16 MiB per returned file) and the logs
# with best_slim.pt in one tarball.
set -u
[[ -e runs/m30k-gpu3 ]] && { echo "cont.sh: runs/m30k-gpu3 exists: run this on the GPU machine, with runs/gpu3carry carried" >&2; exit 1; }
[[ -d runs/m30k/data ]] || { mkdir -p runs/m30k && cp -r runs/gpu3carry/data runs/m30k/data; }
cp -r runs/gpu3carry/m30k-gpu3 runs/ || exit 1
OUT_REAL=$OUT
OUT=/tmp/junk; mkdir -p $OUT; export OUT
bash docs/multi30k/h200-first-order/go.sh "$1" runs/m30k-gpu3 "$2" "1 2" dhmm1 2>&1 | grep -v "upd/s"
cd runs/m30k-gpu3
for s in 1 2; do split -b 8000000 -d seed-$s/de-en/dhmm1/checkpoints/checkpoint_last.pt $OUT_REAL/last.s$s.part; sha256sum seed-$s/de-en/dhmm1/checkpoints/checkpoint_last.pt; done
tar czf $OUT_REAL/runs.tgz --exclude='*/checkpoints' seed-1 seed-2
ls -la $OUT_REAL
