"""``--lr-scheduler budget_linear``: linear warm-up, then a linear decay to 0 at whichever budget runs out first,
``--total-num-update`` updates or ``--budget-hours`` hours of training.

fairseq's ``polynomial_decay`` (power 1) decays by updates only, so a run stopped by ``--stop-time-hours`` ends
with the learning rate wherever the update count left it. Here the fraction of the budget spent is
``max((updates - warmup) / (total - warmup), (hours - start) / budget)`` and the rate is ``lr * (1 - fraction)``:
a time-limited run (``--budget-hours H --stop-time-hours H``) ends annealed, as a run of the right
``--max-update`` would. Without ``--budget-hours`` it is ``polynomial_decay --power 1 --end-learning-rate 0``,
update for update.

The hours are the scheduler's own clock: the wall time since the process started, kept in the checkpoint
(``state_dict``) so that a resumed run continues it (time between runs is not counted, as in fairseq's own
cumulative training time, which ``--stop-time-hours`` reads). ``--budget-start-hours`` is the clock's value where
the budget starts: 0 for a new model, the checkpoint's clock when training a finished model further.
"""
import time
from dataclasses import dataclass, field
from typing import List

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

STARTED = time.monotonic()


@dataclass
class BudgetLinearConfig(FairseqDataclass):
    warmup_updates: int = field(default=0, metadata={"help": "warm the learning rate up linearly for N updates"})
    total_num_update: float = field(default=II("optimization.max_update"),
                                    metadata={"help": "updates at which the learning rate reaches 0"})
    budget_hours: float = field(default=0.0, metadata={"help": "hours of training at which the learning rate "
                                                              "reaches 0 (0: no time budget)"})
    budget_start_hours: float = field(default=0.0, metadata={"help": "the scheduler's clock where the time budget "
                                                                    "starts (a resumed model's hours so far)"})
    lr: List[float] = II("optimization.lr")


def budget_fraction(num_updates: int, hours: float, warmup: int, total: float, budget_hours: float,
                    start_hours: float = 0.0) -> float:
    """The fraction of the decay already spent: updates past the warm-up, or training time, whichever is further."""
    by_updates = (num_updates - warmup) / max(total - warmup, 1)
    by_time = (hours - start_hours) / budget_hours if budget_hours > 0 else 0.0
    return min(1.0, max(0.0, by_updates, by_time))


@register_lr_scheduler("budget_linear", dataclass=BudgetLinearConfig)
class BudgetLinearSchedule(FairseqLRScheduler):
    def __init__(self, cfg: BudgetLinearConfig, optimizer):
        super().__init__(cfg, optimizer)
        assert cfg.total_num_update > 0
        self.peak = cfg.lr[0]
        self.seconds = 0.0  # training time so far, this run and the runs it resumes
        # a new run's clock starts when the plugin was imported, before fairseq's (the trainer's construction):
        # ahead by the set-up, so the rate reaches 0 just before fairseq's stop, never after
        self._last = STARTED
        self.optimizer.set_lr(self.peak / cfg.warmup_updates if cfg.warmup_updates > 0 else self.peak)

    def state_dict(self):
        return {"best": self.best, "seconds": self.seconds}

    def load_state_dict(self, state_dict):
        self.best = state_dict.get("best", self.best)
        self.seconds = float(state_dict.get("seconds", 0.0))  # a polynomial_decay checkpoint: no clock yet
        self._last = time.monotonic()

    def step_begin_epoch(self, epoch):
        return self.optimizer.get_lr()

    def step(self, epoch, val_loss=None):
        super().step(epoch, val_loss)
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        now = time.monotonic()
        self.seconds += now - self._last
        self._last = now
        cfg = self.cfg
        if cfg.warmup_updates > 0 and num_updates <= cfg.warmup_updates:
            lr = self.peak * num_updates / cfg.warmup_updates
        else:
            lr = self.peak * (1.0 - budget_fraction(num_updates, self.seconds / 3600, cfg.warmup_updates,
                                                    cfg.total_num_update, cfg.budget_hours,
                                                    cfg.budget_start_hours))
        self.optimizer.set_lr(lr)
        return self.optimizer.get_lr()
