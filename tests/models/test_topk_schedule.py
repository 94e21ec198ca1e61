"""--lexicon-topk-schedule: parsing, and the K in effect by update (training) vs validation/decoding."""
import pytest
import torch
from test_topk_bf16 import ARCHS, loss_and_grads, twins

from hmm_nmt.models.topk_schedule import advance, parse_topk_schedule, topk_at


def test_parse_counts_and_percentages():
    assert parse_topk_schedule("") == []
    assert parse_topk_schedule("4@0,0@80%", max_update=2000) == [(0, 4), (1600, 0)]
    assert parse_topk_schedule(" 2@0, 4@10 ,0@30") == [(0, 2), (10, 4), (30, 0)]
    s = parse_topk_schedule("2@0,4@10,0@30")
    assert [topk_at(s, u) for u in (0, 9, 10, 29, 30, 10 ** 6)] == [2, 2, 4, 4, 0, 0]


def test_a_plateau_moves_the_next_step_forward_only():
    s = parse_topk_schedule("4@0,2@50,0@80")
    assert advance(s, 30) == [(0, 4), (30, 2), (80, 0)]  # the next step now; later ones keep their update
    assert [topk_at(advance(s, 30), u) for u in (29, 30, 79, 80)] == [4, 2, 2, 0]
    assert advance(s, 60) == [(0, 4), (50, 2), (60, 0)]
    assert advance(s, 80) is None and advance([], 5) is None  # nothing left to come: patience may stop


@pytest.mark.parametrize("text, max_update, message", [
    ("4", 0, "not K@U"),
    ("4@x", 0, "not K@U"),
    ("-1@0", 0, "must be >= 0"),
    ("4@5,0@9", 0, "must start at update 0"),
    ("4@0,0@0", 0, "increase strictly"),
    ("4@0,2@9,0@9", 0, "increase strictly"),
    ("4@0,0@80%", 0, "--max-update, which is not set"),
    ("4@0,0@120%", 100, "not K@U"),
])
def test_bad_schedules_name_the_flag(text, max_update, message):
    with pytest.raises(ValueError, match="--lexicon-topk-schedule") as e:
        parse_topk_schedule(text, max_update)
    assert message in str(e.value)


@pytest.mark.parametrize("arch", ARCHS)
def test_schedule_trains_pruned_then_exact_and_validates_exact(arch):
    exact, sched, d = twins(arch, [], ["--lexicon-topk-schedule", "2@0,0@3", "--lexicon-topk-objective", "pruned"])
    pruned, _, _ = twins(arch, ["--lexicon-topk", "2", "--lexicon-topk-objective", "pruned"], [])
    pruned.load_state_dict(exact.state_dict())
    for m in (exact, sched, pruned):
        m.train()  # dropout is 0: train mode only lets the schedule take effect
        m.set_num_updates(2)  # as fairseq's trainer does before each update
    l_sched, _, mass, g_sched = loss_and_grads(sched, d)
    l_pruned, _, _, g_pruned = loss_and_grads(pruned, d)
    assert sched.decoder.lexicon_topk == 2 and mass < 8.0
    torch.testing.assert_close(l_sched, l_pruned)
    for name in g_pruned:
        torch.testing.assert_close(g_sched[name], g_pruned[name])
    sched.eval()  # validation and decoding: --lexicon-topk, here 0 (exact)
    assert sched.decoder.lexicon_topk == 0
    sched.train()
    assert sched.decoder.advance_topk_schedule(2) and sched.decoder.lexicon_topk == 0  # a plateau at update 2
    sched.set_num_updates(3)
    assert not sched.decoder.advance_topk_schedule(3)  # past its last step: nothing to advance
    l_sched, _, _, g_sched = loss_and_grads(sched, d)
    l_exact, _, _, g_exact = loss_and_grads(exact, d)
    assert sched.decoder.lexicon_topk == 0
    torch.testing.assert_close(l_sched, l_exact)
    for name in g_exact:
        torch.testing.assert_close(g_sched[name], g_exact[name])


def test_schedule_and_warmup_are_exclusive():
    from dhmm_testlib import build

    with pytest.raises(ValueError, match="not both"):
        build("transformer_dhmm", extra=["--lexicon-topk", "2", "--lexicon-topk-warmup", "3",
                                         "--lexicon-topk-schedule", "2@0,0@5"])
