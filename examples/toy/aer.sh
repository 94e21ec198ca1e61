#!/usr/bin/env bash
# AER of the toy demo's model against the toy generator's gold alignments (examples/toy/generate.py):
# forced alignment of the test references with hmm-nmt-align (methods alignment and posterior), scored
# with hmm-nmt-aer. Runs from a checkout without installation (python -m ...).
# Usage: bash examples/toy/aer.sh DEMO_DIR
#   DEMO_DIR/raw/test.{src,tgt,align}, DEMO_DIR/data-bin, DEMO_DIR/checkpoints/checkpoint_last.pt (demo.sh layout)
# Prints "AER (alignment) AER=.. P=.. R=.. F=.. sentences=N" and the same for posterior; writes
# DEMO_DIR/test.<method>.align. Env: PYTHON (interpreter), AER_CKPT (another checkpoint).
set -euo pipefail
if [ "$#" -ne 1 ]; then sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; fi
DIR="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python}"
export PYTHONPATH="$ROOT:$ROOT/alignment${PYTHONPATH:+:$PYTHONPATH}"
CKPT="${AER_CKPT:-$DIR/checkpoints/checkpoint_last.pt}"
for f in "$DIR/raw/test.src" "$DIR/raw/test.tgt" "$DIR/raw/test.align" "$CKPT"; do
  [ -f "$f" ] || { echo "aer.sh: error: $f not found (run examples/toy/demo.sh first)" >&2; exit 2; }
done
[ -d "$DIR/data-bin" ] || { echo "aer.sh: error: $DIR/data-bin not found" >&2; exit 2; }
for method in alignment posterior; do
  out="$DIR/test.$method.align"
  if ! "$PY" -m hmm_nmt_align.extract --path "$CKPT" --data "$DIR/data-bin" --subset test --method "$method" \
      --no-progress -o "$out" 2> "$DIR/align.$method.log"; then
    tail -n 5 "$DIR/align.$method.log" >&2
    exit 1
  fi
  line="$("$PY" -m hmm_nmt_align aer "$DIR/raw/test.align" "$out" --src "$DIR/raw/test.src" --tgt "$DIR/raw/test.tgt")"
  echo "AER ($method) $line"
done
