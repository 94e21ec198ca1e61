"""What the user sees while a benchmark runs: status lines, durations and the ETA of the whole benchmark."""
import math
import sys

from tqdm import tqdm


def say(msg):
    """A status line on stderr, where the progress bars are, without breaking a bar."""
    tqdm.write(msg, file=sys.stderr)


def fmt_duration(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def estimate_remaining(jobs, measured, budget_minutes, current, current_left, current_total=None):
    """Seconds left for the whole benchmark, and whether part of it could not be estimated yet.

    ``jobs`` are the benchmark's (direction, slot) pairs in order, ``measured`` maps a job to the seconds
    actually spent on its ``train`` / ``decode`` stages.  ``current`` is the (direction, slot) being worked
    on, with ``current_left`` seconds of training left (``current_total``: its whole expected training time,
    if known).  Pending trainings are estimated by the budget, else by the trainings measured so far (or the
    current one); decodings by those measured.
    """
    train_times = [v["train"] for v in measured.values() if "train" in v]
    dec_times = [v["decode"] for v in measured.values() if "decode" in v]
    if train_times:
        per_train = sum(train_times) / len(train_times)
    else:
        per_train = current_total
    if budget_minutes:
        per_train = budget_minutes * 60.0 if per_train is None else max(per_train, budget_minutes * 60.0)
    per_decode = sum(dec_times) / len(dec_times) if dec_times else None
    left, unknown = current_left, False
    for job in jobs[jobs.index(current):]:
        done = measured.get(job, {})
        if job != current and "train" not in done:
            left += per_train or 0.0
            unknown |= per_train is None
        if "decode" not in done:
            left += per_decode or 0.0
            unknown |= per_decode is None
    return left, unknown


def eta_text(left, unknown):
    """``~1m05s`` for an estimate, ``>1m05s`` when part of the remaining work could not be estimated yet."""
    return f"{'>' if unknown else '~'}{fmt_duration(left)}"
