#!/bin/bash
# carry.sh save RUN CARRY | carry.sh restore CARRY RUN
# Sessions may start on a new machine where runs/ (ignored by git) is gone. `save` copies what a benchmark
# needs to resume and decode into CARRY, a directory git does not ignore (so a session's uncommitted work can
# carry it): every job's logs and JSON, its checkpoint_last.pt whole (Adam state included: the resumed run
# continues exactly) and its checkpoint_best.pt without the optimizer state (decoding needs the weights only),
# both renamed *.pt.carry since *.pt is ignored. `restore` puts them back. Never commit CARRY (about 21 MB
# per d=128 job).
set -euo pipefail
mode=${1:?save or restore}; src=${2:?}; dst=${3:?}
PY=${PY:-.venv/bin/python}
case "$mode" in
  save)
    mkdir -p "$dst"
    tar -C "$src" --exclude='*.pt' --exclude='superseded-*' -cf - . | tar -C "$dst" -xf -
    find "$src" -path '*/checkpoints/checkpoint_last.pt' | while read -r last; do
      rel=${last#"$src"/}; out="$dst/$rel.carry"; mkdir -p "$(dirname "$out")"
      cp "$last" "$out.tmp" && mv "$out.tmp" "$out"
      best=$(dirname "$last")/checkpoint_best.pt
      [[ -f "$best" ]] && "$PY" - "$best" "$dst/${best#"$src"/}.carry" <<'PYEOF'
import os, sys, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
state["last_optimizer_state"] = None  # weights, args, extra state: enough to decode
torch.save(state, sys.argv[2] + ".tmp")
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
PYEOF
      echo "carry.sh: saved $(dirname "$rel")"
    done ;;
  restore)
    mkdir -p "$dst"
    tar -C "$src" --exclude='*.pt.carry' -cf - . | tar -C "$dst" -xf -
    find "$src" -name '*.pt.carry' | while read -r c; do
      rel=${c#"$src"/}; out="$dst/${rel%.carry}"; mkdir -p "$(dirname "$out")"
      [[ -e "$out" ]] && { echo "carry.sh: $out exists, kept" >&2; continue; }
      cp "$c" "$out.tmp" && mv "$out.tmp" "$out"; echo "carry.sh: restored $rel"
    done ;;
  *) echo "carry.sh: unknown mode '$mode' (save or restore)" >&2; exit 2 ;;
esac
