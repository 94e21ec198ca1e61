#!/bin/bash
# carry.sh save RUN CARRY | carry.sh restore CARRY RUN
# Sessions may start on a new machine where runs/ (ignored by git) is gone. `save` copies what a benchmark
# needs to resume and decode into CARRY, a directory git does not ignore (so a session's uncommitted work can
# carry it): every job's logs and JSON, its checkpoint_last.pt whole (Adam state included: the resumed run
# continues exactly) and its checkpoint_best.pt without the optimizer state (decoding needs the weights only),
# cut into 16 MB parts (*.pt.carry.000, .001, ...). Nothing in CARRY may match .gitignore: a work tree recovered
# from a cut-off session brings back untracked files but not ignored ones, and the thirteenth and fourteenth
# sessions' ladder checkpoints were lost that way (they lay in a checkpoints/ folder, which .gitignore names;
# their logs beside it came back). So checkpoints/ goes out as checkpoints.carry/, and `save` refuses to finish
# while git would ignore anything it wrote. `restore` joins the parts (or takes a whole *.pt.carry, or a
# checkpoints/ folder, of an older carry) and puts them back. Never commit CARRY (about 21 MB per d=128 job,
# 120 MB per ladder job).
set -euo pipefail
mode=${1:?save or restore}; src=${2:?}; dst=${3:?}
PY=${PY:-.venv/bin/python}
parts() {  # parts FILE OUT: OUT.000, OUT.001, ... of 16 MB, replacing any older parts or whole copy of OUT
  local tmp; tmp=$(mktemp -d "$(dirname "$2")/.parts.XXXXXX")
  split -b 16M -d -a 3 "$1" "$tmp/p."
  rm -f "$2" "$2".[0-9][0-9][0-9]
  for p in "$tmp"/p.*; do mv "$p" "$2.${p##*/p.}"; done
  rmdir "$tmp"
}

case "$mode" in
  save)
    mkdir -p "$dst"
    tar -C "$src" --exclude='*.pt' --exclude=checkpoints --exclude='superseded-*' -cf - . | tar -C "$dst" -xf -
    find "$src" -path '*/checkpoints/checkpoint_last.pt' | while read -r last; do
      rel=${last#"$src"/}; rel=${rel%/checkpoints/*}/checkpoints.carry
      out="$dst/$rel/checkpoint_last.pt.carry"; mkdir -p "$dst/$rel"
      rm -rf "$dst/${rel%.carry}"  # an older carry's ignored checkpoints/
      parts "$last" "$out"
      best=$(dirname "$last")/checkpoint_best.pt; bout="$dst/$rel/checkpoint_best.pt.carry"
      [[ -f "$best" ]] && "$PY" - "$best" "$bout.whole" <<'PYEOF'
import os, sys, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
state["last_optimizer_state"] = None  # weights, args, extra state: enough to decode
torch.save(state, sys.argv[2] + ".tmp")
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
PYEOF
      [[ -f "$best" ]] && parts "$bout.whole" "$bout" && rm "$bout.whole"
      echo "carry.sh: saved $(dirname "$rel")"
    done
    if git -C "$dst" rev-parse --git-dir >/dev/null 2>&1; then
      ignored=$(cd "$dst" && find . -type f | git check-ignore --stdin || true)
      if [[ -n "$ignored" ]]; then
        echo "carry.sh: git ignores these files in $dst, so a recovered work tree would lose them:" >&2
        echo "$ignored" | head -20 >&2; exit 1
      fi
    fi ;;
  restore)
    mkdir -p "$dst"
    tar -C "$src" --exclude='*.pt.carry' --exclude='*.pt.carry.[0-9][0-9][0-9]' --exclude=checkpoints.carry -cf - . | tar -C "$dst" -xf -
    find "$src" \( -name '*.pt.carry' -o -name '*.pt.carry.000' \) | while read -r c; do
      c=${c%.000}; rel=${c#"$src"/}; rel=${rel/checkpoints.carry\//checkpoints/}
      out="$dst/${rel%.carry}"; mkdir -p "$(dirname "$out")"
      [[ -e "$out" ]] && { echo "carry.sh: $out exists, kept" >&2; continue; }
      if [[ -f "$c.000" ]]; then cat "$c".[0-9][0-9][0-9] > "$out.tmp"; else cp "$c" "$out.tmp"; fi
      mv "$out.tmp" "$out"; echo "carry.sh: restored $rel"
    done ;;
  *) echo "carry.sh: unknown mode '$mode' (save or restore)" >&2; exit 2 ;;
esac
