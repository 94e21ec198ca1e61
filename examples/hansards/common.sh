# Shared by run.sh and evaluate.sh (sourced): the repository, the Python to run, errors, option values, --help.
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
BIN=$(dirname "$PYTHON")
export PYTHONPATH="$REPO:$REPO/alignment${PYTHONPATH:+:$PYTHONPATH}"
die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }  # the header comment
