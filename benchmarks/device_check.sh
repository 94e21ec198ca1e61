#!/usr/bin/env bash
# The GPU check (docs/gpu.md), sized for 8 minutes on one H100 with 16 cores: the device, then
#   tagger        hnmc_cn_tagger on CoNLL-2000 chunking, fairseq-train --amp, 300 updates
#   m30k-amp-1/0  transformer_dhmm first and zero order on Multi30k de-en, --amp, 300 updates each
#   m30k-fp16-1   the first order with --fp16, 100 updates
#   hansards      hmm-nmt-align-corpus with its defaults (scripts/align_benchmark.py, one seed, eflomal beside it
#                 when installed) on a fixed slice: the 37 trial + 447 test gold pairs, then the first 100,000
#                 training pairs; stage times from the model directory's manifest, AER from the results file
# and prints one table. Each step runs under `timeout` within one budget (BUDGET seconds, default 460); the
# Hansards run takes what is left. A failed step is a row of the table (its log named), not the end.
#
#   bash benchmarks/device_check.sh [--data DIR] [--work DIR] [--out FILE]
#
# --data: the folder holding hansards_enfr/, multi30k/ and conll2000/ (default ../shared/data beside the repo);
# --work: scratch folder (default runs/device-check, emptied first; another must be new or empty);
# --out:  the results JSON (default WORK/device_check.json). PYTHON: default .venv/bin/python (make install).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
BUDGET=${BUDGET:-460}
DATA="$REPO/../shared/data" WORK="" OUT=""
LINES=100000  # the Hansards training slice: fixed, so runs compare
die() { echo "device_check.sh: error: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="${2:?--data needs a folder}"; shift 2 ;;
    --work) WORK="${2:?--work needs a folder}"; shift 2 ;;
    --out) OUT="${2:?--out needs a file}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
for f in hansards_enfr/gold/enfr.src-tgt hansards_enfr/gold/enfr.gold hansards_enfr/gold/trial/trial.e \
         hansards_enfr/gold/trial/trial.f hansards_enfr/gold/trial/trial.align hansards_enfr/train/isi_train.e.gz \
         hansards_enfr/train/isi_train.f.gz conll2000/train.txt.gz \
         multi30k/{train,val,test_2016_flickr}.lc.norm.tok.{de,en}.gz; do
  [[ -f "$DATA/$f" ]] || die "$DATA/$f not found (--data DIR: the folder holding hansards_enfr, multi30k, conll2000)"
done
[[ -x "$PYTHON" ]] || die "$PYTHON not found (run make install, or set PYTHON)"
ALIGNER="$(dirname "$PYTHON")/hmm-nmt-align-corpus"  # the one scripts/align_benchmark.py runs
[[ -x "$ALIGNER" ]] || die "$ALIGNER not found (make install)"
if [[ -z "$WORK" ]]; then WORK="$REPO/runs/device-check"; rm -rf "$WORK"
elif [[ -n "$(ls -A "$WORK" 2>/dev/null)" ]]; then die "--work $WORK is not empty (a timing check starts fresh)"; fi
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd) OUT=${OUT:-$WORK/device_check.json}
export PYTHON REPO DATA WORK LINES PYTHONPATH="$REPO:$REPO/alignment${PYTHONPATH:+:$PYTHONPATH}"
now() { date +%s.%N; }  # not $EPOCHREALTIME: its decimal point follows the locale
T0=$(now)

# (a) the device: the other steps mean nothing without CUDA
{ { command -v nvidia-smi > /dev/null && nvidia-smi -L; } || echo "nvidia-smi: not found"
  "$PYTHON" -c 'import sys, torch
if not torch.cuda.is_available():
    sys.exit("device_check.sh: error: torch sees no CUDA device: this check is for a GPU machine")
c = torch.cuda
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}): {c.device_count()} x {c.get_device_name(0)}, "
      f"bf16 {c.is_bf16_supported()}")'; } 2>&1 | tee "$WORK/device.log"

step() {  # step NAME CAP WHAT CMD...: CMD under timeout (CAP s, or what the budget has left), one line in steps.tsv
  local name=$1 cap=$2 what=$3 rc=0 t0; shift 3
  local left; left=$(awk -v b="$BUDGET" -v t0="$T0" -v t="$(now)" 'BEGIN { printf "%d", b - (t - t0) }')
  (( cap < left )) || cap=$left
  if (( cap < 15 )); then  # too little left to start fairseq
    printf '%s\t%s\t%s\t0\t0\t%s\n' "$name" skipped "$what" "$cap" >> "$WORK/steps.tsv"; return
  fi
  echo "[device_check $(date +%H:%M:%S)] $name: $what (at most ${cap}s; log $WORK/$name.log)" >&2
  t0=$(now)
  timeout -k 15 "$cap" "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$what" "$t0" "$(now)" "$cap" >> "$WORK/steps.tsv"
}

prep_hansards() {  # the gold pairs first, then the slice, normalized to one form (examples/alignment/hansards.sh)
  set -euo pipefail
  local n=$WORK/hansards-text en fr
  "$PYTHON" "$REPO/examples/hansards/normalize.py" gold --local "$DATA/hansards_enfr" --out "$n"
  "$PYTHON" "$REPO/examples/hansards/normalize.py" train --lang en --lines "$LINES" \
    "$DATA/hansards_enfr/train/isi_train.e.gz" "$n/train.en" & en=$!
  "$PYTHON" "$REPO/examples/hansards/normalize.py" train --lang fr --lines "$LINES" \
    "$DATA/hansards_enfr/train/isi_train.f.gz" "$n/train.fr" & fr=$!
  wait "$en"; wait "$fr"
  for side in en fr gold; do cat "$n/trial.$side" "$n/test.$side" > "$n/gold.$side"; done
}
export -f prep_hansards

# the data, on the CPUs, while the tagger (which reads its text directly) uses the GPU
step prep-hansards 150 "Hansards gold + first $LINES training pairs, normalized" bash -c prep_hansards &
HANS=$!
step prep-m30k 150 "Multi30k de-en: 2,000 joint BPE merges, binarized (examples/multi30k/prepare.sh)" \
  "$REPO/examples/multi30k/prepare.sh" --local "$DATA/multi30k" --dest "$WORK/multi30k" --merges 2000 --workers 8 &
M30K=$!

# (d) a tagger on CUDA
step tagger 60 "hnmc_cn_tagger, CoNLL-2000 chunking, --amp, 300 updates" \
  "$PYTHON" -m fairseq_cli.train "$WORK" --user-dir "$REPO/hmm_nmt" --task sequence_tagging \
  --train-file "$DATA/conll2000/train.txt.gz" --dev-fraction 0.1 --dev-seed 1 --tag-column 2 --arch hnmc_cn_tagger \
  --embed-dim 50 --hidden-size 32 --lr 0.05 --criterion tagging_cross_entropy --decoding viterbi --optimizer adam \
  --batch-size 32 --max-update 300 --no-save --save-dir "$WORK/ckpt" --best-checkpoint-metric chunk_f1 \
  --maximize-best-checkpoint-metric --num-workers 0 --log-format json --log-interval 50 --no-progress-bar --seed 1 --amp

# (c) the direct HMM in mixed precision: the recipe's GPU size (examples/multi30k/run.sh) at 2,000 merges
m30k() {  # m30k NAME ARCH UPDATES PRECISION-FLAG
  step "$1" 75 "$2, Multi30k de-en, $4, $3 updates" "$PYTHON" -m fairseq_cli.train "$WORK/multi30k/bin/de-en" \
    --user-dir "$REPO/hmm_nmt" --arch "$2" --share-all-embeddings --encoder-layers 3 --decoder-layers 3 \
    --encoder-embed-dim 256 --decoder-embed-dim 256 --encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 \
    --encoder-attention-heads 4 --decoder-attention-heads 4 --dropout 0.3 \
    --criterion dhmm_label_smoothed_cross_entropy --label-smoothing 0.1 --optimizer adam --adam-betas '(0.9,0.98)' \
    --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 100 --max-tokens 4096 --max-update "$3" --seed 1 \
    --no-save --save-dir "$WORK/ckpt" --num-workers 0 --log-format json --log-interval 50 --no-progress-bar "$4"
}
wait $M30K || true
m30k m30k-amp-1 transformer_dhmm_first_order 300 --amp
m30k m30k-amp-0 transformer_dhmm 300 --amp
m30k m30k-fp16-1 transformer_dhmm_first_order 100 --fp16

# (b) the aligner with its defaults: both directions on the one GPU (one GPU each with two or more)
RUNS=0; "$PYTHON" -c 'import eflomal' 2>/dev/null && RUNS=1
N=$WORK/hansards-text
wait $HANS || true
step hansards 600 "hmm-nmt-align-corpus defaults, 484 gold + $LINES pairs (eflomal runs: $RUNS)" \
  "$PYTHON" "$REPO/scripts/align_benchmark.py" --name hansards-enfr-slice --work "$WORK/hansards" \
  --gold-src "$N/gold.en" --gold-tgt "$N/gold.fr" --gold "$N/gold.gold" --gold-one-based --dev-pairs 37 \
  --train-src "$N/train.en" --train-tgt "$N/train.fr" --seeds 1 --eflomal-runs "$RUNS" \
  --results "$WORK/hansards.json" --data-note "Hansards trial (37) + test (447) gold + the first $LINES ISI pairs"

# (e) one table, one JSON
"$PYTHON" - "$WORK" "$OUT" "$BUDGET" <<'EOF'
import json, os, re, sys, time
work, out, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])

def last(log, tag):  # the last `| train |` / `| valid |` record of a fairseq-train --log-format json log
    recs = re.findall(r"\| %s \| (\{.*\})" % tag, open(log, encoding="utf-8", errors="replace").read())
    return json.loads(recs[-1]) if recs else {}

def fairseq(log):
    t, v = last(log, "train"), last(log, "valid")
    keys = ("train_loss", "train_ups", "valid_loss", "valid_chunk_f1")
    res = {k: float(x[k]) for x in (t, v) for k in keys if k in x}
    res["updates"] = int(t.get("train_num_updates", 0))
    text = f"{res['updates']} updates, {res.get('train_ups', 0):.1f} upd/s, train loss {res.get('train_loss', 'n/a')}"
    text += f", valid loss {res['valid_loss']}" if "valid_loss" in res else ""
    return res, text + (f", dev chunk F1 {res['valid_chunk_f1']}" if "valid_chunk_f1" in res else "")

def hansards():
    m = os.path.join(work, "hansards", "hmm.1", "manifest.json")
    times = json.load(open(m))["times"] if os.path.exists(m) else {}
    res = {"stages_wall_s": {k: round(v["wall_s"], 1) for k, v in times.items()}}
    text = ", ".join(f"{k} {v:.0f}s" for k, v in res["stages_wall_s"].items())
    path = os.path.join(work, "hansards.json")
    if os.path.exists(path):
        for row in json.load(open(path))["systems"]:
            sc = row["scores"]
            res[row["system"]] = {"test_aer": sc["test"]["AER"], "trial_aer": sc["dev"]["AER"], "wall_s": row["wall_s"]}
        h = res.get("hmm-nmt-align-corpus", {})
        text = f"test AER {h.get('test_aer')} (trial {h.get('trial_aer')}); {text}"
        if "eflomal" in res:
            text += f"; eflomal test AER {res['eflomal']['test_aer']}, {res['eflomal']['wall_s']:.0f}s"
    return res, text

device = open(os.path.join(work, "device.log")).read().strip()
rows, steps = [("device", "nvidia-smi -L, torch", "", device.replace("\n", "; "))], []
for line in open(os.path.join(work, "steps.tsv"), encoding="utf-8"):
    name, rc, what, t0, t1, cap = line.rstrip("\n").split("\t")
    log, wall = os.path.join(work, name + ".log"), float(t1) - float(t0)
    res, text = {}, "ok"
    try:
        if rc == "skipped":
            pass
        elif name == "hansards":
            res, text = hansards()
        elif not name.startswith("prep"):
            res, text = fairseq(log)
    except (OSError, ValueError, KeyError) as e:
        text = f"unreadable log ({e})"
    status = "ok" if rc == "0" else "skipped (budget spent)" if rc == "skipped" else \
        f"timed out after {cap}s" if rc in ("124", "137") else f"failed (exit {rc})"
    if rc == "skipped":
        text = status
    elif status != "ok":
        text = f"{status}, log {log}" + (f"; {text}" if res else "")
    rows.append((name, what, f"{wall:.0f}" if rc != "skipped" else "", text))
    steps.append({"step": name, "what": what, "status": status, "wall_s": round(wall, 1), "log": log, **res})
print("\n| step | what | wall s | result |\n| --- | --- | ---: | --- |")
print("\n".join("| " + " | ".join(r) + " |" for r in rows))
json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "device": device, "budget_s": budget, "steps": steps},
          open(out, "w"), indent=1)
print(f"\n{out}")
EOF
