#!/usr/bin/env bash
# Score one pair of direct-HMM checkpoints of the Hansards recipe: AER on the 447 test pairs with every
# variant chosen on the 37 trial pairs, and BLEU/chrF of both directions on the test pairs (beside the AER).
#
#   examples/hansards/evaluate.sh --work WORK (--joint CKPT | --fwd EN-FR.pt --rev FR-EN.pt) --out DIR
#       [--methods posterior[,alignment]] [--beam 5] [--threads N]
#
# WORK is a run.sh work folder (its data/, bpe/ and bin/ are used). --joint takes an alignment-by-agreement
# checkpoint (split into DIR/split/{fwd,rev}.pt first, e.g. an interval checkpoint of a continued run);
# --fwd/--rev two ordinary checkpoints. Writes DIR/trial.txt (every variant, both --pool values),
# DIR/chosen.json, DIR/test.txt (the trial-chosen and fixed variants on the test pairs),
# DIR/bleu.en-fr and DIR/bleu.fr-en (sacrebleu BLEU then chrF, on the normalized, tokenized test text:
# `-tok none`), each through a temporary file.
set -euo pipefail
source "$(dirname "$0")/common.sh"
WORK="" JOINT="" FWD="" REV="" OUT="" METHODS=posterior BEAM=5 THREADS=${OMP_NUM_THREADS:-1}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --work) need "$@"; WORK="${2%/}"; shift 2 ;;
    --joint) need "$@"; JOINT="$2"; shift 2 ;;
    --fwd) need "$@"; FWD="$2"; shift 2 ;;
    --rev) need "$@"; REV="$2"; shift 2 ;;
    --out) need "$@"; OUT="${2%/}"; shift 2 ;;
    --methods) need "$@"; METHODS="$2"; shift 2 ;;
    --beam) need "$@"; BEAM="$2"; shift 2 ;;
    --threads) need "$@"; THREADS="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$WORK" && -n "$OUT" ]] || die "--work and --out are required (see --help)"
for d in data bpe bin; do [[ -d "$WORK/$d" ]] || die "--work $WORK: no $d/ (not a run.sh work folder)"; done
if [[ -n "$JOINT" ]]; then
  [[ -z "$FWD$REV" ]] || die "--joint or --fwd/--rev, not both"
  [[ -f "$JOINT" ]] || die "--joint $JOINT: no such file"
else
  [[ -f "$FWD" && -f "$REV" ]] || die "--fwd and --rev must name two checkpoints (or use --joint)"
fi
export OMP_NUM_THREADS="$THREADS"
mkdir -p "$OUT"
if [[ -n "$JOINT" ]]; then
  "$PYTHON" -m hmm_nmt_align.split_agreement "$JOINT" --out-dir "$OUT/split" --source-lang en --target-lang fr > /dev/null
  FWD="$OUT/split/fwd.pt" REV="$OUT/split/rev.pt"
fi
D="$WORK/data"
"$PYTHON" "$REPO/scripts/align_variants.py" --fwd "$FWD" --rev "$REV" --data "$WORK/bin" --methods "$METHODS" \
  --src-text "$D/trial.en" --tgt-text "$D/trial.fr" --bpe-codes "$WORK/bpe/codes" --gold "$D/trial.gold" \
  --gold-one-based --threads "$THREADS" --json "$OUT/trial.json" --choose "$OUT/chosen.json" \
  > "$OUT/trial.tmp" 2> "$OUT/trial.log" || { tail -5 "$OUT/trial.log" >&2; die "align_variants on the trial pairs failed"; }
mv "$OUT/trial.tmp" "$OUT/trial.txt"
"$PYTHON" "$REPO/scripts/align_variants.py" --fwd "$FWD" --rev "$REV" --data "$WORK/bin" \
  --src-text "$D/test.en" --tgt-text "$D/test.fr" --bpe-codes "$WORK/bpe/codes" --gold "$D/test.gold" \
  --gold-one-based --threads "$THREADS" --rows "$OUT/chosen.json" --json "$OUT/test.json" \
  > "$OUT/test.tmp" 2> "$OUT/test.log" || { tail -5 "$OUT/test.log" >&2; die "align_variants on the test pairs failed"; }
mv "$OUT/test.tmp" "$OUT/test.txt"

# BLEU: the test pairs binarized once per work folder with the training dictionaries
TB="$WORK/testbin"
if [[ ! -f "$TB/done" ]]; then
  mkdir -p "$TB"
  for l in en fr; do "$PYTHON" -m subword_nmt.apply_bpe -c "$WORK/bpe/codes" < "$D/test.$l" > "$TB/test.bpe.$l"; done
  "$BIN/fairseq-preprocess" --source-lang en --target-lang fr --testpref "$TB/test.bpe" --destdir "$TB/bin" \
    --srcdict "$WORK/bin/dict.en.txt" --tgtdict "$WORK/bin/dict.fr.txt" --workers 1 > "$TB/preprocess.log" 2>&1 \
    || die "fairseq-preprocess of the test pairs failed (log: $TB/preprocess.log)"
  touch "$TB/done"
fi
for pair in "en fr $FWD" "fr en $REV"; do
  set -- $pair
  "$BIN/fairseq-generate" "$TB/bin" --user-dir "$REPO/hmm_nmt" --path "$3" --source-lang "$1" --target-lang "$2" \
    --gen-subset test --beam "$BEAM" --batch-size 32 --remove-bpe --cpu > "$OUT/gen.$1-$2.txt" 2> "$OUT/gen.$1-$2.log" \
    || { tail -5 "$OUT/gen.$1-$2.log" >&2; die "fairseq-generate $1->$2 failed"; }
  grep ^H- "$OUT/gen.$1-$2.txt" | sort -t- -k2,2n | cut -f3 > "$OUT/hyp.$2"
  n=$(wc -l < "$OUT/hyp.$2"); [[ $n -eq $(wc -l < "$D/test.$2") ]] || die "$1->$2: $n translations for $(wc -l < "$D/test.$2") test lines"
  "$PYTHON" -m sacrebleu "$D/test.$2" -i "$OUT/hyp.$2" -tok none -m bleu chrf -b -w 2 > "$OUT/bleu.tmp" 2> /dev/null
  mv "$OUT/bleu.tmp" "$OUT/bleu.$1-$2"
done
cat "$OUT/test.txt"
read -r b1 c1 <<< "$(tr -s '[],\n' ' ' < "$OUT/bleu.en-fr")"
read -r b2 c2 <<< "$(tr -s '[],\n' ' ' < "$OUT/bleu.fr-en")"
echo "en->fr BLEU $b1 chrF $c1; fr->en BLEU $b2 chrF $c2"
