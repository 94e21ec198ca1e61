"""--lexicon-dtype auto: bf16 only where the device multiplies bf16 natively (hmm_nmt.hmm.precision).

Without native bf16 (x86 CPUs before AVX512-BF16/AMX) torch emulates bf16 matmuls; the first order's lexicon
then trained 5.7x to 12x slower than in float32 (docs/speed.md), so ``auto`` must fall back to float32 there,
and an explicit ``bf16`` must say why it is slow.
"""
import logging

import pytest
import torch
from dhmm_testlib import batch, build

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.hmm import precision


@pytest.fixture
def fake_native(monkeypatch):
    """Pretend the CPU does (True) or does not (False) have native bf16; the resolution cache is cleared."""
    def set_native(value):
        precision._resolve.cache_clear()
        monkeypatch.setattr(precision, "native_bf16", lambda device: value)
    yield set_native
    precision._resolve.cache_clear()


def test_native_bf16_answers_for_this_cpu():
    assert isinstance(precision.native_bf16(torch.device("cpu")), bool)
    assert precision.native_bf16("meta") is False  # no such hardware: never bf16 by default


@pytest.mark.parametrize("native", [False, True])
def test_auto_follows_the_hardware(fake_native, native):
    fake_native(native)
    assert precision.lexicon_dtype("auto", "cpu") == (torch.bfloat16 if native else torch.float32)
    # explicit choices are kept whatever the hardware
    assert precision.lexicon_dtype("fp32", "cpu") == torch.float32
    assert precision.lexicon_dtype("bf16", "cpu") == torch.bfloat16


def test_emulated_bf16_warns_and_auto_says_what_it_chose(fake_native, caplog):
    fake_native(False)
    with caplog.at_level(logging.INFO, logger="hmm_nmt.hmm.precision"):
        precision.lexicon_dtype("bf16", "cpu")
        precision.lexicon_dtype("auto", "cpu")
    warn = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warn) == 1 and "no native bf16" in warn[0].getMessage()
    assert any("auto: fp32" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="--lexicon-dtype"):
        precision.lexicon_dtype("fp16", "cpu")


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("arch", ["transformer_dhmm", "transformer_dhmm_first_order"])
def test_auto_model_trains_as_the_dtype_it_resolves_to(fake_native, native, arch):
    # a model built with auto gives the same loss and gradients, bit for bit, as one built with the dtype that
    # auto picks on this (pretended) hardware: the decoder resolves the flag on its own device at each call
    fake_native(native)
    # --lexicon-dtype is the softmax lexicon's
    auto, d = build(arch, dim=32, extra=["--lexicon", "softmax", "--lexicon-dtype", "auto"])
    fixed, _ = build(arch, d, dim=32, extra=["--lexicon", "softmax", "--lexicon-dtype", "bf16" if native else "fp32"])
    fixed.load_state_dict(auto.state_dict())
    assert auto.decoder.lexicon_dtype == (torch.bfloat16 if native else torch.float32)
    src, lens, prev, target = batch(d)
    out = []
    for m in (auto.eval(), fixed.eval()):
        m.zero_grad()
        loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1)
        loss.backward()
        out.append((loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]))
    assert torch.equal(out[0][0], out[1][0])
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1]))
