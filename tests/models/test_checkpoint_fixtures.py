"""Frozen checkpoints: every architecture's checkpoint, written by a past commit, still loads and scores the same.

The files under tests/data/checkpoints/ were written once by tests/make_checkpoint_fixtures.py (see
tests/checkpoint_fixtures.py for the fixtures and the scores) and are committed; NEVER regenerate them to make
this test pass: a failure means that old checkpoints no longer load (a parameter renamed, added or removed:
the load is strict) or no longer score the same (a changed computation).

Each checkpoint loads through fairseq's public path, ``checkpoint_utils.load_model_ensemble_and_task`` (what
fairseq-generate, fairseq-eval-lm, the hub and hmm-nmt-tag use), with ``data`` (and the word-cluster file)
overridden to the fixture directory; the criterion is built by the task from the checkpoint's cfg. The fixed
batch stored in expected.json is scored with the model converted to float64 (compared within 1e-6, absolute +
relative, independent of CPU rounding) and as loaded in float32 (within 1e-4): the decoder's / tagger's
log-probabilities of the reference tokens (per token, per sentence, one full distribution), the criterion's
loss, teacher-forced incremental decoding for translation models, and the model-specific scores: the direct
HMMs' per-sentence DP likelihood and alignment posteriors (autograd and explicit forward-backward), the
IOHMM tagger's sequence likelihood, the VL-HMM tagger's joint likelihood, the HMM LM's sentence likelihood.
"""
import math

import checkpoint_fixtures as cf
import pytest
import torch

torch.set_num_threads(1)
EXPECTED = cf.read_expected()["fixtures"]


def test_every_registered_architecture_has_a_fixture():
    from fairseq.models import ARCH_MODEL_REGISTRY

    import hmm_nmt  # noqa: F401

    ours = {a for a, m in ARCH_MODEL_REGISTRY.items() if m.__module__.startswith("hmm_nmt.")}
    covered = {arch for _, arch, _ in cf.FIXTURES.values()}
    assert ours == covered, f"architectures without a frozen checkpoint: {sorted(ours - covered)}"
    assert set(EXPECTED) == set(cf.FIXTURES)


def _compare(actual, expected, tol, where):
    """Nested lists of floats equal within tol * (1 + |expected|); returns the list of mismatches."""
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: shape changed"
        return [m for k, (a, e) in enumerate(zip(actual, expected)) for m in _compare(a, e, tol, f"{where}[{k}]")]
    if not math.isclose(actual, expected, rel_tol=tol, abs_tol=tol):
        return [f"{where}: {actual!r} != {expected!r} (diff {actual - expected:.3g})"]
    return []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(cf.FIXTURES))
def test_frozen_checkpoint_loads_and_scores_the_same(name):
    exp = EXPECTED[name]
    model, task, criterion = cf.load(name)  # strict load_state_dict: fails on any renamed parameter
    assert exp["arch"] == cf.FIXTURES[name][1]
    got = cf.scores_both_precisions(name, model, task, criterion, exp["batch"])
    bad = []
    for prec, tol in (("float64", cf.TOL64), ("float32", cf.TOL32)):
        assert set(got[prec]) == set(exp[prec]), f"{prec}: scores {sorted(set(got[prec]) ^ set(exp[prec]))}"
        for key in exp[prec]:
            bad += _compare(got[prec][key], exp[prec][key], tol, f"{prec}.{key}")
    assert not bad, f"{name}: {len(bad)} scores changed:\n" + "\n".join(bad[:20])
