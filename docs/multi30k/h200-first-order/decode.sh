#!/usr/bin/env bash
# decode the H200-trained first-order models on this CPU: go.sh's command without --train-only (--budget-minutes 8.0 for the first run, 10.0 after cont.sh)
.venv/bin/python scripts/benchmark_translation.py --directions de-en --heads 4 --dropout 0.3 --label-smoothing 0.1 \
 --validate-interval-updates 250 --beam 5 --tune-lenpen 0.6,0.8,1.0,1.2,1.4,1.7,2.0 --tune-eos-penalty 0,0.5,1,1.5,2,3 \
 --length-choice halves --patience 8 --threads 1 --data runs/m30k/data --embed-dim 128 --ffn-dim 512 \
 --layers 2 --max-tokens 2048 --lr 2e-3 --warmup-updates 200 --max-update 24000 --budget-minutes 10.0 \
 --generate-args "--max-len-a 1.5 --max-len-b 10" --out runs/m30k-gpu3 --seeds 1,2 --models dhmm1
