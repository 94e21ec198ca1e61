#!/usr/bin/env bash
# Universal Dependencies English EWT part-of-speech tagging (UPOS, or XPOS): train one tagger with
# fairseq-train (CoNLL-U read through the conllu library, multiword tokens and empty nodes skipped), tag
# dev and test with hmm-nmt-tag.
#
#   examples/ud_pos/run.sh                             # tiny generated data (seconds; what the tests run)
#   examples/ud_pos/run.sh --local ../shared/data/ud_en_ewt
#
# Options:
#   --local DIR      directory with en_ewt-ud-{train,dev,test}.conllu (.gz allowed): a release of
#                    https://github.com/UniversalDependencies/UD_English-EWT (r2.16 in docs/tagging.md), as it is
#   --out DIR        work directory (default: ud_pos_run); checkpoints in DIR/checkpoints
#   --arch ARCH      tagger (default bilstm_tagger; any --arch of sequence_tagging)
#   --tag-column C   upos (default) or xpos
#   --epochs N       maximum epochs (default 3 tiny, 30 --local; fairseq --patience 5 on dev accuracy)
#   --threads N      torch/OMP threads (default 1)
#   -h, --help       this text
# Further arguments after -- go to fairseq-train.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-python3}
LOCAL="" OUT=ud_pos_run ARCH=bilstm_tagger COLUMN=upos EPOCHS="" THREADS=1 EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --tag-column) COLUMN=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
pick() {  # DIR NAME: the file of NAME in DIR (.gz allowed), else one line and exit 2
  for f in "$1/$2" "$1/$2.gz"; do [ -f "$f" ] && { echo "$f"; return; }; done
  echo "ud_pos/run.sh: error: --local $1: no $2 (nor $2.gz): UD English EWT's files" \
    "(https://github.com/UniversalDependencies/UD_English-EWT; see docs/tagging.md)" >&2
  exit 2
}
if [ -n "$LOCAL" ]; then  # the inputs, before anything is made
  for f in en_ewt-ud-train.conllu en_ewt-ud-dev.conllu en_ewt-ud-test.conllu; do pick "$LOCAL" $f > /dev/null; done
fi
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
mkdir -p "$OUT"
if [ -z "$LOCAL" ]; then
  "$PY" "$ROOT/examples/tagging_tiny.py" ud "$OUT/data"
  DATA=$OUT/data SIZE=(--embed-dim 16 --hidden-size 16 --char-embed-dim 8 --char-hidden 8 --lr 0.01)
  EPOCHS=${EPOCHS:-3}
else
  DATA=$LOCAL SIZE=(--embed-dim 100 --hidden-size 100 --char-embed-dim 25 --char-hidden 25 --dropout 0.5 --lr 0.002)
  EPOCHS=${EPOCHS:-30}
fi
TRAIN=$(pick "$DATA" en_ewt-ud-train.conllu) DEV=$(pick "$DATA" en_ewt-ud-dev.conllu) TEST=$(pick "$DATA" en_ewt-ud-test.conllu)
"$PY" -m fairseq_cli.train "$OUT" --user-dir "$ROOT/hmm_nmt" --task sequence_tagging --data-format conllu \
  --train-file "$TRAIN" --valid-file "$DEV" --test-file "$TEST" --tag-column "$COLUMN" \
  --arch "$ARCH" "${SIZE[@]}" --criterion tagging_cross_entropy --optimizer adam --batch-size 32 \
  --max-epoch "$EPOCHS" --patience 5 --save-dir "$OUT/checkpoints" --no-epoch-checkpoints \
  --best-checkpoint-metric accuracy --maximize-best-checkpoint-metric \
  --num-workers 0 --log-format simple --seed 1 --cpu "${EXTRA[@]}"
for split in dev test; do
  [ $split = dev ] && IN=$DEV || IN=$TEST
  echo "== $split ($IN)"
  "$PY" "$ROOT/scripts/tag.py" --path "$OUT/checkpoints/checkpoint_best.pt" --input "$IN" \
    --output "$OUT/$split.tagged" --gold-column "$COLUMN" --cpu
done
