#!/usr/bin/env bash
# Prepare Multi30k task 1 (German-English, WMT16 multimodal) for fairseq.
#
#   examples/multi30k/prepare.sh --local ../shared/data/multi30k        # local copy of data/task1
#   examples/multi30k/prepare.sh --download                             # fetch the official files
#
# Steps: (1) text/   the lowercased, normalised, tokenised files of the official repository
#                    (<split>.lc.norm.tok.<lang>), or with --cased the raw files (<split>.<lang>.gz) put
#                    through sacremoses punctuation normalisation + tokenisation (XML-escaped like the
#                    official tok/ files); train, val and test_2016_flickr become train, valid, test.
#        (2) bpe/    joint BPE learned on train.de + train.en: subword-nmt (--merges) or SentencePiece
#                    (--bpe sentencepiece, --vocab-size).
#        (3) bin/de-en and bin/en-de: fairseq-preprocess --joined-dictionary; both directions share one
#                    dictionary, so checkpoints of the two directions use the same token ids.
# prepare.json in the destination records what was done (scripts/benchmark_translation.py reads it: how to
# remove the BPE, where the tokenised references are).  The destination is built in DEST.partial and renamed
# when complete; running again with the same settings does nothing.
set -euo pipefail

PROG=$(basename "$0")
die() { echo "$PROG: error: $*" >&2; exit 2; }
log() { echo "[$PROG $(date +%H:%M:%S)] $*" >&2; }

usage() {
  cat <<EOF
Usage: $PROG (--local DIR | --download) [options]

Source (one of):
  --local DIR          directory with Multi30k task 1 files: the official data/task1 layout
                       (DIR/tok/<split>.lc.norm.tok.<lang>, DIR/raw/<split>.<lang>.gz) or all files flat
                       in DIR; every file may be plain or .gz
  --download           fetch the official files from --url into --download-dir
  --url URL            base URL of data/task1 (default: $URL)
  --download-dir DIR   where downloads go (default: <dest>/../multi30k-orig)

Options:
  --dest DIR           output directory (default: $DEST)
  --cased              raw cased files + sacremoses normalize/tokenize instead of the lowercased ones
  --bpe KIND           subword-nmt (default) or sentencepiece; joint over German and English
  --merges N           subword-nmt merge operations (default: $MERGES)
  --vocab-size N       SentencePiece vocabulary size (default: $VOCAB)
  --train-lines N      keep only the first N training sentence pairs (0 = all; for smoke tests)
  --valid-lines N      likewise for the validation set
  --test-lines N       likewise for test_2016_flickr
  --workers N          worker processes for tokenisation and fairseq-preprocess (default: $WORKERS)
  --force              rebuild even if DEST was prepared with other settings
  -h, --help           this text
Environment: PYTHON (default: python3) must have fairseq, subword-nmt, sentencepiece and sacremoses.
EOF
}

PYTHON=${PYTHON:-python3}
LOCAL=""
DOWNLOAD=0
URL="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1"
DOWNLOAD_DIR=""
DEST="runs/multi30k/data"
CASED=0
BPE="subword-nmt"
MERGES=10000
VOCAB=8000
TRAIN_LINES=0
VALID_LINES=0
TEST_LINES=0
WORKERS=1
FORCE=0
CMDLINE="$0 $*"

need_value() { [[ $# -ge 2 && -n "$2" ]] || die "option $1 needs a value"; }
need_int() { [[ "$2" =~ ^[0-9]+$ ]] || die "option $1 needs a non-negative integer, got '$2'"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) need_value "$@"; LOCAL="$2"; shift 2 ;;
    --download) DOWNLOAD=1; shift ;;
    --url) need_value "$@"; URL="${2%/}"; shift 2 ;;
    --download-dir) need_value "$@"; DOWNLOAD_DIR="$2"; shift 2 ;;
    --dest) need_value "$@"; DEST="${2%/}"; shift 2 ;;
    --cased) CASED=1; shift ;;
    --bpe) need_value "$@"; BPE="$2"; shift 2 ;;
    --merges) need_value "$@"; need_int "$1" "$2"; MERGES="$2"; shift 2 ;;
    --vocab-size) need_value "$@"; need_int "$1" "$2"; VOCAB="$2"; shift 2 ;;
    --train-lines) need_value "$@"; need_int "$1" "$2"; TRAIN_LINES="$2"; shift 2 ;;
    --valid-lines) need_value "$@"; need_int "$1" "$2"; VALID_LINES="$2"; shift 2 ;;
    --test-lines) need_value "$@"; need_int "$1" "$2"; TEST_LINES="$2"; shift 2 ;;
    --workers) need_value "$@"; need_int "$1" "$2"; WORKERS="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

[[ -n "$LOCAL" && $DOWNLOAD -eq 1 ]] && die "give either --local or --download, not both"
[[ -z "$LOCAL" && $DOWNLOAD -eq 0 ]] && { usage >&2; die "give --local DIR or --download"; }
[[ "$BPE" == "subword-nmt" || "$BPE" == "sentencepiece" ]] || die "--bpe must be subword-nmt or sentencepiece, got '$BPE'"
[[ "$BPE" == "subword-nmt" && $MERGES -lt 1 ]] && die "--merges must be positive"
[[ "$BPE" == "sentencepiece" && $VOCAB -lt 16 ]] && die "--vocab-size must be at least 16"
[[ $WORKERS -ge 1 ]] || die "--workers must be at least 1"
command -v "$PYTHON" >/dev/null 2>&1 || die "python interpreter '$PYTHON' not found (set PYTHON=...)"
"$PYTHON" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in
  ('fairseq_cli', 'subword_nmt', 'sentencepiece', 'sacremoses')))" 2>/dev/null \
  || die "$PYTHON lacks one of fairseq, subword-nmt, sentencepiece, sacremoses (pip install -e . installs them)"

SRC_LANGS=(de en)
SPLITS=(train val test_2016_flickr)
declare -A OUT_SPLIT=([train]=train [val]=valid [test_2016_flickr]=test)
declare -A LIMIT=([train]=$TRAIN_LINES [val]=$VALID_LINES [test_2016_flickr]=$TEST_LINES)

if [[ $CASED -eq 1 ]]; then TEXT_KIND="raw+sacremoses"; else TEXT_KIND="lc.norm.tok"; fi
if [[ "$BPE" == "subword-nmt" ]]; then BPE_DESC="subword-nmt merges=$MERGES"; REMOVE_BPE="@@ ";
else BPE_DESC="sentencepiece bpe vocab_size=$VOCAB"; REMOVE_BPE="sentencepiece"; fi
# what makes two preparations interchangeable (the source directory is not part of it: same files)
CONFIG="text=$TEXT_KIND;bpe=$BPE_DESC;lines=$TRAIN_LINES/$VALID_LINES/$TEST_LINES"

if [[ -f "$DEST/prepare.json" ]]; then
  old=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"])' "$DEST/prepare.json") \
    || die "$DEST/prepare.json is unreadable; remove $DEST or pass --force"
  if [[ "$old" == "$CONFIG" && $FORCE -eq 0 ]]; then
    log "$DEST is already prepared ($CONFIG); nothing to do"
    exit 0
  fi
  [[ $FORCE -eq 1 ]] || die "$DEST was prepared with other settings ($old, now $CONFIG); pass --force to rebuild or use another --dest"
elif [[ -e "$DEST" ]]; then
  [[ $FORCE -eq 1 ]] || die "$DEST exists but has no prepare.json (not made by $PROG?); pass --force or use another --dest"
fi

# ---------------------------------------------------------------- source files
fetch() {  # fetch URL FILE: atomic download with the usual clients
  local url="$1" out="$2"
  mkdir -p "$(dirname "$out")"
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$out.part" "$url" || { rm -f "$out.part"; die "download failed: $url"; }
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$out.part" "$url" || { rm -f "$out.part"; die "download failed: $url"; }
  else
    "$PYTHON" -c 'import sys,urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$out.part" \
      || { rm -f "$out.part"; die "download failed: $url"; }
  fi
  mv "$out.part" "$out"
}

if [[ $DOWNLOAD -eq 1 ]]; then
  SRC_DIR="${DOWNLOAD_DIR:-$(dirname "$DEST")/multi30k-orig}"
  for split in "${SPLITS[@]}"; do
    for lang in "${SRC_LANGS[@]}"; do
      if [[ $CASED -eq 1 ]]; then rel="raw/$split.$lang.gz"; else rel="tok/$split.lc.norm.tok.$lang"; fi
      if [[ -s "$SRC_DIR/$rel" ]]; then log "have $SRC_DIR/$rel"; else log "fetching $URL/$rel"; fetch "$URL/$rel" "$SRC_DIR/$rel"; fi
    done
  done
else
  SRC_DIR="$LOCAL"
  [[ -d "$SRC_DIR" ]] || die "--local $SRC_DIR is not a directory"
fi

find_src() {  # find_src SPLIT LANG -> path of the file to read (plain or .gz)
  local split="$1" lang="$2" d f tried=()
  for d in "$SRC_DIR/$( [[ $CASED -eq 1 ]] && echo raw || echo tok )" "$SRC_DIR"; do
    if [[ $CASED -eq 1 ]]; then set -- "$d/$split.$lang.gz" "$d/$split.$lang"
    else set -- "$d/$split.lc.norm.tok.$lang" "$d/$split.lc.norm.tok.$lang.gz"; fi
    for f in "$@"; do
      [[ -f "$f" ]] && { echo "$f"; return 0; }
      tried+=("$f")
    done
  done
  die "no $split file for '$lang' in $SRC_DIR (looked for: ${tried[*]}; --local DIR: the folder of the task 1 files)"
}

read_src() {  # read_src FILE LIMIT: decompressed text, first LIMIT lines if LIMIT > 0
  local f="$1" n="$2"
  if [[ "$f" == *.gz ]]; then
    gzip -dc -- "$f" || die "cannot decompress $f"
  else
    cat -- "$f"
  fi | awk -v n="$n" 'n == 0 || NR <= n'  # reads to the end: no SIGPIPE, the whole .gz is checked
}

for split in "${SPLITS[@]}"; do  # every input file, before anything is made
  for lang in "${SRC_LANGS[@]}"; do find_src "$split" "$lang" > /dev/null; done
done

WORK="$DEST.partial"
rm -rf "$WORK"
mkdir -p "$WORK/text" "$WORK/bpe" "$WORK/bin"

# ---------------------------------------------------------------- (1) text
for split in "${SPLITS[@]}"; do
  out_split=${OUT_SPLIT[$split]}
  for lang in "${SRC_LANGS[@]}"; do
    f=$(find_src "$split" "$lang")
    log "text: $f -> text/$out_split.$lang"
    if [[ $CASED -eq 1 ]]; then
      # same conventions as the official tok/ files: Moses punctuation normalisation, tokenisation with
      # XML escaping, no aggressive dash splitting (but the case is kept)
      read_src "$f" "${LIMIT[$split]}" \
        | "$PYTHON" -m sacremoses -l "$lang" -j "$WORKERS" -q normalize tokenize -x > "$WORK/text/$out_split.$lang" \
        || die "sacremoses failed on $f"
    else
      read_src "$f" "${LIMIT[$split]}" > "$WORK/text/$out_split.$lang"
    fi
  done
  n_de=$(wc -l < "$WORK/text/$out_split.de"); n_en=$(wc -l < "$WORK/text/$out_split.en")
  [[ $n_de -eq $n_en ]] || die "$split: German and English differ in length ($n_de vs $n_en lines; files $(find_src "$split" de), $(find_src "$split" en))"
  [[ $n_de -gt 0 ]] || die "$split: no sentences in $(find_src "$split" de)"
  # an empty line on either side would be dropped by fairseq-preprocess and misalign the references
  for lang in "${SRC_LANGS[@]}"; do
    empty=$(grep -n -m1 -v '[^[:space:]]' "$WORK/text/$out_split.$lang" | cut -d: -f1 || true)
    [[ -z "$empty" ]] || die "$split: line $empty of $(find_src "$split" "$lang") is empty"
  done
done

# ---------------------------------------------------------------- (2) joint BPE
if [[ "$BPE" == "subword-nmt" ]]; then
  log "bpe: learning $MERGES joint subword-nmt merges on train.de + train.en"
  cat "$WORK/text/train.de" "$WORK/text/train.en" \
    | "$PYTHON" -m subword_nmt.learn_bpe -s "$MERGES" > "$WORK/bpe/codes" 2> "$WORK/bpe/learn_bpe.log" \
    || { cat "$WORK/bpe/learn_bpe.log" >&2; die "subword-nmt learn_bpe failed"; }
  for split in train valid test; do
    for lang in "${SRC_LANGS[@]}"; do
      "$PYTHON" -m subword_nmt.apply_bpe -c "$WORK/bpe/codes" --num-workers "$WORKERS" \
        < "$WORK/text/$split.$lang" > "$WORK/bpe/$split.$lang" || die "subword-nmt apply_bpe failed on text/$split.$lang"
    done
  done
else
  log "bpe: training a joint SentencePiece BPE model (vocab_size=$VOCAB) on train.de + train.en"
  "$PYTHON" - "$WORK" "$VOCAB" <<'EOF' || die "SentencePiece failed"
import os, sys
import sentencepiece as spm
work, vocab = sys.argv[1], int(sys.argv[2])
spm.SentencePieceTrainer.train(
    input=[os.path.join(work, "text", f"train.{l}") for l in ("de", "en")],
    model_prefix=os.path.join(work, "bpe", "spm"), vocab_size=vocab, model_type="bpe",
    character_coverage=1.0, hard_vocab_limit=False, minloglevel=2)
sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "bpe", "spm.model"))
for split in ("train", "valid", "test"):
    for lang in ("de", "en"):
        with open(os.path.join(work, "text", f"{split}.{lang}"), encoding="utf-8") as fin:
            lines = [line.rstrip("\n") for line in fin]
        with open(os.path.join(work, "bpe", f"{split}.{lang}"), "w", encoding="utf-8") as fout:
            for pieces in sp.encode(lines, out_type=str):
                fout.write(" ".join(pieces) + "\n")
EOF
fi

# ---------------------------------------------------------------- (3) binarise both directions
log "fairseq-preprocess de-en (joined dictionary)"
"$PYTHON" -m fairseq_cli.preprocess --source-lang de --target-lang en \
  --trainpref "$WORK/bpe/train" --validpref "$WORK/bpe/valid" --testpref "$WORK/bpe/test" \
  --destdir "$WORK/bin/de-en" --joined-dictionary --workers "$WORKERS" > "$WORK/bin/preprocess.de-en.log" 2>&1 \
  || { tail -20 "$WORK/bin/preprocess.de-en.log" >&2; die "fairseq-preprocess de-en failed"; }
log "fairseq-preprocess en-de (same dictionary)"
"$PYTHON" -m fairseq_cli.preprocess --source-lang en --target-lang de \
  --trainpref "$WORK/bpe/train" --validpref "$WORK/bpe/valid" --testpref "$WORK/bpe/test" \
  --destdir "$WORK/bin/en-de" --joined-dictionary --srcdict "$WORK/bin/de-en/dict.de.txt" \
  --workers "$WORKERS" > "$WORK/bin/preprocess.en-de.log" 2>&1 \
  || { tail -20 "$WORK/bin/preprocess.en-de.log" >&2; die "fairseq-preprocess en-de failed"; }

"$PYTHON" - "$WORK" "$CONFIG" "$TEXT_KIND" "$BPE" "$MERGES" "$VOCAB" "$REMOVE_BPE" "$SRC_DIR" "$CMDLINE" <<'EOF'
import json, os, sys, time
work, config, text_kind, bpe, merges, vocab, remove_bpe, src, cmd = sys.argv[1:]
def n_lines(p):
    with open(p, encoding="utf-8") as f:
        return sum(1 for _ in f)
info = {
    "config": config,
    "text": text_kind,
    "lowercased": text_kind == "lc.norm.tok",
    "bpe": bpe,
    "merges": int(merges) if bpe == "subword-nmt" else None,
    "vocab_size": int(vocab) if bpe == "sentencepiece" else None,
    "remove_bpe": remove_bpe,
    "source": os.path.abspath(src),
    "sentences": {s: n_lines(os.path.join(work, "text", f"{s}.de")) for s in ("train", "valid", "test")},
    "dictionary_size": n_lines(os.path.join(work, "bin", "de-en", "dict.de.txt")),
    "directions": {"de-en": "bin/de-en", "en-de": "bin/en-de"},
    "references": {s: {l: f"text/{s}.{l}" for l in ("de", "en")} for s in ("valid", "test")},
    "command": cmd,
    "created": time.strftime("%Y-%m-%d %H:%M:%S"),
}
with open(os.path.join(work, "prepare.json"), "w", encoding="utf-8") as f:
    json.dump(info, f, indent=2)
EOF

rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$WORK" "$DEST"
log "done: $DEST ($(cat "$DEST/text/train.de" | wc -l) training pairs; dictionary $(wc -l < "$DEST/bin/de-en/dict.de.txt") types)"
