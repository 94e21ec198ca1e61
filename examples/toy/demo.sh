#!/usr/bin/env bash
# Quick start on the embedded toy corpus (no download):
#   generate -> fairseq-preprocess -> fairseq-train transformer_dhmm (about two minutes of CPU)
#   -> fairseq-generate --print-alignment -> sacrebleu BLEU/TER -> a few aligned examples.
# Usage: bash examples/toy/demo.sh   (env: DEMO_DIR, DEMO_UPDATES, DEMO_ORDER=0|1, DEMO_THREADS)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${DEMO_DIR:-$ROOT/demo}"
UPDATES="${DEMO_UPDATES:-400}"
ORDER="${DEMO_ORDER:-0}"
PY="${PYTHON:-python}"
export OMP_NUM_THREADS="${DEMO_THREADS:-$(nproc)}"
export PYTHONPATH="$ROOT:$ROOT/alignment${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"

echo "== 1/5 toy corpus -> $OUT/raw"
"$PY" examples/toy/generate.py --out "$OUT/raw"

echo "== 2/5 fairseq-preprocess -> $OUT/data-bin"
rm -rf "$OUT/data-bin"
fairseq-preprocess --source-lang src --target-lang tgt --trainpref "$OUT/raw/train" \
  --validpref "$OUT/raw/valid" --testpref "$OUT/raw/test" --destdir "$OUT/data-bin" \
  --joined-dictionary --workers 1 2>&1 | grep -E "Wrote|Error" || true

echo "== 3/5 fairseq-train transformer_dhmm (order $ORDER, $UPDATES updates)"
rm -rf "$OUT/checkpoints"
# --lexicon softmax: the model of the toy tables in docs/alignment.md and docs/speed.md (the default is separable)
fairseq-train "$OUT/data-bin" --user-dir "$ROOT/hmm_nmt" --arch transformer_dhmm --alignment-order "$ORDER" \
  --lexicon softmax \
  --encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 64 --decoder-embed-dim 64 \
  --encoder-ffn-embed-dim 256 --decoder-ffn-embed-dim 256 --encoder-attention-heads 4 \
  --decoder-attention-heads 4 --share-all-embeddings --dropout 0.1 \
  --criterion dhmm_label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --adam-betas '(0.9,0.98)' --lr 0.005 --lr-scheduler inverse_sqrt --warmup-updates 100 \
  --max-tokens 1000 --max-update "$UPDATES" --save-dir "$OUT/checkpoints" --no-epoch-checkpoints \
  --seed 1 --num-workers 0 --log-format simple --log-interval 100 2>&1 \
  | grep --line-buffered -E "train_inner|valid on|done training|Error" \
  | sed -u -E "s/.*\| (epoch|valid on|done)/\1/"

echo "== 4/5 fairseq-generate (beam 5) on the test set"
fairseq-generate "$OUT/data-bin" --user-dir "$ROOT/hmm_nmt" --path "$OUT/checkpoints/checkpoint_last.pt" \
  --beam 5 --batch-size 64 --required-batch-size-multiple 1 --print-alignment > "$OUT/generate.out" 2> "$OUT/generate.log"
grep '^H-' "$OUT/generate.out" | sort -t- -k2 -n | cut -f3 > "$OUT/test.hyp"
grep '^T-' "$OUT/generate.out" | sort -t- -k2 -n | cut -f2 > "$OUT/test.ref"

echo "== 5/5 scores (sacrebleu, tokenized toy text: -tok none)"
BLEU=$(sacrebleu "$OUT/test.ref" -i "$OUT/test.hyp" -m bleu -tok none -b -w 2)
TER=$(sacrebleu "$OUT/test.ref" -i "$OUT/test.hyp" -m ter -b -w 2)
echo "BLEU = $BLEU   TER = $TER   ($(wc -l < "$OUT/test.hyp") test sentences)"
"$PY" examples/toy/show_examples.py "$OUT/generate.out" --n 3
if [ -f examples/toy/aer.sh ]; then bash examples/toy/aer.sh "$OUT"; fi
