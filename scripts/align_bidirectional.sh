#!/usr/bin/env bash
# Bidirectional forced alignment with two checkpoints (source->target and target->source), merged with
# this repository's symmetrization (atools semantics) and scored against a gold file.
#   scripts/align_bidirectional.sh --fwd CKPT --rev CKPT --data DATA-BIN [--rev-data DATA-BIN]
#       [--gold GOLD] [--method alignment|posterior|attention] [--heuristic grow-diag] [--subset test]
#       [--src S --tgt T] [--out-dir DIR] [-- more hmm-nmt-align options, e.g. --bpe subword_nmt]
# --fwd translates SRC->TGT, --rev TGT->SRC. One data-bin serves both when it holds both directions
# (fairseq-preprocess output; the reverse model was trained with --source-lang/--target-lang swapped);
# otherwise give the reverse model's data-bin with --rev-data. Both subsets must list the same sentence
# pairs in the same order. GOLD is source-target Pharaoh (sure/possible links); --src/--tgt (word-level
# text) turn on index checks. Writes DIR/{fwd,rev,<heuristic>}.align and prints one AER line per file.
# Heuristics: intersect union grow-diag grow-diag-final grow-diag-final-and (default grow-diag, the paper's).
set -euo pipefail
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "align_bidirectional.sh: error: $*" >&2; exit 2; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
export PYTHONPATH="${ROOT}:${ROOT}/alignment${PYTHONPATH:+:$PYTHONPATH}"

FWD="" REV="" DATA="" REV_DATA="" GOLD="" METHOD="alignment" HEURISTIC="grow-diag" SUBSET="test"
SRC="" TGT="" OUT_DIR="" EXTRA=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    --fwd) FWD="${2:?--fwd needs a value}"; shift 2 ;;
    --rev) REV="${2:?--rev needs a value}"; shift 2 ;;
    --data) DATA="${2:?--data needs a value}"; shift 2 ;;
    --rev-data) REV_DATA="${2:?--rev-data needs a value}"; shift 2 ;;
    --gold) GOLD="${2:?--gold needs a value}"; shift 2 ;;
    --method) METHOD="${2:?--method needs a value}"; shift 2 ;;
    --heuristic) HEURISTIC="${2:?--heuristic needs a value}"; shift 2 ;;
    --subset) SUBSET="${2:?--subset needs a value}"; shift 2 ;;
    --src) SRC="${2:?--src needs a value}"; shift 2 ;;
    --tgt) TGT="${2:?--tgt needs a value}"; shift 2 ;;
    --out-dir) OUT_DIR="${2:?--out-dir needs a value}"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "align_bidirectional.sh: error: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$FWD" ] && [ -n "$REV" ] && [ -n "$DATA" ] || usage
REV_DATA="${REV_DATA:-$DATA}"
case "$HEURISTIC" in
  intersect|union|grow-diag|grow-diag-final|grow-diag-final-and) ;;
  *) die "--heuristic must be one of intersect union grow-diag grow-diag-final grow-diag-final-and, got '$HEURISTIC'" ;;
esac
for f in "$FWD" "$REV"; do [ -f "$f" ] || die "checkpoint not found: $f"; done
for f in "$GOLD" "$SRC" "$TGT"; do [ -z "$f" ] || [ -f "$f" ] || die "file not found: $f"; done
if [ -z "$OUT_DIR" ]; then OUT_DIR="$(mktemp -d "${TMPDIR:-/tmp}/align_bidirectional.XXXXXX")"; fi
mkdir -p "$OUT_DIR"

CHECK=()
[ -n "$SRC" ] && CHECK+=(--src "$SRC")
[ -n "$TGT" ] && CHECK+=(--tgt "$TGT")

# the reverse model's links come out as (its source = our target, its target = our source): --reverse
# writes them as source-target pairs, which is what the symmetrization expects for REV
"$PYTHON" -m hmm_nmt_align.extract --path "$FWD" --data "$DATA" --subset "$SUBSET" --method "$METHOD" \
  ${EXTRA[@]+"${EXTRA[@]}"} -o "$OUT_DIR/fwd.align"
"$PYTHON" -m hmm_nmt_align.extract --path "$REV" --data "$REV_DATA" --subset "$SUBSET" --method "$METHOD" --reverse \
  ${EXTRA[@]+"${EXTRA[@]}"} -o "$OUT_DIR/rev.align"
"$PYTHON" -m hmm_nmt_align symmetrize "$OUT_DIR/fwd.align" "$OUT_DIR/rev.align" --method "$HEURISTIC" \
  ${CHECK[@]+"${CHECK[@]}"} -o "$OUT_DIR/$HEURISTIC.align"

for name in fwd rev "$HEURISTIC"; do
  if [ -n "$GOLD" ]; then
    line="$("$PYTHON" -m hmm_nmt_align aer "$GOLD" "$OUT_DIR/$name.align" ${CHECK[@]+"${CHECK[@]}"})"
  else
    line="links=$(wc -w < "$OUT_DIR/$name.align" | tr -d ' ') sentences=$(wc -l < "$OUT_DIR/$name.align" | tr -d ' ')"
  fi
  printf '%-20s %s\n' "$METHOD.$name" "$line"
done
echo "alignments in $OUT_DIR" >&2
