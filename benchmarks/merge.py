"""One report from several runs of the translation benchmark that share a protocol.

Users train models as separate jobs (one GPU or core each, or a model added to a finished comparison a week
later; a job directory may even be gone while its ``results.json`` survives), so the side-by-side table, the
time to the transformer's best dev score and the summary over seeds must come from their ``results.json``
documents, without retraining or re-decoding anything.  :func:`merge` joins the documents of one seed after
checking that they measured the same thing (:data:`PROTOCOL`: data, sizes, optimiser, stopping rule, bound,
decoding); :func:`merge_all` groups documents by seed and merges each group.
"""
import time

from benchmarks.common import BenchmarkError
from benchmarks.report import describe_machine
from benchmarks.stopping import add_time_to_quality, budget_text

# Settings that must agree for rows to share a table: a row trained or decoded under another value of any of
# these is another experiment.  Paths (--data, --out), --models and execution details that do not change the
# numbers (plots, the interpreter, decode batch size) may differ.
PROTOCOL = ("embed_dim", "ffn_dim", "layers", "heads", "no_share_embeddings", "max_tokens", "lr",
            "warmup_updates", "dropout", "label_smoothing", "weight_decay", "clip_norm", "seed", "max_update",
            "budget_minutes", "patience", "dev_bleu", "dev_bleu_beam", "validate_interval_updates", "average_best",
            "fp16", "train_args", "beam", "lenpen", "lenpen_grid", "eos_penalty_grid", "length_choice",
            "generate_args", "threads")

SLOT_ORDER = ("transformer", "dhmm0", "dhmm0_fast", "dhmm1", "dhmm1_fast", "hnmc", "iohmm")


def _slot_key(slot):
    return (SLOT_ORDER.index(slot), "") if slot in SLOT_ORDER else (len(SLOT_ORDER), slot)


def merge(named_docs, command):
    """``[(name, results.json document), ...]`` of one seed -> one document whose rows are all of theirs.

    ``name`` (a path) identifies a document in errors and in the report's ``sources``.  Every document must be
    complete, hold the same prepared data and the same :data:`PROTOCOL` settings, and no (direction, slot) may
    come from two documents.  Each row's time to the transformer's best dev score is recomputed, per direction:
    the transformer may come from another document."""
    if not named_docs:
        raise BenchmarkError("nothing to merge")
    first_name, first = named_docs[0]
    origin = {}
    results = {}
    for name, doc in named_docs:
        for key in ("settings", "data", "results", "hardware"):
            if key not in doc:
                raise BenchmarkError(f"{name}: not a results.json of scripts/benchmark_translation.py (no '{key}')")
        if not doc.get("complete", False):
            raise BenchmarkError(f"{name}: a partial report (its benchmark was still running); finish it first")
        if doc["data"].get("config") != first["data"].get("config") or \
                doc["data"].get("sentences") != first["data"].get("sentences"):
            raise BenchmarkError(f"{name}: other data ({doc['data'].get('config')}) than {first_name} "
                                 f"({first['data'].get('config')})")
        diff = [k for k in PROTOCOL if doc["settings"].get(k) != first["settings"].get(k)]
        if diff:
            shown = ", ".join(f"{k}={doc['settings'].get(k)!r} (not {first['settings'].get(k)!r})" for k in diff)
            raise BenchmarkError(f"{name}: another protocol than {first_name}: {shown}")
        for direction, rows in doc["results"].items():
            for r in rows:
                key = (direction, r["slot"])
                if key in origin:
                    raise BenchmarkError(f"{direction} {r['slot']} is in both {origin[key]} and {name}; "
                                         "merge one of them")
                origin[key] = name
                row = dict(r)
                row.setdefault("decode_hardware", doc["hardware"])
                results.setdefault(direction, []).append(row)
    for rows in results.values():
        rows.sort(key=lambda r: _slot_key(r["slot"]))
        add_time_to_quality(rows)
    settings = dict(first["settings"])
    settings["models"] = ",".join(dict.fromkeys(r["slot"] for rows in results.values() for r in rows))
    return {
        "complete": True,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": command,
        "sources": [{"path": name, "command": doc["command"], "created": doc.get("created"),
                     "machine": describe_machine(doc["hardware"]),
                     "slots": sorted({r["slot"] for rows in doc["results"].values() for r in rows}, key=_slot_key)}
                    for name, doc in named_docs],
        "settings": settings,
        "budget": budget_text(settings, results),
        "hardware": first["hardware"],
        "data": first["data"],
        "results": results,
    }


def merge_all(named_docs, command):
    """Documents of any seeds -> {seed: merged document}."""
    by_seed = {}
    for name, doc in named_docs:
        seed = doc.get("settings", {}).get("seed")
        if seed is None:
            raise BenchmarkError(f"{name}: not a results.json of scripts/benchmark_translation.py (no seed)")
        by_seed.setdefault(seed, []).append((name, doc))
    return {seed: merge(docs, command) for seed, docs in sorted(by_seed.items())}
