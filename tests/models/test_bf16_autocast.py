"""bf16 autocast training (``fairseq-train --cpu --bf16``, hmm_nmt.compat.cpu_bf16): matmuls in bf16, the direct HMM's
DP, log-sum-exps and accumulations in float32, parameters and gradients float32."""
import re

import pytest
import torch
from dhmm_testlib import batch, build
from test_distributed_cpu import SMALL, USER_DIR, run

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.hmm import direct, lexicon
from hmm_nmt_align.safe_checkpoint import load_checkpoint_state


@pytest.mark.parametrize("arch", ["transformer_dhmm", "transformer_dhmm_first_order"])
def test_autocast_keeps_dp_logsumexp_and_accumulation_in_float32(arch, monkeypatch):
    model, d = build(arch, extra=["--lexicon", "softmax"])  # the softmax lexicon's kernel under autocast
    src, lens, prev, tgt = batch(d)
    seen = []

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
            outs = out if isinstance(out, tuple) else (out,)
            seen.append((name, torch.is_autocast_enabled("cpu"),
                         {t.dtype for t in tensors if t.is_floating_point()},
                         {t.dtype for t in outs if isinstance(t, torch.Tensor)}))
            return out
        monkeypatch.setattr(direct if hasattr(direct, name) else lexicon, name, wrapped)

    spy("log_likelihood", direct.log_likelihood)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x, extra = model(src, lens, prev, features_only=True)
        assert x.dtype == torch.bfloat16  # autocast is on: the decoder's linear layers ran in bf16
        loss, nll, _ = dhmm_loss(model, (x, extra), tgt, 0.1)
    loss.backward()
    # the DP ran under autocast on float32 potentials (lexicon scores, alignment) and returned float32
    assert seen and all(on and ins == {torch.float32} and outs == {torch.float32} for _, on, ins, outs in seen), seen
    assert loss.dtype == nll.dtype == torch.float32
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters()
               if p.grad is not None)
    # the lexicon kernel's log-normalisers and scores are float32 under autocast as well
    hidden = torch.randn(6, 16).bfloat16()
    weight = model.decoder.output_projection.weight
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gold, mean = lexicon.lexicon_scores(hidden, weight, None, torch.arange(6), 4)
        logz = lexicon.lexicon_logz(hidden, weight, None, 4)
    assert gold.dtype == mean.dtype == logz.dtype == torch.float32
    ref_gold, ref_mean = lexicon.reference_lexicon_scores(hidden.float(), weight.detach(), None, torch.arange(6))
    torch.testing.assert_close(gold, ref_gold)  # fp32 lexicon (--lexicon-dtype fp32): no bf16 rounding inside
    # and the loss is the fp32 loss up to bf16 rounding of the transformer layers (8 bits of mantissa)
    model.zero_grad()
    loss32, _, _ = dhmm_loss(model, model(src, lens, prev, features_only=True), tgt, 0.1)
    assert abs(loss.item() - loss32.item()) < 0.02 * abs(loss32.item())


@pytest.mark.slow
def test_fairseq_train_cpu_bf16_is_autocast(scale_toy, tmp_path):
    toy = scale_toy
    proc = run("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm_first_order", *SMALL,
               "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
               "--lr", "0.005", "--max-tokens", "600", "--max-update", "3", "--log-interval", "1",
               "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints", "--seed", "1", "--num-workers", "0",
               "--no-progress-bar", "--cpu", "--bf16")
    log = proc.stdout + proc.stderr
    assert "bfloat16 autocast, float32 parameters" in log
    losses = [float(x) for x in re.findall(r"train_inner \| .*?loss=([\d.]+)", log)]
    assert len(losses) == 3 and all(0 < v < 20 for v in losses), log[-2000:]
    state = load_checkpoint_state(tmp_path / "ck" / "checkpoint_last.pt")
    assert {v.dtype for v in state["model"].values() if v.is_floating_point()} == {torch.float32}
