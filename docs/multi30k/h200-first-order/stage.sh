#!/usr/bin/env bash
# usage (here, before a GPU call): docs/multi30k/h200-first-order/stage.sh
# Builds runs/gpu3carry for cont.sh from runs/m30k-gpu3 (each job's logs, json and checkpoint_last.pt; the
# decodes stay here) and runs/m30k/data (bin/de-en and prepare.json), and prints its size: with .whl it must
# stay under the 64 MiB a call carries.
set -eu
rm -rf runs/gpu3carry
for j in runs/m30k-gpu3/seed-*/de-en/*/; do
  rel=${j#runs/}; dst=runs/gpu3carry/$rel
  mkdir -p "$dst/checkpoints"
  cp "$j"/train.log "$j"/train_command.json "$j"/train_stats.*.json "$dst/"
  [[ -f $j/train_done.json ]] && cp "$j/train_done.json" "$dst/"
  cp "$j/checkpoints/checkpoint_last.pt" "$dst/checkpoints/"
done
for s in runs/m30k-gpu3/seed-*/; do cp "$s/benchmark.json" "runs/gpu3carry/${s#runs/}"; done
mkdir -p runs/gpu3carry/data/bin
cp -r runs/m30k/data/bin/de-en runs/gpu3carry/data/bin/ && cp runs/m30k/data/prepare.json runs/gpu3carry/data/
du -sh runs/gpu3carry .whl
