#!/usr/bin/env bash
# The direct-HMM quality ablation of docs/translation.md ("The --dhmm-layers default"): one fairseq-train run of one variant and seed with the
# protocol's fixed sizes and schedule (d=128, 2+2 layers, 2,048-token batches, lr 2e-3, 200 warm-up updates,
# validation every 200 updates), then beam-5 BLEU/TER/chrF of the last checkpoint on the dev set (val).
#
#   examples/multi30k/quality_ablation.sh --data DIR --out DIR VARIANT SEED [UPDATES]
#
# --data: a directory made by examples/multi30k/prepare.sh (docs/translation.md used --merges 2000);
# VARIANT: transformer | all | last | last-mix | last-lexdrop | first-order (the transformer_dhmm flags of
# docs/translation.md; first-order is transformer_dhmm_first_order with --dhmm-layers last);
# UPDATES defaults to 400. The run goes to OUT/VARIANT-sSEED; the same command again resumes it.
set -euo pipefail
die() { echo "quality_ablation.sh: error: $*" >&2; exit 2; }

DATA="" OUT=""
while [[ $# -gt 0 && "$1" == --* ]]; do
  case "$1" in
    --data) [[ $# -ge 2 ]] || die "--data needs a value"; DATA=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a value"; OUT=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done
[[ -n "$DATA" && -n "$OUT" && $# -ge 2 ]] || die "usage: quality_ablation.sh --data DIR --out DIR VARIANT SEED [UPDATES]"
[[ -f "$DATA/prepare.json" ]] || die "$DATA/prepare.json not found: --data must be made by examples/multi30k/prepare.sh"
VARIANT=$1 SEED=$2 UPDATES=${3:-400}
[[ "$SEED" =~ ^[0-9]+$ && "$UPDATES" =~ ^[0-9]+$ ]] || die "SEED and UPDATES must be integers"
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

ARCH=transformer_dhmm CRIT=dhmm_label_smoothed_cross_entropy EXTRA=()
case "$VARIANT" in
  transformer) ARCH=transformer CRIT=label_smoothed_cross_entropy ;;
  all) EXTRA=(--dhmm-layers all) ;;
  last) EXTRA=(--dhmm-layers last) ;;
  last-mix) EXTRA=(--dhmm-layers last --dhmm-smoothing mixture) ;;
  last-lexdrop) EXTRA=(--dhmm-layers last --lexicon-dropout 0.1) ;;
  first-order) ARCH=transformer_dhmm_first_order EXTRA=(--dhmm-layers last) ;;
  *) die "unknown VARIANT '$VARIANT' (transformer, all, last, last-mix, last-lexdrop, first-order)" ;;
esac
# the ablation of docs/translation.md measured the softmax lexicon (then the default; now separable)
[[ $ARCH == transformer ]] || EXTRA=(--lexicon softmax "${EXTRA[@]}")
RUN="$OUT/$VARIANT-s$SEED"
mkdir -p "$RUN"
fairseq-train "$DATA/bin/de-en" --user-dir "$REPO/hmm_nmt" --arch "$ARCH" --share-all-embeddings \
  --encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 \
  --encoder-layers 2 --decoder-layers 2 --encoder-attention-heads 4 --decoder-attention-heads 4 \
  --criterion "$CRIT" --label-smoothing 0.1 --dropout 0.3 --weight-decay 1e-4 \
  --optimizer adam --adam-betas '(0.9,0.98)' --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 \
  --max-tokens 2048 --max-update "$UPDATES" --seed "$SEED" --save-dir "$RUN/ckpt" --no-epoch-checkpoints \
  --validate-interval-updates 200 --validate-interval 1000 --save-interval-updates 200 --keep-interval-updates 1 \
  --log-format json --log-interval 50 --num-workers 0 "${EXTRA[@]}" 2>&1 | tee -a "$RUN/train.log"
fairseq-generate "$DATA/bin/de-en" --user-dir "$REPO/hmm_nmt" --path "$RUN/ckpt/checkpoint_last.pt" \
  --gen-subset valid --beam 5 --batch-size 128 --required-batch-size-multiple 1 --remove-bpe \
  --max-len-a 1.5 --max-len-b 10 > "$RUN/generate.valid.out"
grep ^H- "$RUN/generate.valid.out" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$RUN/hyp.valid"
for m in bleu ter chrf; do
  sacrebleu "$DATA/text/valid.en" -i "$RUN/hyp.valid" -m "$m" -tok none -lc -b | sed "s/^/$VARIANT seed $SEED $m: /"
done
