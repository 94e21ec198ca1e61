#!/usr/bin/env bash
# The English side of Multi30k (task 1) as language-model data, in one command: the stages of
# examples/wsj_lm/prepare.sh (PTB-style text, Brown clusters, fairseq binarisation) on the official
# lowercased, tokenised English files, official splits (train / val -> valid / test_2016_flickr -> test).
#
#   examples/multi30k_lm/prepare.sh OUT --local ../shared/data/multi30k [prepare.py options]
#   examples/multi30k_lm/prepare.sh OUT --download [--url URL] [--download-dir DIR] [prepare.py options]
#
# --local DIR: the official data/task1 layout (DIR/tok/<split>.lc.norm.tok.en) or the files flat in DIR,
# plain or .gz. --download fetches tok/{train,val,test_2016_flickr}.lc.norm.tok.en from URL (default: the
# official repository) into DIR (default OUT/orig). Writes OUT/raw ({train,valid,test}.txt, brown64.txt)
# and OUT/bin. Needs the `lm` extra (brown-clustering): pip install '.[lm]' (in a checkout: pip install -e '.[lm]');
# it is checked, with --local the input files too, before anything is fetched or made (one line, exit 2).
set -euo pipefail
PROG=$(basename "$0")
HERE=$(cd "$(dirname "$0")" && pwd)
die() { echo "$PROG: error: $*" >&2; exit 2; }
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }

[[ $# -ge 1 && "$1" != -* ]] || { usage >&2; die "the first argument is the output directory OUT"; }
OUT=$1
shift
LOCAL="" DOWNLOAD=0 URL="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1" DL_DIR=""
PASS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) [[ $# -ge 2 ]] || die "--local needs a directory"; LOCAL=$2; shift 2 ;;
    --download) DOWNLOAD=1; shift ;;
    --url) [[ $# -ge 2 ]] || die "--url needs a value"; URL=${2%/}; shift 2 ;;
    --download-dir) [[ $# -ge 2 ]] || die "--download-dir needs a value"; DL_DIR=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) PASS+=("$1"); shift ;;  # prepare.py options (--vocab, --brown-clusters, --brown-min-count)
  esac
done
[[ -n "$LOCAL" && $DOWNLOAD -eq 1 ]] && die "give either --local or --download, not both"
[[ -z "$LOCAL" && $DOWNLOAD -eq 0 ]] && { usage >&2; die "give --local DIR or --download"; }
PYTHON=${PYTHON:-$(command -v python3 || command -v python || echo python3)}
export PYTHON
command -v "$PYTHON" > /dev/null 2>&1 || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
"$PYTHON" -c "import brown_clustering" 2> /dev/null \
  || die "the brown-clustering package (the [lm] extra) is missing: pip install '.[lm]' (in a checkout: pip install -e '.[lm]')"

if [[ $DOWNLOAD -eq 1 ]]; then
  SRC=${DL_DIR:-$OUT/orig}
  for split in train val test_2016_flickr; do
    rel="tok/$split.lc.norm.tok.en"
    if [[ -s "$SRC/$rel" ]]; then echo "have $SRC/$rel" >&2; continue; fi
    echo "fetching $URL/$rel" >&2
    mkdir -p "$SRC/tok"
    if command -v curl >/dev/null 2>&1; then
      curl -fsSL --retry 3 -o "$SRC/$rel.part" "$URL/$rel" || { rm -f "$SRC/$rel.part"; die "download failed: $URL/$rel"; }
    else
      "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
        "$URL/$rel" "$SRC/$rel.part" 2>/dev/null || { rm -f "$SRC/$rel.part"; die "download failed: $URL/$rel"; }
    fi
    mv "$SRC/$rel.part" "$SRC/$rel"
  done
else
  SRC=$LOCAL
  [[ -d "$SRC" ]] || die "--local $SRC is not a directory"
fi
exec "$HERE/../wsj_lm/prepare.sh" "$OUT" --multi30k "$SRC" ${PASS[@]+"${PASS[@]}"}
