#!/usr/bin/env bash
# English-French Hansards with hmm-nmt-align-corpus: the one-command aligner side by side with eflomal in the
# same run, both given nothing but the normalized text, scored on the 447 test pairs (and the 37 trial pairs).
#
#   examples/hansards/corpus.sh [--local DIR] [--work DIR] [--eflomal-runs N] [-- hmm-nmt-align-corpus options]
#
# Steps (each skipped when its output exists, so an interrupted run resumes; hmm-nmt-align-corpus resumes
# its own stages): normalize.py (as run.sh) -> WORK/corpus.{en,fr}: the test pairs, the trial pairs, then the
# 310,661 training pairs -> eflomal-align -s -t -f -r on the whole corpus, N times (it is not seeded), merged by
# hmm-nmt-symmetrize -c grow-diag-final-and -> hmm-nmt-align-corpus -s WORK/corpus.en -t WORK/corpus.fr
# --model-dir WORK/model -o WORK/hmm.align plus the options after -- (none: its defaults) -> WORK/results.md:
# AER, precision and recall of each on the test and trial lines, with the wall clock and CPU time (user + system,
# children included) of each job. A resumed job's time is the sum of its runs (WORK/times.txt).
set -euo pipefail
source "$(dirname "$0")/common.sh"

LOCAL="$REPO/../shared/data/hansards_enfr" WORK="runs/hansards-corpus" EFLOMAL_RUNS=1 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) need "$@"; LOCAL="${2%/}"; shift 2 ;;
    --work) need "$@"; WORK="${2%/}"; shift 2 ;;
    --eflomal-runs) need "$@"; EFLOMAL_RUNS="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
check_local "$LOCAL"
[[ "$EFLOMAL_RUNS" =~ ^[0-9]+$ ]] || die "--eflomal-runs must be an integer >= 0"
# the extra of step 2, before step 1 makes anything
if ! command -v eflomal-align > /dev/null 2>&1 && [[ ! -x "$BIN/eflomal-align" ]]; then
  [[ "$EFLOMAL_RUNS" -eq 0 ]] || die "eflomal-align not found (pip install -e '.[baselines]'), or --eflomal-runs 0"
fi
DATA="$WORK/data"
mkdir -p "$DATA"
log() { echo "[hansards-corpus $(date +%H:%M:%S)] $*" >&2; }
TIMEFORMAT='%R %U %S'
timed() {  # NAME CMD...: runs CMD, appends "NAME wall user sys" to WORK/times.txt, also when it fails or is
  local name=$1 t rc=0; shift  # interrupted (Ctrl-C), so that a resumed job's time is the sum of its runs
  { t=$( { time "$@" 1>&3 2>&4; } 2>&1 ) || rc=$?; } 3>&1 4>&2
  echo "$name $t" >> "$WORK/times.txt"
  return "$rc"
}

# ------------------------------------------------------------------------------------------- 1. normalize
if [[ ! -f "$DATA/done" ]]; then
  log "normalizing the gold text and the training pairs"
  "$PYTHON" "$HERE/normalize.py" gold --local "$LOCAL" --out "$DATA"
  "$PYTHON" "$HERE/normalize.py" train --lang en "$LOCAL/train/isi_train.e.gz" "$DATA/train.en"
  "$PYTHON" "$HERE/normalize.py" train --lang fr "$LOCAL/train/isi_train.f.gz" "$DATA/train.fr"
  touch "$DATA/done"
fi
if [[ ! -f "$WORK/corpus.fr" ]]; then
  cat "$DATA/test.en" "$DATA/trial.en" "$DATA/train.en" > "$WORK/corpus.en"
  cat "$DATA/test.fr" "$DATA/trial.fr" "$DATA/train.fr" > "$WORK/corpus.fr.tmp" && mv "$WORK/corpus.fr.tmp" "$WORK/corpus.fr"
fi
N_TEST=$(wc -l < "$DATA/test.en") N_TRIAL=$(wc -l < "$DATA/trial.en")
score() {  # ALIGN NAME: "NAME split AER P R" rows for the test and trial lines of a whole-corpus alignment
  local split from n
  for split in test trial; do
    if [[ $split == test ]]; then from=1 n=$N_TEST; else from=$((N_TEST + 1)) n=$N_TRIAL; fi
    # sed, not tail | head: on a large file head's early exit kills tail with SIGPIPE, which pipefail reports
    sed -n "${from},$((from + n - 1))p;$((from + n - 1))q" "$1" > "$WORK/score.tmp"
    "$PYTHON" -m hmm_nmt_align aer "$DATA/$split.gold" "$WORK/score.tmp" --gold-one-based \
      --src "$DATA/$split.en" --tgt "$DATA/$split.fr" --json 2>/dev/null \
      | "$PYTHON" -c 'import json, sys; d = json.loads(sys.stdin.readline()); n, s = sys.argv[1:3]
print(n, s, *("-" if d[k] is None else f"{d[k]:.2f}" for k in ("AER", "P", "R")))' "$2" "$split"
  done
  rm -f "$WORK/score.tmp"
}

# ------------------------------------------------------------------------------------------- 2. eflomal
EFLOMAL=$(command -v eflomal-align || echo "$BIN/eflomal-align")
for k in $(seq 1 "$EFLOMAL_RUNS"); do
  out="$WORK/eflomal.$k"
  [[ -f "$out.gdfa" ]] && continue
  log "eflomal run $k of $EFLOMAL_RUNS"
  timed "eflomal.$k" bash -c '"$1" -s "$2" -t "$3" -f "$4.fwd" -r "$4.rev" && "$5" -m hmm_nmt_align symmetrize \
    -c grow-diag-final-and "$4.fwd" "$4.rev" -o "$4.gdfa.tmp"' _ "$EFLOMAL" "$WORK/corpus.en" "$WORK/corpus.fr" \
    "$out" "$PYTHON" > "$WORK/eflomal.$k.log" 2>&1
  mv "$out.gdfa.tmp" "$out.gdfa"
done

# ------------------------------------------------------------------------------------------- 3. hmm-nmt-align-corpus
if [[ ! -f "$WORK/hmm.align" ]]; then
  log "hmm-nmt-align-corpus ${EXTRA[*]:-(defaults)}; progress in $WORK/model/fwd/train.log"
  timed hmm "$BIN/hmm-nmt-align-corpus" -s "$WORK/corpus.en" -t "$WORK/corpus.fr" --model-dir "$WORK/model" \
    -o "$WORK/hmm.align" --no-progress "${EXTRA[@]}"
fi

# ------------------------------------------------------------------------------------------- 4. table
{
  echo "| aligner | test AER | P | R | trial AER | wall s | CPU s |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  rows() {  # NAME ALIGN
    local t=() r
    while read -r _ split a p rr; do t+=("$split $a $p $rr"); done < <(score "$2" "$1")
    r=$(awk -v n="$1" '$1 == n { w += $2; c += $3 + $4 } END { printf "%.0f | %.0f", w, c }' "$WORK/times.txt")
    read -r _ ta tp tr <<< "${t[0]}"; read -r _ va _ _ <<< "${t[1]}"
    echo "| $1 | $ta | $tp | $tr | $va | $r |"
  }
  for k in $(seq 1 "$EFLOMAL_RUNS"); do rows "eflomal.$k" "$WORK/eflomal.$k.gdfa"; done
  rows hmm "$WORK/hmm.align"
  echo
  echo "hmm-nmt-align-corpus options: ${EXTRA[*]:-(defaults)}; CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
} > "$WORK/results.md"
cat "$WORK/results.md"
