#!/bin/bash
# usage: docs/multi30k/cpu-conv/ladder.sh MODELS BOUND SEED
# Issue 26's larger size (the ladder): d=256, 3+3 layers, 8k BPE, 4,096-token batches, lr 1e-3 with 1,000
# warm-up updates, otherwise go.sh's protocol (patience 8, dev BLEU, halves length choice). Needs the 8k data:
#   PATH=$PWD/.venv/bin:$PATH bash examples/multi30k/prepare.sh --dest runs/m30k8k/data --merges 8000 \
#       --local ../shared/data/multi30k
# One model per process and core (OMP_NUM_THREADS=1): ladder.sh transformer 16000 1 & ladder.sh dhmm0_fast 16000 1
# Trains (resuming from runs/m30k-ladder/seed-SEED/MODELS if it holds the run), then decodes and scores. Each
# process gets its own --out: two benchmarks sharing one would write its results.json in turn.
M=$1; BOUND=$2; SEED=$3
cd "$(dirname "$0")/../../.." || exit 1
exec "${PY:-.venv/bin/python}" scripts/benchmark_translation.py --data runs/m30k8k/data \
    --out "runs/m30k-ladder/seed-$SEED/${M// /+}" \
    --models $M --directions de-en --embed-dim 256 --ffn-dim 1024 --layers 3 --heads 4 --max-tokens 4096 --lr 1e-3 \
    --warmup-updates 1000 --dropout 0.3 --label-smoothing 0.1 --seed $SEED --max-update $BOUND \
    --validate-interval-updates 250 --patience 8 --dev-bleu --threads 1 --beam 5 \
    --tune-lenpen 0.6,0.8,1.0,1.2,1.4,1.7,2.0 --tune-eos-penalty 0,0.5,1,1.5,2,3 --length-choice halves \
    --generate-args "--max-len-a 1.5 --max-len-b 10" ${EXTRA:-}
