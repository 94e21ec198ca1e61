"""Early stopping and convergence figures shared by the benchmarks (issue 26).

* :class:`Patience`: the early-stopping rule of fairseq 0.12's ``--patience`` (``fairseq_cli.train.
  should_stop_early``) as a small resumable object, for benchmarks that train in-process (the tagging
  benchmark can adopt it: ``stop = patience.step(dev_score)`` after every validation, and
  ``patience.state_dict()`` saved beside the model, ``Patience.from_state(...)`` on resume).  The rule counts
  *validations*, not epochs: a value is an improvement when strictly better than the best so far (lower, or
  higher with ``maximize``); training stops at the P-th validation in a row without one.
* :func:`stop_reason`: why a fairseq-train run ended, from its log and the instrumented wrapper's stats.
* :func:`training_clock`: wall clock and CPU seconds of a training that ran in one or more processes
  (``benchmarks/fairseq_instrumented.py`` stats files), and the cumulative clock of every validation.
* :func:`first_reach`: the first validation of a curve at or beyond a target (time to quality);
  :func:`add_time_to_quality` applies it to a report's rows, against the transformer's best dev score.
* :func:`budget_text`: the sentence every table states ("converged (patience P ...)" or the budget).
"""
import math


class Patience:
    """fairseq's ``--patience`` rule: stop after ``patience`` validations in a row without a strict improvement."""

    def __init__(self, patience, maximize=False):
        self.patience = int(patience)
        self.maximize = bool(maximize)
        self.best = None
        self.best_step = None
        self.num_runs = 0  # validations since the best (fairseq's name)

    def is_better(self, a, b):
        return a > b if self.maximize else a < b

    def step(self, value, step=None):
        """Record one validation's value; True when training should stop (never with patience <= 0)."""
        if value is None:  # no validation this time (fairseq passes None then)
            return False
        if self.best is None or self.is_better(value, self.best):
            self.best, self.best_step, self.num_runs = value, step, 0
            return False
        self.num_runs += 1
        return self.patience > 0 and self.num_runs >= self.patience

    def state_dict(self):
        return {"patience": self.patience, "maximize": self.maximize, "best": self.best,
                "best_step": self.best_step, "num_runs": self.num_runs}

    @classmethod
    def from_state(cls, state):
        p = cls(state["patience"], state["maximize"])
        p.best, p.best_step, p.num_runs = state["best"], state["best_step"], state["num_runs"]
        return p

    @classmethod
    def replay(cls, values, patience, maximize=False):
        """The rule over a list of (step, value): (the step it stops at or None, the object)."""
        p = cls(patience, maximize)
        for step, value in values:
            if p.step(value, step):
                return step, p
        return None, p


def stop_reason(log_info, stats_runs=()):
    """Why the last fairseq-train run ended: ``patience``, ``max_update``, ``max_epoch``, ``time budget``, or
    ``unknown``.  ``log_info`` is :func:`benchmarks.logs.parse_train_log`'s result; ``stats_runs`` the
    instrumented wrapper's stats of each run (their ``stop_reason`` is authoritative for patience)."""
    if any(s.get("stop_reason") == "patience" for s in stats_runs[-1:]):
        return "patience"
    return log_info.get("stop_reason") or ("max_epoch" if log_info.get("finished") else "unknown")


def _run_end(s):
    return (s.get("finished") or s.get("updated") or s["started"]) - s["started"]


def training_clock(stats_runs):
    """Wall clock and CPU of a training over all its processes (stats in run order), and per validation.

    Returns ``{"wall_seconds", "cpu_seconds", "valid_seconds", "validations": {updates: record}}`` where each
    validation record has ``wall_seconds`` (cumulative wall clock of the training processes when the validation
    began, earlier runs included: start-up, validations and work redone after an interruption count) and
    ``train_wall_seconds`` (the same without the time spent in validations, i.e. without the cost of dev
    decoding); a validation repeated after a resume keeps its newest record.
    """
    wall = cpu = valid = 0.0
    per_update = {}
    for s in stats_runs:
        for v in s.get("validations") or []:
            rec = dict(v, wall_seconds=wall + v["elapsed_s"],
                       train_wall_seconds=wall - valid + v["elapsed_s"] - v["valid_seconds_before"],
                       cpu_seconds=cpu + v["cpu_s"])
            per_update[v["updates"]] = rec
        wall += _run_end(s)
        cpu += s.get("cpu_seconds") or 0.0
        valid += s.get("valid_seconds") or 0.0
    return {"wall_seconds": wall, "cpu_seconds": cpu, "valid_seconds": valid, "validations": per_update}


def first_reach(curve, key, target, maximize, clock="train_wall_seconds"):
    """The first point of ``curve`` (dicts in update order) whose ``key`` reaches ``target`` (>= with
    ``maximize``, else <=): ``(updates, its clock value)``, or ``(None, None)`` when never reached."""
    if target is None or (isinstance(target, float) and not math.isfinite(target)):
        return None, None
    for p in curve:
        v = p.get(key)
        if v is None:
            continue
        if (v >= target) if maximize else (v <= target):
            return p["updates"], p.get(clock)
    return None, None


def add_time_to_quality(rows, reference="transformer"):
    """Per row: the training wall clock (validations excluded) at the first validation that reaches the best dev
    score of the ``reference`` slot (``time_to_reference_best_seconds``, None when never reached).  The dev
    score is the per-validation dev BLEU where every row has one (``--dev-bleu``), else the validation NLL
    (comparable across criteria; the loss is not)."""
    ref = next((r for r in rows if r["slot"] == reference), None)
    if ref is None:
        return
    use_bleu = all(r.get("best_dev_bleu") is not None for r in rows)
    key, maximize = ("bleu", True) if use_bleu else ("nll_loss", False)
    values = [p[key] for p in ref["valid_curve"] if p.get(key) is not None]
    if not values:
        return
    target = max(values) if maximize else min(values)
    for r in rows:
        upd, secs = first_reach(r["valid_curve"], key, target, maximize)
        r["time_to_quality"] = {"reference": reference, "metric": "dev BLEU" if use_bleu else "valid nll",
                                "target": target, "updates": upd, "train_wall_seconds": secs}


def budget_text(settings, results=None):
    """What every table states: "converged (patience P ...)" with its bound when every row of ``results``
    stopped by patience, else the early-stopping rule, the bound and how many rows it stopped; or the budget.
    A row carrying its own ``max_update`` (and ``seed``) is named with its bound."""
    parts = []
    if settings.get("max_update"):
        parts.append(f"{settings['max_update']} updates")
    if settings.get("budget_minutes"):
        parts.append(f"{settings['budget_minutes']:g} minutes")
    bound = " or ".join(parts)
    rows = [r for rows in (results or {}).values() for r in rows]
    # rows a merge kept under their own, larger bound (benchmarks/merge.py, --per-row-bounds)
    own = [f"{r['slot']} seed {r['seed']}: {r['max_update']} updates" for r in rows
           if r.get("max_update") and r["max_update"] != settings.get("max_update")]
    if own:
        bound += f" ({', '.join(own)})"
    patience = settings.get("patience") or 0
    if not patience:
        return bound
    rule = (f"patience {patience}: stopped after {patience} validations in a row without a lower "
            f"validation loss), at most {bound}")
    n = sum(r.get("stop_reason") == "patience" for r in rows)
    if rows and n == len(rows):
        return f"converged ({rule}"
    text = f"early stopping ({rule}"
    if rows:
        text += f"; stopped by patience: {n} of {len(rows)}, the others by the bound (not converged)"
    return text
