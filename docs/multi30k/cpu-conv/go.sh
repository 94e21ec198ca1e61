#!/bin/bash
# usage: docs/multi30k/cpu-conv/go.sh MODELS BOUND SEED
# The issue-26 convergence command at the recipe size (docs/multi30k.md), one seed: trains (resuming from
# runs/m30k-cpuconv/seed-SEED if it holds the run), then decodes and scores. PY picks the interpreter.
M=$1; BOUND=$2; SEED=$3
cd "$(dirname "$0")/../../.." || exit 1
exec "${PY:-.venv/bin/python}" scripts/benchmark_translation.py --data runs/m30k/data --out runs/m30k-cpuconv/seed-$SEED \
    --models $M --directions de-en --embed-dim 128 --ffn-dim 512 --layers 2 --heads 4 --max-tokens 2048 --lr 2e-3 \
    --warmup-updates 200 --dropout 0.3 --label-smoothing 0.1 --seed $SEED --max-update $BOUND \
    --validate-interval-updates 250 --patience 8 --dev-bleu --threads 1 --beam 5 \
    --tune-lenpen 0.6,0.8,1.0,1.2,1.4,1.7,2.0 --tune-eos-penalty 0,0.5,1,1.5,2,3 --length-choice halves \
    --generate-args "--max-len-a 1.5 --max-len-b 10" ${EXTRA:-}
