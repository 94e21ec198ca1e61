"""``--lexicon-topk-schedule``: the training K of the direct HMM's lexicon pruning as a function of the update.

A schedule is ``K@U,K@U,...``: from update U on, training scores the lexicon at the K most probable source
positions (0: all of them, the exact likelihood). U is an update count or a percentage of ``--max-update``
(``80%``). The cheap pruned objective for most of training and an exact phase at the end
(``4@0,0@80%``) is the CPU path of docs/speed.md: the final updates train, and validation selects, the
model that decoding uses.

With ``--patience`` the bound may never be reached, so a percentage alone could leave a model pruned to its
end. :func:`advance` moves the next step forward to the update where the validation plateaued (called by
:mod:`hmm_nmt.compat.topk_plateau` when patience would stop a run whose schedule has a step still to come):
the exact phase starts when the pruned one has converged, or at its update, whichever is first.
"""
from typing import List, Tuple

Schedule = List[Tuple[int, int]]  # (first update, K), sorted by update


def parse_topk_schedule(text: str, max_update: int = 0) -> Schedule:
    """``"4@0,0@80%"`` -> ``[(0, 4), (int(0.8 * max_update), 0)]``; ``""`` -> ``[]`` (no schedule)."""
    if not text:
        return []
    flag = "--lexicon-topk-schedule"
    steps = []
    for item in text.split(","):
        k, at, u = item.strip().partition("@")
        if not at:
            raise ValueError(f"{flag}: '{item}' is not K@U (e.g. 4@0,0@80%)")
        try:
            k = int(k)
            if u.endswith("%"):
                pct = float(u[:-1])
                if not 0 <= pct <= 100:
                    raise ValueError
                if not max_update:
                    raise ValueError(f"{flag}: '{item}' is a percentage of --max-update, which is not set")
                u = int(round(max_update * pct / 100.0))
            else:
                u = int(u)
        except ValueError as e:
            if str(e).startswith(flag):
                raise
            raise ValueError(f"{flag}: '{item}' is not K@U with integers K >= 0 and U >= 0 (or U a percentage)") \
                from None
        if k < 0 or u < 0:
            raise ValueError(f"{flag}: '{item}': K and U must be >= 0")
        steps.append((u, k))
    if steps[0][0] != 0:
        raise ValueError(f"{flag}: the first step must start at update 0 (e.g. 4@0,...), got '{text}'")
    if any(b[0] <= a[0] for a, b in zip(steps, steps[1:])):
        raise ValueError(f"{flag}: the updates must increase strictly, got '{text}'")
    return steps


def topk_at(schedule: Schedule, num_updates: int) -> int:
    """K for the update that follows ``num_updates`` completed ones (fairseq's counter)."""
    k = schedule[0][1]
    for start, kk in schedule:
        if num_updates >= start:
            k = kk
    return k


def advance(schedule: Schedule, num_updates: int):
    """The schedule with its next step (the first that starts after ``num_updates`` completed updates) moved to
    start at ``num_updates``, or None when no step is left to come."""
    later = [i for i, (start, _) in enumerate(schedule) if start > num_updates]
    if not later:
        return None
    i = later[0]
    return schedule[:i] + [(num_updates, schedule[i][1])] + schedule[i + 1:]
