# Shared by the alignment benchmark recipes (sourced after they set DATA, WORK, SEEDS, RUNS, RESULTS): the
# repository, the Python to run, errors, --help, and the options every recipe takes.
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
export PYTHONPATH="$REPO:$REPO/alignment${PYTHONPATH:+:$PYTHONPATH}"
EXTRA=() ENSEMBLE=()
die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="${2:?--data needs a folder}"; shift 2 ;;
    --work) WORK="${2:?--work needs a folder}"; shift 2 ;;
    --seeds) SEEDS="${2?--seeds needs a list}"; shift 2 ;;
    --ensemble-seeds) read -ra members <<< "${2?--ensemble-seeds needs a list}"
                      ENSEMBLE=(--ensemble-seeds "${members[@]}"); shift 2 ;;
    --eflomal-runs) RUNS="${2:?--eflomal-runs needs a number}"; shift 2 ;;
    --results) RESULTS="${2:?--results needs a file}"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ "$RUNS" =~ ^[0-9]+$ ]] || die "--eflomal-runs must be an integer >= 0"
