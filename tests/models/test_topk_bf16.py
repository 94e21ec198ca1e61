"""--lexicon-topk pruning and --lexicon-dtype bf16 of transformer_dhmm.

The comparisons of two computation paths (exact vs pruned, incremental vs full, criterion vs decoder) run in
float64: in float32 the paths sum the same terms in other orders and differ by the CPU's rounding (~1e-6,
machine-dependent); in float64 they agree to ~1e-12, so assert_close's float64 defaults hold anywhere.
"""
import pytest
import torch
from dhmm_testlib import batch, build

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss

ARCHS = ["transformer_dhmm", "transformer_dhmm_first_order"]
# pruning and the bf16 matmul of the softmax lexicon (test_lexicon_kinds.py prunes the other lexicons)
SOFTMAX = ["--lexicon", "softmax"]


def loss_and_grads(m, d, eps=0.1):
    src, lens, prev, target = batch(d)
    m.zero_grad()
    loss, nll, mass = dhmm_loss(m, m(src, lens, prev, features_only=True), target, eps)
    loss.backward()
    return loss.detach(), nll, mass, {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def twins(arch, extra_a, extra_b):
    """Two float64 models with the same weights and different flags, in eval mode (no dropout)."""
    a, d = build(arch, extra=SOFTMAX + list(extra_a))
    b, _ = build(arch, d, extra=SOFTMAX + list(extra_b))
    b.load_state_dict(a.state_dict())
    return a.double().eval(), b.double().eval(), d


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("objective", ["bound", "pruned"])
def test_topk_covering_every_position_is_exact(arch, objective):
    exact, pruned, d = twins(arch, [], ["--lexicon-topk", "5", "--lexicon-topk-objective", objective])  # J = 5
    l0, n0, _, g0 = loss_and_grads(exact, d)
    l1, n1, mass, g1 = loss_and_grads(pruned, d)
    assert l0.dtype == torch.float64
    torch.testing.assert_close(l1, l0)
    torch.testing.assert_close(n1, n0)
    assert set(g0) == set(g1)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name])  # float64 defaults: rtol 1e-7, atol 1e-7
    torch.testing.assert_close(mass.double(), torch.tensor(8.0, dtype=torch.float64))  # all 8 target tokens


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pruned_likelihood_is_a_lower_bound(arch, k):
    exact, pruned, d = twins(arch, [], ["--lexicon-topk", str(k), "--lexicon-topk-objective", "bound"])
    src, lens, prev, target = batch(d)
    full, _, _ = dhmm_loss(exact, exact(src, lens, prev, features_only=True), target, 0.0)
    low, _, mass = dhmm_loss(pruned, pruned(src, lens, prev, features_only=True), target, 0.0)
    assert low >= full - 1e-9  # losses are negative log-likelihoods
    assert 0 < mass < 8.0


@pytest.mark.parametrize("arch", ARCHS)
def test_topk_warmup_trains_exact_then_the_bound(arch):
    exact, warm, d = twins(arch, [], ["--lexicon-topk", "2", "--lexicon-topk-warmup", "3", "--lexicon-topk-objective", "bound"])
    pruned, _, _ = twins(arch, ["--lexicon-topk", "2", "--lexicon-topk-objective", "bound"], [])
    pruned.load_state_dict(exact.state_dict())
    for m in (exact, warm, pruned):
        m.train()  # dropout is 0: train mode only lets the warm-up take effect
    for m in (exact, warm, pruned):
        m.set_num_updates(2)  # as fairseq's trainer does before each update
    l_exact, _, _, g_exact = loss_and_grads(exact, d)
    l_warm, _, _, g_warm = loss_and_grads(warm, d)
    assert warm.decoder.lexicon_topk == 0
    torch.testing.assert_close(l_warm, l_exact)
    for name in g_exact:
        torch.testing.assert_close(g_warm[name], g_exact[name])
    warm.eval()  # validation and decoding always prune
    assert warm.decoder.lexicon_topk == 2
    warm.train()
    warm.set_num_updates(3)
    l_warm, _, mass, _ = loss_and_grads(warm, d)
    l_pruned, _, _, _ = loss_and_grads(pruned, d)
    assert warm.decoder.lexicon_topk == 2 and mass < 8.0
    torch.testing.assert_close(l_warm, l_pruned)
    assert l_warm > l_exact  # the bound is looser than the exact loss


@pytest.mark.parametrize("arch", ARCHS)
def test_pruned_decoding_is_a_distribution_and_incremental_equals_full(arch):
    m, d = build(arch, extra=SOFTMAX + ["--lexicon-topk", "2"])
    m.double().eval()
    src, lens, prev, _ = batch(d)
    log_probs, extra = m(src, lens, prev)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(prev.shape, dtype=torch.float64))
    assert ((extra["attn"][0] > 0).sum(-1) <= 2).all()
    enc = m.encoder(src, src_lengths=lens)
    inc = {}
    for step in range(prev.size(1)):
        out, ex = m.decoder(prev[:, : step + 1], encoder_out=enc, incremental_state=inc)
        real = prev[:, step].ne(d.pad())  # beam search never feeds padding
        # fairseq's self-attention softmax is float32 even in float64 models: float32-sized tolerance here
        torch.testing.assert_close(out[real, -1], log_probs[real, step], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ex["attn"][0][real, -1], extra["attn"][0][real, step], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_lexicon_within_tolerance_of_fp32(arch):
    ref, d = build(arch, dim=32, extra=SOFTMAX)
    low, _ = build(arch, d, dim=32, extra=SOFTMAX + ["--lexicon-dtype", "bf16"])
    low.load_state_dict(ref.state_dict())
    l0, n0, _, g0 = loss_and_grads(ref, d)
    l1, n1, _, g1 = loss_and_grads(low, d)
    # bf16 rounds the lexicon matmul inputs to 8 mantissa bits; everything after it is fp32
    torch.testing.assert_close(l1, l0, rtol=1e-2, atol=0.05)
    num = sum((g1[n] - g0[n]).norm() ** 2 for n in g0) ** 0.5
    den = sum(g0[n].norm() ** 2 for n in g0) ** 0.5
    assert num / den < 0.05, float(num / den)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_pruned_objective_is_the_likelihood_decoding_scores(arch, k):
    # --lexicon-topk-objective pruned trains the model that decoding with the same K uses: its loss is minus
    # the sum of the decoder's own log-probabilities of the reference (teacher forcing), and never below
    # the bound's loss (bound = pruned + sum_i log m_i)
    m, bound, d = twins(arch, ["--lexicon-topk", str(k), "--lexicon-topk-objective", "pruned"],
                        ["--lexicon-topk", str(k), "--lexicon-topk-objective", "bound"])
    src, lens, prev, target = batch(d)
    loss, nll, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    lprobs, _ = m(src, lens, prev)
    scored = lprobs.gather(-1, target[..., None]).squeeze(-1).masked_fill(target.eq(d.pad()), 0.0).sum()
    torch.testing.assert_close(loss, -scored)
    torch.testing.assert_close(nll, -scored)
    loose, _, _ = dhmm_loss(bound, bound(src, lens, prev, features_only=True), target, 0.0)
    assert loss <= loose + 1e-9
    if k < 3:
        assert loss < loose - 1e-4  # something was pruned, and the bound paid for it
