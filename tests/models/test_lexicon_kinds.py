"""transformer_dhmm with the cheaper lexicons (--lexicon class, --lexicon separable): each is a distribution,
the DP over it is exact, its kernels' gradients equal autograd through the materialised lexicon, and decoding
(incremental, beam search, posteriors) agrees with the training forward. Both orders, with and without
--lexicon-topk."""

import pytest
import torch
from dhmm_testlib import (
    batch,
    brute_force_loglik,
    build,
    check_beam_scores_equal_likelihood,
    check_incremental_equals_full_with_beam_reordering,
    check_posteriors_autograd_equal_explicit,
    full_lexicon,
    gold_of,
    lexicon_gradcheck_inputs,
    zipf_dict,
)

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.hmm import direct

F64 = torch.float64
ORDERS = [("transformer_dhmm", 0), ("transformer_dhmm_first_order", 1)]
KINDS = ["class", "separable"]


def build_kind(kind, arch, extra=(), **kw):
    flags = ["--lexicon", kind] + (["--lexicon-classes", "4"] if kind == "class" else [])
    return build(arch, dictionary=zipf_dict(), extra=flags + list(extra), **kw)


@pytest.fixture(scope="module", params=[(k, a, o, t) for k in KINDS for a, o in ORDERS for t in (0, 2)],
                ids=[f"{k}-order{o}{'-topk2' if t else ''}" for k in KINDS for _, o in ORDERS for t in (0, 2)])
def model(request):
    kind, arch, order, topk = request.param
    m, d = build_kind(kind, arch, extra=["--lexicon-topk", str(topk)] if topk else [])
    m.double().eval()
    assert m.decoder.alignment_order == order and m.decoder.lexicon_kind == kind
    return m, d


def test_lexicon_sums_to_one_over_the_vocabulary(model):
    m, d = model
    src, lens, prev, _ = batch(d)
    x, extra = m(src, lens, prev, features_only=True)
    lex = full_lexicon(m, x, extra)
    assert lex.dtype == F64
    torch.testing.assert_close(lex.exp().sum(-1), torch.ones(lex.shape[:-1], dtype=F64))


def test_mixture_is_a_distribution(model):
    m, d = model
    src, lens, prev, _ = batch(d)
    log_probs, extra = m(src, lens, prev)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(prev.shape, dtype=F64))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_dp_likelihood_equals_brute_force_over_alignments(kind, arch):
    m, d = build_kind(kind, arch)
    m.double().eval()
    src, lens, prev, target = batch(d)
    prev, target = prev[:, :4], target[:, :4]  # 4^4 + 2^2 alignment sequences
    loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    torch.testing.assert_close(-loss, brute_force_loglik(m, src, lens, prev, target).sum())


def test_criterion_eps0_equals_nll_of_the_mixture(model):
    m, d = model
    src, lens, prev, target = batch(d)
    log_probs, _ = m(src, lens, prev)
    tgt_mask = target.ne(d.pad())
    brute = -log_probs.gather(-1, target[..., None]).squeeze(-1)[tgt_mask].sum()
    loss, nll, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    torch.testing.assert_close(loss, brute)  # with --lexicon-topk: the pruned model decoding uses
    if not m.decoder.lexicon_topk:
        torch.testing.assert_close(nll, brute)


def test_separable_label_smoothing_is_the_mean_over_the_whole_vocabulary():
    m, d = build_kind("separable", "transformer_dhmm")
    m.double().eval()
    src, lens, prev, target = batch(d)
    eps = 0.1
    x, extra = m(src, lens, prev, features_only=True)
    lex = full_lexicon(m, x, extra)
    gold = gold_of(lex, target)
    tgt_mask = target.ne(d.pad())
    align = m.decoder.alignment_potentials(extra, None)
    expected = -direct.log_likelihood((1 - eps) * gold + eps * lex.mean(-1), tgt_mask, **align).sum()
    loss, nll, _ = dhmm_loss(m, (x, extra), target, eps)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, -direct.log_likelihood(gold, tgt_mask, **align).sum())
    assert (loss - nll).abs() > 1e-3


def test_chunked_equals_unchunked_values_and_gradients(model):
    m, d = model
    src, lens, prev, target = batch(d)
    results = []
    for chunk in (1, 3, 10 ** 6):
        m.zero_grad()
        m.decoder.lexicon_chunk_size = chunk
        loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]))
    m.decoder.lexicon_chunk_size = 1024
    assert m.decoder.output_weight_bias()[0].grad.abs().max() > 0
    for loss, grads in results[1:]:
        torch.testing.assert_close(loss, results[0][0])
        assert len(grads) == len(results[0][1])
        for a, b in zip(grads, results[0][1]):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_kernel_gradients_equal_the_materialised_lexicon(kind, arch):
    """The kernel's loss and every parameter gradient equal plain autograd through (B, I, J, V)
    (the exact lexicon: with --lexicon-topk there is no materialised reference)."""
    m, d = build_kind(kind, arch)
    m.double().eval()
    src, lens, prev, target = batch(d)
    grads = []
    for materialise in (False, True):
        m.zero_grad()
        x, extra = m(src, lens, prev, features_only=True)
        tgt_mask = target.ne(d.pad())
        if materialise:
            gold = gold_of(full_lexicon(m, x, extra), target)
            loss = -direct.log_likelihood(gold, tgt_mask, **m.decoder.alignment_potentials(extra, None)).sum()
        else:
            loss, _, _ = dhmm_loss(m, (x, extra), target, 0.0)
        loss.backward()
        grads.append([p.grad.clone() for p in m.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_incremental_decoding_equals_full_forward_with_beam_reordering(model):
    check_incremental_equals_full_with_beam_reordering(*model)


def test_beam_hypothesis_score_equals_forward_likelihood(model):
    check_beam_scores_equal_likelihood(*model)


def test_posteriors_autograd_equal_explicit(model):
    check_posteriors_autograd_equal_explicit(*model)


@pytest.mark.slow
def test_gradcheck_float64_through_the_separable_lexicon_and_dp():
    for arch, _ in ORDERS:
        m, d = build_kind("separable", arch, dim=4, layers=1, heads=1)
        m = m.double().eval()
        x, extra, target, tgt_mask, row_mask, align = lexicon_gradcheck_inputs(m, d)

        def f(x, h):
            gold, mean = m.decoder.lexicon_scores(x, dict(extra, encoder_out=h), target, row_mask)
            return direct.log_likelihood(0.9 * gold + 0.1 * mean, tgt_mask, **align)

        assert torch.autograd.gradcheck(f, (x.detach().requires_grad_(), extra["encoder_out"].detach().requires_grad_()))


def test_separable_has_the_softmax_lexicons_parameters():
    """The separable lexicon is the softmax lexicon's own parameters without the ReLU: a state dict moves
    between the two, and its mixture differs (the ReLU is gone)."""
    soft, d = build_kind("softmax", "transformer_dhmm")
    sep, _ = build_kind("separable", "transformer_dhmm")
    assert soft.state_dict().keys() == sep.state_dict().keys()
    sep.load_state_dict(soft.state_dict())
    soft.double().eval()
    sep.double().eval()
    src, lens, prev, _ = batch(d)
    assert not torch.allclose(soft(src, lens, prev)[0], sep(src, lens, prev)[0])
