"""Parsing what fairseq writes: training logs (``--log-format json``) and fairseq-generate's output."""
import json
import os
import re

from benchmarks.common import BenchmarkError

# fairseq's progress records with --log-format json: "... | train_inner | {...}"
RECORD_RE = re.compile(r"\|\s*(train_inner|train|valid)\s*\|\s*(\{.*\})\s*$")
PARAMS_RE = re.compile(r"num\. shared model params: ([\d,]+) \(num\. trained: ([\d,]+)\)")
LOADED_RE = re.compile(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)")
SAVED_RE = re.compile(r"Saved checkpoint \S+ \(epoch \d+ @ (\d+) updates")
DONE_RE = re.compile(r"done training in ([\d.]+) seconds")
# why fairseq-train stopped (fairseq_cli/train.py); ending max_epoch prints nothing of its own
STOP_RES = (("patience", re.compile(r"early stop since valid performance hasn't improved")),
            ("max_update", re.compile(r"Stopping training due to num_updates")),
            ("time budget", re.compile(r"Stopping training due to cumulative_training_time")))
TRANSLATED_RE = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)
HYPO_RE = re.compile(r"^H-(\d+)\t(\S+)\t?(.*)$")
P_RE = re.compile(r"^P-(\d+)\t(.*)$")


def num(x):
    """fairseq json logs print numbers as strings."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def parse_train_log(path):
    """Everything the benchmark needs from a (possibly appended-to, multi-run) fairseq-train log."""
    info = {"params": None, "params_trained": None, "valid": {}, "updates": 0, "epoch": 0,
            "runs": 0, "resumed_from": [], "saved_updates": 0, "finished": False, "last_train_inner": None,
            "stop_reason": None,
            "train_epochs": {}}
    if not os.path.exists(path):
        return info
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = PARAMS_RE.search(line)
            if m:
                info["params"] = int(m.group(1).replace(",", ""))
                info["params_trained"] = int(m.group(2).replace(",", ""))
                info["runs"] += 1
                info["finished"] = False  # a new run started after any earlier "done"
                info["stop_reason"] = None
                continue
            m = LOADED_RE.search(line)
            if m:
                info["resumed_from"].append(int(m.group(2)))
                continue
            m = SAVED_RE.search(line)
            if m:
                info["saved_updates"] = max(info["saved_updates"], int(m.group(1)))
                continue
            if DONE_RE.search(line):
                info["finished"] = True
                if info["stop_reason"] is None:
                    info["stop_reason"] = "max_epoch"
                continue
            for reason, rx in STOP_RES:
                if rx.search(line) and info["stop_reason"] != "patience":  # both at once: patience said more
                    info["stop_reason"] = reason
            m = RECORD_RE.search(line)
            if not m:
                continue
            tag = m.group(1)
            try:
                rec = json.loads(m.group(2))
            except json.JSONDecodeError:
                continue  # a line cut by an interruption
            if tag == "valid":
                upd = num(rec.get("valid_num_updates"))
                if upd is None:
                    continue
                # a resumed run repeats the validations after its checkpoint: keep the newest
                info["valid"][int(upd)] = {
                    "updates": int(upd),
                    "epoch": int(num(rec.get("epoch")) or 0),
                    "loss": num(rec.get("valid_loss")),
                    "nll_loss": num(rec.get("valid_nll_loss")),
                    "ppl": num(rec.get("valid_ppl")),
                    "bleu": num(rec.get("valid_bleu")),  # with --eval-bleu (benchmark --dev-bleu)
                }
            else:
                key = "num_updates" if tag == "train_inner" else "train_num_updates"
                upd = num(rec.get(key))
                if upd is not None:  # the newest record is the newest state, also after a resume
                    info["updates"] = int(upd)
                info["epoch"] = int(num(rec.get("epoch")) or info["epoch"])
                if tag == "train_inner":
                    info["last_train_inner"] = rec
                elif upd is not None:  # end of an epoch; a resumed run may repeat one: keep the newest
                    info["train_epochs"][int(num(rec.get("epoch")) or 0)] = {
                        "epoch": int(num(rec.get("epoch")) or 0), "updates": int(upd),
                        "wps": num(rec.get("train_wps")), "ppl": num(rec.get("train_ppl")),
                        "loss": num(rec.get("train_loss"))}
    info["valid_curve"] = [info["valid"][k] for k in sorted(info["valid"])]
    del info["valid"]
    info["train_epochs"] = [info["train_epochs"][k] for k in sorted(info["train_epochs"])]
    return info


def parse_generate_output(stdout_path, n_expected):
    """Hypotheses in test-set order from fairseq-generate's H- lines (after --remove-bpe)."""
    hyps = {}
    with open(stdout_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = HYPO_RE.match(line.rstrip("\n"))
            if m:
                hyps[int(m.group(1))] = m.group(3)
    missing = [i for i in range(n_expected) if i not in hyps]
    extra = [i for i in hyps if i >= n_expected]
    if missing or extra:
        raise BenchmarkError(
            f"{stdout_path}: expected hypotheses for sentences 0..{n_expected - 1}, "
            f"missing {missing[:10]}{'...' if len(missing) > 10 else ''} "
            f"({len(missing)} in all), unexpected ids {extra[:10]}"
        )
    return [hyps[i] for i in range(n_expected)]


def parse_generate_speed(*paths):
    """fairseq-generate's own timing line (it logs to stdout or stderr depending on the logging set-up)."""
    found = None
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = TRANSLATED_RE.search(line)
                if m:
                    found = m
    if found is None:
        raise BenchmarkError(f"{', '.join(paths)}: no 'Translated N sentences ...' line from fairseq-generate")
    return {
        "decode_sentences": int(found.group(1).replace(",", "")),
        "decode_tokens": int(found.group(2).replace(",", "")),
        "decode_seconds": float(found.group(3)),
        "decode_sentences_per_second": float(found.group(4)),
        "decode_tokens_per_second": float(found.group(5)),
    }


def parse_nbest(path, n_expected):
    """fairseq-generate's H-/P- lines -> per sentence a list of (text, normalised score, length incl. EOS)."""
    nbest, pending = {}, {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = HYPO_RE.match(line)
            if m:
                pending[int(m.group(1))] = (m.group(3), float(m.group(2)))
                continue
            m = P_RE.match(line)
            if m:
                i = int(m.group(1))
                text, sc = pending.pop(i)
                nbest.setdefault(i, []).append((text, sc, len(m.group(2).split())))
    missing = [i for i in range(n_expected) if i not in nbest]
    if missing or len(nbest) != n_expected:
        raise SystemExit(f"tune_lenpen.py: {path}: expected n-best lists for sentences 0..{n_expected - 1}, "
                         f"missing {missing[:10]} ({len(missing)} in all)")
    return [nbest[i] for i in range(n_expected)]
