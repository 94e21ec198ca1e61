#!/usr/bin/env bash
# English-French Hansards word alignment: from the raw shared files to an AER table on the 447 test pairs
# of the HLT-NAACL 2003 shared task (Sure/Possible gold), settings chosen on its 37 trial pairs only.
#
#   examples/hansards/run.sh [--local DIR] [--work DIR] [--train-lines N] [--merges M] [--models LIST]
#       [--max-update U] [--embed-dim D] [--ffn-dim F] [--layers L] [--heads H] [--max-tokens T] [--lr LR]
#       [--warmup W] [--dropout P] [--threads N] [--baselines eflomal,fast_align|none] [--gpu] [--seed S]
#       [--agreement-weight W] [--init-from DIR] [--adapt-updates N[,N2...]] [-- more fairseq-train options]
#
# Steps (each skipped when its output exists, so an interrupted run resumes): normalize.py (sacremoses,
# lower case, accents stripped, French contractions/elisions decomposed as the gold does; the gold's words
# untouched) -> joint subword-nmt BPE learned on the training text -> fairseq-preprocess (one joined
# dictionary, both directions) -> fairseq-train en->fr and fr->en of each model in --models (dhmm0: zero
# order transformer_dhmm, dhmm1: first order, transformer: attention baseline; agree1: first order, both
# directions trained once jointly with --criterion dhmm_agreement --agreement-weight W, alignment by agreement,
# then split into en->fr and fr->en checkpoints by python -m hmm_nmt_align.split_agreement; with --init-from DIR it
# starts from DIR/dhmm1.en-fr/checkpoint_last.pt and DIR/dhmm1.fr-en/checkpoint_last.pt, e.g. this run's own
# WORK/checkpoints, the dhmm1 models then being trained first) -> scripts/align_variants.py on
# the trial pairs (every link variant; the best of each family chosen there) and the chosen + fixed variants
# on the test pairs (with --adapt-updates: also each model adapted by hmm-nmt-adapt, N updates of its own
# training loss on the text of the pairs to align, trial + test, no gold, as eflomal trains on them; one row
# family per N, and the table names the N chosen on the trial pairs) -> one timed hmm-nmt-align --rev-path --symmetrize grow-diag-final-and run per model
# (sentences/s of the bidirectional alignment; scored by hmm-nmt-aer --gold-one-based) -> eflomal and
# fast_align on the same normalized text (skipped with a message when not installed) -> WORK/results.md.
#
# Defaults: the CPU run (about 2 hours on the shared 2-core machine; docs/alignment.md#hansards says how it
# was estimated): all 310,661 training pairs, 2000 joint merges (the lexicon costs target x source x vocabulary
# per sentence), d=128, 2+2 layers, 4 heads, FFN 512, 2,048 tokens per batch, 1,200 updates per model and
# direction. The GPU size of docs/alignment.md: --gpu --merges 16000
# --embed-dim 512 --ffn-dim 2048 --layers 6 --heads 8 --max-tokens 8000 --max-update 30000 --lr 7e-4
# --warmup 4000. --local defaults to ../shared/data/hansards_enfr next to the repository.
set -euo pipefail
source "$(dirname "$0")/common.sh"

LOCAL="$REPO/../shared/data/hansards_enfr" WORK="runs/hansards" TRAIN_LINES="" MERGES=2000
MODELS="dhmm0,dhmm1,transformer" MAX_UPDATE=1200 EMBED=128 FFN=512 LAYERS=2 HEADS=4 MAX_TOKENS=2048 LR=2e-3
WARMUP=200 DROPOUT=0.1 THREADS=${OMP_NUM_THREADS:-1} BASELINES="eflomal,fast_align" GPU=0 SEED=1 EXTRA=()
AGREEMENT_WEIGHT=1.0 INIT_FROM="" ADAPT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) need "$@"; LOCAL="${2%/}"; shift 2 ;;
    --work) need "$@"; WORK="${2%/}"; shift 2 ;;
    --train-lines) need "$@"; TRAIN_LINES="$2"; shift 2 ;;
    --merges) need "$@"; MERGES="$2"; shift 2 ;;
    --models) need "$@"; MODELS="$2"; shift 2 ;;
    --max-update) need "$@"; MAX_UPDATE="$2"; shift 2 ;;
    --embed-dim) need "$@"; EMBED="$2"; shift 2 ;;
    --ffn-dim) need "$@"; FFN="$2"; shift 2 ;;
    --layers) need "$@"; LAYERS="$2"; shift 2 ;;
    --heads) need "$@"; HEADS="$2"; shift 2 ;;
    --max-tokens) need "$@"; MAX_TOKENS="$2"; shift 2 ;;
    --lr) need "$@"; LR="$2"; shift 2 ;;
    --warmup) need "$@"; WARMUP="$2"; shift 2 ;;
    --dropout) need "$@"; DROPOUT="$2"; shift 2 ;;
    --threads) need "$@"; THREADS="$2"; shift 2 ;;
    --baselines) need "$@"; BASELINES="$2"; shift 2 ;;
    --seed) need "$@"; SEED="$2"; shift 2 ;;
    --agreement-weight) need "$@"; AGREEMENT_WEIGHT="$2"; shift 2 ;;
    --init-from) need "$@"; INIT_FROM="${2%/}"; shift 2 ;;
    --adapt-updates) need "$@"; ADAPT="$2"; shift 2 ;;
    --gpu) GPU=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
check_local "$LOCAL"
[[ -z "$TRAIN_LINES" || "$TRAIN_LINES" =~ ^[1-9][0-9]*$ ]] || die "--train-lines must be a positive integer"
IFS=, read -r -a MODEL_LIST <<< "$MODELS"
for m in "${MODEL_LIST[@]}"; do
  case "$m" in dhmm0|dhmm1|transformer|agree1) ;; *) die "--models: unknown model '$m' (dhmm0, dhmm1, transformer, agree1)" ;; esac
done
[[ -z "$ADAPT" || "$ADAPT" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--adapt-updates: N or N1,N2,... (positive integers)"
[[ "$AGREEMENT_WEIGHT" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || die "--agreement-weight must be a number >= 0"
if [[ -n "$INIT_FROM" && ",$MODELS," != *,dhmm1,* ]]; then  # checkpoints of an earlier run: they must exist now
  for d in en-fr fr-en; do
    [[ -f "$INIT_FROM/dhmm1.$d/checkpoint_last.pt" ]] || die "--init-from $INIT_FROM: no dhmm1.$d/checkpoint_last.pt"
  done
fi
export OMP_NUM_THREADS="$THREADS"
CPU=(--cpu); [[ $GPU -eq 1 ]] && CPU=()
DATA="$WORK/data" BPE="$WORK/bpe" DBIN="$WORK/bin" CK="$WORK/checkpoints" AL="$WORK/align"
mkdir -p "$DATA" "$BPE" "$CK" "$AL"
log() { echo "[hansards $(date +%H:%M:%S)] $*" >&2; }

# ------------------------------------------------------------------------------------------- 1. normalize
stamp="lines=${TRAIN_LINES:-all}"
if [[ ! -f "$DATA/done" || "$(cat "$DATA/done")" != "$stamp" ]]; then
  log "normalizing the gold text and ${TRAIN_LINES:-all} training pairs"
  "$PYTHON" "$HERE/normalize.py" gold --local "$LOCAL" --out "$DATA"
  lines=(); [[ -n "$TRAIN_LINES" ]] && lines=(--lines "$TRAIN_LINES")
  "$PYTHON" "$HERE/normalize.py" train --lang en "${lines[@]}" "$LOCAL/train/isi_train.e.gz" "$DATA/train.en"
  "$PYTHON" "$HERE/normalize.py" train --lang fr "${lines[@]}" "$LOCAL/train/isi_train.f.gz" "$DATA/train.fr"
  echo "$stamp" > "$DATA/done"
  rm -f "$BPE/done" "$DBIN/done"
fi

# ------------------------------------------------------------------------------------------- 2. BPE + binarize
if [[ ! -f "$BPE/done" || "$(cat "$BPE/done")" != "merges=$MERGES" ]]; then
  log "learning $MERGES joint BPE merges on the training text"
  cat "$DATA/train.en" "$DATA/train.fr" | "$PYTHON" -m subword_nmt.learn_bpe -s "$MERGES" > "$BPE/codes"
  # training pairs: empty sides dropped (fairseq cannot train on them); the trial pairs are the valid set
  "$PYTHON" - "$DATA" "$BPE" <<'EOF'
import sys
data, bpe_dir = sys.argv[1:3]
from subword_nmt.apply_bpe import BPE
with open(f"{bpe_dir}/codes", encoding="utf-8") as f:
    bpe = BPE(f)
for split, name in (("train", "train"), ("trial", "valid")):
    en = open(f"{data}/{split}.en", encoding="utf-8").read().splitlines()
    fr = open(f"{data}/{split}.fr", encoding="utf-8").read().splitlines()
    assert len(en) == len(fr), f"{split}: {len(en)} English but {len(fr)} French lines"
    kept = [(bpe.process_line(e), bpe.process_line(f)) for e, f in zip(en, fr) if e.strip() and f.strip()]
    for k, lang in enumerate(("en", "fr")):
        with open(f"{bpe_dir}/{name}.{lang}", "w", encoding="utf-8") as out:
            out.writelines(p[k].strip() + "\n" for p in kept)
    print(f"{split}: {len(kept)} of {len(en)} pairs kept", file=sys.stderr)
EOF
  echo "merges=$MERGES" > "$BPE/done"
  rm -f "$DBIN/done"
fi
if [[ ! -f "$DBIN/done" ]]; then
  rm -rf "$DBIN"
  "$BIN/fairseq-preprocess" --source-lang en --target-lang fr --trainpref "$BPE/train" --validpref "$BPE/valid" \
    --destdir "$DBIN" --joined-dictionary --workers 1 > "$WORK/preprocess.log" 2>&1 || {
      tail -20 "$WORK/preprocess.log" >&2; die "fairseq-preprocess failed (log: $WORK/preprocess.log)"; }
  touch "$DBIN/done"
fi

# ------------------------------------------------------------------------------------------- 3. train
ARCH_ARGS=(--encoder-layers "$LAYERS" --decoder-layers "$LAYERS" --encoder-embed-dim "$EMBED" --decoder-embed-dim "$EMBED"
  --encoder-ffn-embed-dim "$FFN" --decoder-ffn-embed-dim "$FFN" --encoder-attention-heads "$HEADS"
  --decoder-attention-heads "$HEADS" --share-all-embeddings --dropout "$DROPOUT")
OPT_ARGS=(--label-smoothing 0.1 --optimizer adam --adam-betas "(0.9,0.98)" --lr "$LR" --lr-scheduler inverse_sqrt
  --warmup-updates "$WARMUP" --max-tokens "$MAX_TOKENS" --max-update "$MAX_UPDATE" --no-epoch-checkpoints
  --no-save-optimizer-state --seed "$SEED" --log-format simple --log-interval 50 --validate-interval-updates 0
  --save-interval-updates 0 --num-workers 0 --required-batch-size-multiple 1)
[[ $GPU -eq 1 ]] || OPT_ARGS+=(--cpu)
train() {  # model src tgt
  local m=$1 s=$2 t=$3 dir="$CK/$1.$2-$3" model_args
  case "$m" in
    # the softmax lexicon of docs/alignment.md's tables (then the default; now separable)
    dhmm0) model_args=(--user-dir "$REPO/hmm_nmt" --arch transformer_dhmm --alignment-order 0 --lexicon softmax
             --criterion dhmm_label_smoothed_cross_entropy) ;;
    dhmm1) model_args=(--user-dir "$REPO/hmm_nmt" --arch transformer_dhmm_first_order --alignment-order 1
             --lexicon softmax --criterion dhmm_label_smoothed_cross_entropy) ;;
    transformer) model_args=(--arch transformer --criterion label_smoothed_cross_entropy) ;;
    agree1) model_args=(--user-dir "$REPO/hmm_nmt" --arch transformer_dhmm_first_order_agreement --alignment-order 1
              --lexicon softmax --criterion dhmm_agreement --agreement-weight "$AGREEMENT_WEIGHT")
            [[ -n "$INIT_FROM" ]] && model_args+=(--init-fwd "$INIT_FROM/dhmm1.en-fr/checkpoint_last.pt"
              --init-rev "$INIT_FROM/dhmm1.fr-en/checkpoint_last.pt") ;;
  esac
  if [[ -f "$dir/done" ]]; then return; fi
  mkdir -p "$dir"
  log "training $m $s->$t ($MAX_UPDATE updates)"
  local t0=$SECONDS
  "$BIN/fairseq-train" "$DBIN" --source-lang "$s" --target-lang "$t" "${model_args[@]}" "${ARCH_ARGS[@]}" \
    "${OPT_ARGS[@]}" --save-dir "$dir" ${EXTRA[@]+"${EXTRA[@]}"} > "$dir/train.log" 2>&1 || {
      tail -20 "$dir/train.log" >&2; die "fairseq-train $m $s->$t failed (log: $dir/train.log)"; }
  echo "$((SECONDS - t0))" > "$dir/done"
}
for m in "${MODEL_LIST[@]}"; do [[ $m == agree1 ]] || { train "$m" en fr; train "$m" fr en; }; done
if [[ ",$MODELS," == *,agree1,* ]]; then  # after dhmm1, which --init-from may name
  [[ -z "$INIT_FROM" ]] || for d in en-fr fr-en; do
    [[ -f "$INIT_FROM/dhmm1.$d/checkpoint_last.pt" ]] || die "--init-from $INIT_FROM: no dhmm1.$d/checkpoint_last.pt"
  done
  train agree1 en fr  # both directions at once: en->fr is the task's direction, fr->en the reverse sub-model
  if [[ ! -f "$CK/agree1.split/rev.pt" ]]; then
    "$PYTHON" -m hmm_nmt_align.split_agreement "$CK/agree1.en-fr/checkpoint_last.pt" --out-dir "$CK/agree1.split" \
      --source-lang en --target-lang fr > /dev/null || die "splitting $CK/agree1.en-fr/checkpoint_last.pt failed"
  fi
fi

# ------------------------------------------------------------------------------------------- 4. adapt
ckpts() {  # model -> "fwd rev" checkpoints; m+aN: model m adapted for N updates
  local m=${1%%+a*}
  if [[ $1 == *+a* ]]; then echo "$CK/$m.adapt/en-fr.${1##*+a}.pt $CK/$m.adapt/fr-en.${1##*+a}.pt"
  elif [[ $m == agree1 ]]; then echo "$CK/agree1.split/fwd.pt $CK/agree1.split/rev.pt"
  else echo "$CK/$m.en-fr/checkpoint_last.pt $CK/$m.fr-en/checkpoint_last.pt"; fi
}
ALIGN_LIST=("${MODEL_LIST[@]}")
if [[ -n "$ADAPT" ]]; then
  IFS=, read -r -a ADAPT_LIST <<< "$ADAPT"
  cat "$DATA/trial.en" "$DATA/test.en" > "$AL/adapt.en"  # the pairs to align: their text only
  cat "$DATA/trial.fr" "$DATA/test.fr" > "$AL/adapt.fr"
  for m in "${MODEL_LIST[@]}"; do
    read -r fwd rev <<< "$(ckpts "$m")"
    mkdir -p "$CK/$m.adapt"
    for pair in "en fr $fwd" "fr en $rev"; do
      set -- $pair
      todo=""; for n in "${ADAPT_LIST[@]}"; do [[ -f "$CK/$m.adapt/$1-$2.$n.pt" ]] || todo=1; done
      if [[ -n "$todo" ]]; then
        log "$m $1->$2: adapting on the trial + test text ($ADAPT updates)"
        "$PYTHON" -m hmm_nmt_align.adapt "${CPU[@]}" --path "$3" --data "$DBIN" --src-text "$AL/adapt.$1" \
          --tgt-text "$AL/adapt.$2" --bpe-codes "$BPE/codes" --updates "$ADAPT" --max-tokens "$MAX_TOKENS" \
          --seed "$SEED" --no-progress -o "$CK/$m.adapt/$1-$2.{updates}.pt" 2> "$CK/$m.adapt/$1-$2.log" || {
            tail -5 "$CK/$m.adapt/$1-$2.log" >&2; die "hmm-nmt-adapt $m $1->$2 failed"; }
      fi
    done
    for n in "${ADAPT_LIST[@]}"; do ALIGN_LIST+=("$m+a$n"); done
  done
fi

# ------------------------------------------------------------------------------------------- 5. align + score
GOLD_ARGS=(--gold-one-based)
for m in "${ALIGN_LIST[@]}"; do
  read -r fwd rev <<< "$(ckpts "$m")"
  methods="posterior,alignment"; [[ ${m%%+a*} == transformer ]] && methods="attention"
  if [[ ! -f "$AL/$m.test.json" ]]; then
    log "$m: every link variant on the trial pairs"
    "$PYTHON" "$REPO/scripts/align_variants.py" --fwd "$fwd" --rev "$rev" --data "$DBIN" --methods "$methods" \
      --src-text "$DATA/trial.en" --tgt-text "$DATA/trial.fr" --bpe-codes "$BPE/codes" --gold "$DATA/trial.gold" \
      "${GOLD_ARGS[@]}" --threads "$THREADS" --json "$AL/$m.trial.json" --choose "$AL/$m.chosen.json" \
      > "$AL/$m.trial.txt" 2> "$AL/$m.trial.log"
    log "$m: the trial-chosen and fixed variants on the test pairs"
    "$PYTHON" "$REPO/scripts/align_variants.py" --fwd "$fwd" --rev "$rev" --data "$DBIN" \
      --src-text "$DATA/test.en" --tgt-text "$DATA/test.fr" --bpe-codes "$BPE/codes" --gold "$DATA/test.gold" \
      "${GOLD_ARGS[@]}" --threads "$THREADS" --rows "$AL/$m.chosen.json" --json "$AL/$m.test.tmp.json" \
      > "$AL/$m.test.txt" 2> "$AL/$m.test.log"
    mv "$AL/$m.test.tmp.json" "$AL/$m.test.json"
  fi
  method=posterior; [[ ${m%%+a*} == transformer ]] && method=attention
  if [[ ! -f "$AL/$m.gdfa.time" ]]; then
    log "$m: hmm-nmt-align, both directions, grow-diag-final-and, on the test pairs (timed)"
    t0=$(date +%s.%N)
    "$PYTHON" -m hmm_nmt_align.extract "${CPU[@]}" --path "$fwd" --rev-path "$rev" --data "$DBIN" --method "$method" \
      --symmetrize grow-diag-final-and --src-text "$DATA/test.en" --tgt-text "$DATA/test.fr" --bpe-codes "$BPE/codes" \
      --no-progress -o "$AL/$m.$method.gdfa.align" 2> "$AL/$m.gdfa.log"
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f\n", b - a }' > "$AL/$m.gdfa.time"
  fi
  "$PYTHON" -m hmm_nmt_align aer "$DATA/test.gold" "$AL/$m.$method.gdfa.align" --gold-one-based \
    --src "$DATA/test.en" --tgt "$DATA/test.fr" > "$AL/$m.gdfa.aer"
done

# ------------------------------------------------------------------------------------------- 6. baselines
if [[ "$BASELINES" != none && ! -f "$AL/baselines.txt" ]]; then
  if "$PYTHON" -c "import ${BASELINES//fast_align/systran_align}" 2>/dev/null; then
    log "eflomal and fast_align on the training text + the test pairs"
    t0=$SECONDS
    "$PYTHON" -m hmm_nmt_align.baselines "$DATA/test.en" "$DATA/test.fr" "$DATA/test.gold" --one-based \
      --train-src "$DATA/train.en" --train-tgt "$DATA/train.fr" --method grow-diag-final-and \
      --aligners "$BASELINES" --out-dir "$AL/baselines" > "$AL/baselines.tmp" 2> "$AL/baselines.log"
    echo "# $((SECONDS - t0)) s" >> "$AL/baselines.tmp"
    mv "$AL/baselines.tmp" "$AL/baselines.txt"
  else
    echo "run.sh: $BASELINES not installed (pip install -e '.[baselines]': eflomal, systran-align): no statistical baselines" >&2
  fi
fi

# ------------------------------------------------------------------------------------------- 7. table
"$PYTHON" "$HERE/table.py" --work "$WORK" --models "$(IFS=,; echo "${ALIGN_LIST[*]}")" > "$WORK/results.md"
cat "$WORK/results.md"
