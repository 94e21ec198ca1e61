"""One report from several runs of the translation benchmark that share a protocol.

Users train models as separate jobs (one GPU or core each, or a model added to a finished comparison a week
later; a job directory may even be gone while its ``results.json`` survives), so the side-by-side table, the
time to the transformer's best dev score and the summary over seeds must come from their ``results.json``
documents, without retraining or re-decoding anything.  :func:`merge` joins the documents of one seed after
checking that they measured the same thing (:data:`PROTOCOL`: data, sizes, optimiser, stopping rule, bound,
decoding); :func:`merge_all` groups documents by seed and merges each group.

A bound raised on one job (``--max-update`` 24000 -> 30000 on a model still improving) does not by itself make
another experiment: a row that patience stopped at or before the smallest bound of the merge, and whose schedule
does not scale with the bound (no ``--lexicon-topk-schedule`` percentage), trained exactly as it would have under
that smaller bound (the learning rate is ``inverse_sqrt``, which ignores the bound).  :func:`_common_bound` admits
such rows and reports the table under the smallest bound; any other row under a larger bound is refused, unless
the caller asks for per-row bounds (typically a model patience stopped past the others' bound): such a row then
keeps its own ``max_update`` (and its seed), which the budget sentence names.
"""
import time

from benchmarks.common import BenchmarkError
from benchmarks.report import describe_machine
from benchmarks.slots import bound_scaled_args
from benchmarks.stopping import add_time_to_quality, budget_text

# Settings that must agree for rows to share a table: a row trained or decoded under another value of any of
# these is another experiment.  Paths (--data, --out), --models and execution details that do not change the
# numbers (plots, the interpreter, decode batch size) may differ.
PROTOCOL = ("embed_dim", "ffn_dim", "layers", "heads", "no_share_embeddings", "max_tokens", "lr",
            "warmup_updates", "dropout", "label_smoothing", "weight_decay", "clip_norm", "seed",
            "budget_minutes", "patience", "dev_bleu", "dev_bleu_beam", "validate_interval_updates", "average_best",
            "fp16", "train_args", "beam", "lenpen", "lenpen_grid", "eos_penalty_grid", "length_choice",
            "generate_args", "threads")

SLOT_ORDER = ("transformer", "dhmm0", "dhmm0_fast", "dhmm0_sep", "dhmm1", "dhmm1_fast", "dhmm1_sep", "hnmc",
              "iohmm")


def _slot_key(slot):
    return (SLOT_ORDER.index(slot), "") if slot in SLOT_ORDER else (len(SLOT_ORDER), slot)


def _bound_free(row, bound):
    """Why ``row`` (trained under a larger bound) would differ under ``bound``, or None when it would not."""
    if row.get("stop_reason") != "patience":
        return f"stopped by {row.get('stop_reason') or 'an unknown reason'}, not by patience"
    if (row.get("updates") or 0) > bound:
        return f"trained {row['updates']} updates, past {bound}"
    scaled = bound_scaled_args(row.get("extra_args"))
    if scaled:
        return f"its schedule is a fraction of the bound ({' '.join(scaled)})"
    return None


def _common_bound(named_docs, per_row=False):
    """``(bound, own)``: the ``max_update`` the merged table states, the one bound of all documents or the
    smallest when every row trained under a larger one is bound-free (:func:`_bound_free`); else
    :class:`BenchmarkError`, or with ``per_row`` the rows that keep their own bound in ``own``
    ({(direction, slot): bound})."""
    bounds = {name: doc["settings"].get("max_update") or 0 for name, doc in named_docs}
    own = {}
    if len(set(bounds.values())) == 1:
        return next(iter(bounds.values())), own
    if 0 in bounds.values():  # an unbounded (time-budget) run is another stopping rule
        name = next(n for n, b in bounds.items() if b == 0)
        raise BenchmarkError(f"{name}: another protocol: no max_update bound, the others have one")
    bound = min(bounds.values())
    for name, doc in named_docs:
        if bounds[name] == bound:
            continue
        for direction, rows in doc["results"].items():
            for r in rows:
                why = _bound_free(r, bound)
                if why and per_row:
                    own[(direction, r["slot"])] = bounds[name]
                elif why:
                    raise BenchmarkError(
                        f"{name}: another protocol: max_update={bounds[name]} (not {bound}), and its {direction} "
                        f"{r['slot']} {why}, so it may differ from a run bounded at {bound} (--per-row-bounds "
                        "keeps it with its own bound stated)")
    return bound, own


def merge(named_docs, command, per_row_bounds=False):
    """``[(name, results.json document), ...]`` of one seed -> one document whose rows are all of theirs.

    ``name`` (a path) identifies a document in errors and in the report's ``sources``.  Every document must be
    complete, hold the same prepared data and the same :data:`PROTOCOL` settings, and no (direction, slot) may
    come from two documents.  Each row's time to the transformer's best dev score is recomputed, per direction:
    the transformer may come from another document.  ``per_row_bounds``: see :func:`_common_bound`."""
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
    bound, own = _common_bound(named_docs, per_row_bounds)
    for direction, rows in results.items():
        for r in rows:
            if (direction, r["slot"]) in own:
                r.update(max_update=own[(direction, r["slot"])], seed=first["settings"]["seed"])
        rows.sort(key=lambda r: _slot_key(r["slot"]))
        add_time_to_quality(rows)
    settings = dict(first["settings"], max_update=bound)
    settings["models"] = ",".join(dict.fromkeys(r["slot"] for rows in results.values() for r in rows))
    return {
        "complete": True,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": command,
        "sources": [{"path": name, "command": doc["command"], "created": doc.get("created"),
                     "machine": describe_machine(doc["hardware"]), "max_update": doc["settings"].get("max_update"),
                     "slots": sorted({r["slot"] for rows in doc["results"].values() for r in rows}, key=_slot_key),
                     "own_bound": sorted({slot for (d, slot) in own if origin[(d, slot)] == name},
                                         key=_slot_key)}
                    for name, doc in named_docs],
        "settings": settings,
        "budget": budget_text(settings, results),
        "hardware": first["hardware"],
        "data": first["data"],
        "results": results,
    }


def merge_all(named_docs, command, per_row_bounds=False):
    """Documents of any seeds -> {seed: merged document}."""
    by_seed = {}
    for name, doc in named_docs:
        seed = doc.get("settings", {}).get("seed")
        if seed is None:
            raise BenchmarkError(f"{name}: not a results.json of scripts/benchmark_translation.py (no seed)")
        by_seed.setdefault(seed, []).append((name, doc))
    return {seed: merge(docs, command, per_row_bounds) for seed, docs in sorted(by_seed.items())}
