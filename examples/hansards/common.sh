# Shared by run.sh, corpus.sh and evaluate.sh (sourced): the repository, the Python to run, errors, option values, --help.
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
BIN=$(dirname "$PYTHON")
export PYTHONPATH="$REPO:$REPO/alignment${PYTHONPATH:+:$PYTHONPATH}"
die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }  # the header comment
check_local() {  # LOCAL: the hansards_enfr folder's files, checked before anything is made
  [[ -d "$1/gold" && -d "$1/train" ]] || die "--local $1: not the hansards_enfr folder (no gold/ and train/)"
  local f
  for f in gold/enfr.src-tgt gold/enfr.gold gold/trial/trial.e gold/trial/trial.f gold/trial/trial.align \
           train/isi_train.e.gz train/isi_train.f.gz; do
    [[ -f "$1/$f" ]] || die "--local $1: no $f (not the hansards_enfr folder's layout)"
  done
}
