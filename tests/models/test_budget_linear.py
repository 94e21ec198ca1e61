"""--lr-scheduler budget_linear: polynomial_decay (power 1, to 0) update for update without a time budget; with
one, the decay follows the training clock when that runs out first, and a resumed run continues the clock."""
import pytest
import torch
from fairseq.optim import FairseqOptimizer
from fairseq.optim.lr_scheduler.polynomial_decay_schedule import (
    PolynomialDecayLRSchedule,
    PolynomialDecayLRScheduleConfig,
)

import hmm_nmt  # noqa: F401  (registers the scheduler)
from hmm_nmt.optim import budget_linear
from hmm_nmt.optim.budget_linear import BudgetLinearConfig, BudgetLinearSchedule, budget_fraction


class FakeOptimizer(FairseqOptimizer):
    def __init__(self):
        super().__init__(None)
        self._optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(budget_linear.time, "monotonic", c)
    monkeypatch.setattr(budget_linear, "STARTED", c.t)
    return c


def _budget(clock, **kw):
    return BudgetLinearSchedule(BudgetLinearConfig(lr=[2e-3], **{"warmup_updates": 4, "total_num_update": 20, **kw}),
                                FakeOptimizer())


def test_without_a_time_budget_it_is_polynomial_decay_to_zero(clock):
    ours = _budget(clock)
    theirs = PolynomialDecayLRSchedule(PolynomialDecayLRScheduleConfig(
        lr=[2e-3], warmup_updates=4, total_num_update=20, power=1.0, end_learning_rate=0.0), FakeOptimizer())
    assert ours.optimizer.get_lr() == pytest.approx(theirs.optimizer.get_lr(), rel=1e-12)
    for u in range(0, 26):
        clock.t += 3600.0  # hours pass: no budget, no effect
        assert ours.step_update(u) == pytest.approx(theirs.step_update(u), rel=1e-12, abs=1e-15), u
    assert ours.optimizer.get_lr() == 0.0


def test_the_clock_anneals_when_the_hours_run_out_before_the_updates(clock):
    s = _budget(clock, total_num_update=1000, budget_hours=2.0)
    clock.t += 1800.0  # half an hour of start-up counts, as in fairseq's cumulative training time
    assert s.step_update(2) == pytest.approx(2e-3 * 2 / 4)  # the warm-up is by updates
    clock.t += 1800.0
    assert s.step_update(10) == pytest.approx(2e-3 * 0.5)  # 1 of 2 hours spent, 6 of 996 updates
    clock.t += 3 * 3600.0
    assert s.step_update(11) == 0.0
    # and the updates when they run out first
    s = _budget(clock, total_num_update=20, budget_hours=100.0)
    assert s.step_update(12) == pytest.approx(2e-3 * (1 - 8 / 16))


def test_a_resumed_run_continues_the_clock_and_a_start_offsets_the_budget(clock):
    s = _budget(clock, total_num_update=1000, budget_hours=2.0)
    clock.t += 3600.0
    s.step_update(10)
    state = s.state_dict()
    assert state["seconds"] == pytest.approx(3600.0)
    clock.t += 5 * 3600.0  # between runs: not counted
    r = _budget(clock, total_num_update=1000, budget_hours=2.0)
    r.load_state_dict(state)
    clock.t += 1800.0
    assert r.step_update(11) == pytest.approx(2e-3 * (1 - 1.5 / 2))
    # training a finished model further: the budget starts at the checkpoint's clock
    c = _budget(clock, total_num_update=1000, budget_hours=2.0, budget_start_hours=1.5)
    c.load_state_dict(r.state_dict())
    clock.t += 1800.0
    assert c.step_update(12) == pytest.approx(2e-3 * (1 - 0.5 / 2))
    # a checkpoint of polynomial_decay has no clock: it starts at 0
    p = _budget(clock, total_num_update=1000, budget_hours=2.0)
    p.load_state_dict({"best": 1.25})
    assert p.seconds == 0.0 and p.best == 1.25


@pytest.mark.parametrize("u,hours,expected", [(4, 0.0, 0.0), (12, 0.0, 0.5), (20, 0.0, 1.0), (30, 0.0, 1.0),
                                              (4, 1.0, 0.5), (12, 1.5, 0.75), (12, 0.5, 0.5), (0, 9.0, 1.0)])
def test_budget_fraction_is_the_further_of_the_two(u, hours, expected):
    assert budget_fraction(u, hours, 4, 20, 2.0) == pytest.approx(expected)
