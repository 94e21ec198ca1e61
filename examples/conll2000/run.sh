#!/usr/bin/env bash
# CoNLL-2000 chunking (or WSJ POS, --task pos): train one tagger with fairseq-train on the training file
# (dev carved from it: 10 %, seed 1), tag the dev split and the test file with hmm-nmt-tag.
#
#   examples/conll2000/run.sh                          # tiny generated data (seconds; what the tests run)
#   examples/conll2000/run.sh --local ../shared/data/conll2000
#
# Options:
#   --local DIR      directory with train.txt (.gz allowed) and optionally test.txt: CoNLL-2000's files, public
#                    (python -m nltk.downloader conll2000 -> ~/nltk_data/corpora/conll2000, or the shared
#                    task's page https://www.clips.uantwerpen.be/conll2000/chunking/); used as they are
#   --out DIR        work directory (default: conll2000_run); checkpoints in DIR/checkpoints
#   --arch ARCH      tagger (default hnmc_cn_tagger; any --arch of sequence_tagging)
#   --task T         chunk (column 2, IOB2, default) or pos (column 1)
#   --decoding D     argmax or viterbi (default viterbi) for validation and tagging
#   --epochs N       maximum epochs (default 3 tiny, 30 --local; fairseq --patience 5 on the dev metric)
#   --threads N      torch/OMP threads (default 1)
#   -h, --help       this text
# Further arguments after -- go to fairseq-train.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-python3}
LOCAL="" OUT=conll2000_run ARCH=hnmc_cn_tagger TASK=chunk DECODING=viterbi EPOCHS="" THREADS=1 EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --task) TASK=$2; shift 2 ;;
    --decoding) DECODING=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$TASK" in
  chunk) COL=2 METRIC=chunk_f1 ;;
  pos) COL=1 METRIC=accuracy ;;
  *) echo "--task chunk or pos" >&2; exit 2 ;;
esac
pick() { for f in "$1/$2" "$1/$2.gz"; do [ -f "$f" ] && { echo "$f"; return; }; done; }
if [ -n "$LOCAL" ] && [ -z "$(pick "$LOCAL" train.txt)" ]; then  # the input, before anything is made
  echo "conll2000/run.sh: error: --local $LOCAL: no train.txt or train.txt.gz (CoNLL-2000: python -m nltk.downloader" \
    "conll2000, then --local ~/nltk_data/corpora/conll2000; see docs/tagging.md)" >&2
  exit 2
fi
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
mkdir -p "$OUT"
if [ -z "$LOCAL" ]; then
  "$PY" "$ROOT/examples/tagging_tiny.py" conll2000 "$OUT/data"
  DATA=$OUT/data SIZE=(--embed-dim 16 --hidden-size 16 --lr 0.05)
  EPOCHS=${EPOCHS:-3}
else
  DATA=$LOCAL SIZE=(--embed-dim 50 --hidden-size 32 --lr 0.05)
  EPOCHS=${EPOCHS:-30}
fi
TRAIN=$(pick "$DATA" train.txt) TEST=$(pick "$DATA" test.txt)
[ -n "$TRAIN" ] || { echo "conll2000/run.sh: error: no train.txt in $DATA" >&2; exit 2; }
"$PY" -m fairseq_cli.train "$OUT" --user-dir "$ROOT/hmm_nmt" --task sequence_tagging \
  --train-file "$TRAIN" --dev-fraction 0.1 --dev-seed 1 --tag-column "$COL" \
  --arch "$ARCH" "${SIZE[@]}" --criterion tagging_cross_entropy --decoding "$DECODING" \
  --optimizer adam --batch-size 32 --max-epoch "$EPOCHS" --patience 5 --save-dir "$OUT/checkpoints" \
  --no-epoch-checkpoints --best-checkpoint-metric "$METRIC" --maximize-best-checkpoint-metric \
  --num-workers 0 --log-format simple --seed 1 --cpu "${EXTRA[@]}"
# the dev split carved from the training file, written out for tagging
"$PY" - "$TRAIN" "$OUT/dev.txt" <<'PYEOF'
import sys
from hmm_nmt.data.conll import read_conll, split_dev, write_conll
write_conll(sys.argv[2], (s.rows for s in split_dev(read_conll(sys.argv[1]), 0.1, 1)[1]))
PYEOF
for IN in "$OUT/dev.txt" $TEST; do
  echo "== $IN"
  "$PY" "$ROOT/scripts/tag.py" --path "$OUT/checkpoints/checkpoint_best.pt" --input "$IN" \
    --output "$OUT/$(basename "$IN" .gz).tagged" --gold-column "$COL" --decoding "$DECODING" --cpu
done
