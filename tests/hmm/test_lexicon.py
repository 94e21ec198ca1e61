"""Chunked lexicon kernels against the materialised reference."""
import math

import pytest
import torch

from hmm_nmt.hmm.lexicon import _underflow_floor, lexicon_scores, log_mixture, reference_lexicon_scores


def problem(n=37, d=6, vocab=23, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=dtype)
    weight = torch.randn(vocab, d, generator=g, dtype=dtype)
    bias = torch.randn(vocab, generator=g, dtype=dtype)
    target = torch.randint(0, vocab, (n,), generator=g)
    return hidden, weight, bias, target


@pytest.mark.parametrize("chunk", [1, 5, 37, 1000])
def test_chunked_equals_reference_values_and_gradients(chunk):
    hidden, weight, bias, target = problem()
    a, b = torch.randn(37, dtype=torch.float64), torch.randn(37, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
    gold, mean = lexicon_scores(*leaves, target, chunk)
    ((gold * a).sum() + (mean * b).sum()).backward()
    ref_leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
    rgold, rmean = reference_lexicon_scores(*ref_leaves, target)
    ((rgold * a).sum() + (rmean * b).sum()).backward()
    torch.testing.assert_close(gold, rgold)
    torch.testing.assert_close(mean, rmean)
    for x, y in zip(leaves, ref_leaves):
        torch.testing.assert_close(x.grad, y.grad)


def test_gradcheck_float64():
    hidden, weight, bias, target = problem(n=7, d=3, vocab=5)
    inputs = tuple(t.clone().requires_grad_() for t in (hidden, weight, bias))
    assert torch.autograd.gradcheck(lambda h, w, b: lexicon_scores(h, w, b, target, 3), inputs)
    assert torch.autograd.gradcheck(lambda h, w: lexicon_scores(h, w, None, target, 2), inputs[:2])


def test_bf16_matmul_within_tolerance():
    hidden, weight, bias, target = problem(n=64, d=32, vocab=500, dtype=torch.float32)
    leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
    gold, mean = lexicon_scores(*leaves, target, 16, torch.bfloat16)
    (gold.sum() + 0.1 * mean.sum()).backward()
    ref = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
    rgold, rmean = lexicon_scores(*ref, target, 16)
    (rgold.sum() + 0.1 * rmean.sum()).backward()
    assert gold.dtype == torch.float32
    # bf16 has 8 bits of mantissa: logits of magnitude ~10 are off by ~0.05
    torch.testing.assert_close(gold, rgold, atol=0.15, rtol=0.02)
    torch.testing.assert_close(mean, rmean, atol=0.15, rtol=0.02)
    for x, y in zip(leaves, ref):
        rel = (x.grad - y.grad).norm() / y.grad.norm()
        assert rel < 0.03, rel


def test_log_mixture_equals_materialised_mixture():
    g = torch.Generator().manual_seed(1)
    bsz, tgt_len, src_len, d, vocab = 2, 3, 4, 5, 11
    src_feat = torch.randn(bsz, src_len, d, generator=g, dtype=torch.float64)
    tgt_feat = torch.randn(bsz, tgt_len, d, generator=g, dtype=torch.float64)
    log_align = torch.randn(bsz, tgt_len, src_len, generator=g, dtype=torch.float64)
    log_align[1, :, -1] = -1e9  # padding
    log_align = log_align.log_softmax(-1)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    bias = torch.randn(vocab, generator=g, dtype=torch.float64)
    hidden = torch.relu(src_feat[:, None] + tgt_feat[:, :, None])  # (B, I, J, d)
    lex = torch.log_softmax(hidden @ weight.t() + bias, -1)
    expected = torch.logsumexp(log_align[..., None] + lex, dim=2)
    for chunk in (1, 4, 7, 1000):
        out, logz = log_mixture(src_feat, tgt_feat, log_align, weight, bias, chunk, return_logz=True)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(logz, torch.logsumexp(hidden @ weight.t() + bias, -1))
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(bsz, tgt_len, dtype=torch.float64))


def mixture_problem(seed=1, bsz=2, tgt_len=3, src_len=4, d=5, vocab=11):
    g = torch.Generator().manual_seed(seed)
    src_feat = torch.randn(bsz, src_len, d, generator=g, dtype=torch.float64)
    tgt_feat = torch.randn(bsz, tgt_len, d, generator=g, dtype=torch.float64)
    log_align = torch.randn(bsz, tgt_len, src_len, generator=g, dtype=torch.float64)
    log_align[1, :, -1] = -1e9
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    bias = torch.randn(vocab, generator=g, dtype=torch.float64)
    return src_feat, tgt_feat, log_align.log_softmax(-1), weight, bias


def test_log_mixture_differentiable_path_equals_buffered_path_and_gradchecks():
    # with gradients the mixture runs without the reused buffers (out= is not differentiable)
    inputs = mixture_problem()
    with torch.no_grad():
        fast, fast_logz = log_mixture(*inputs, 5, return_logz=True)
    leaves = [x.clone().requires_grad_() for x in inputs]
    slow, slow_logz = log_mixture(*leaves, 5, return_logz=True)
    torch.testing.assert_close(slow, fast)
    torch.testing.assert_close(slow_logz, fast_logz)
    assert torch.autograd.gradcheck(lambda *x: log_mixture(*x, 3), tuple(leaves))


def test_frozen_weight_and_bias_only_hidden_gradient():
    hidden, weight, bias, target = problem()
    h = hidden.clone().requires_grad_()
    gold, mean = lexicon_scores(h, weight, bias, target, 8)
    (gold.sum() + 0.3 * mean.sum()).backward()
    ref = hidden.clone().requires_grad_()
    rgold, rmean = reference_lexicon_scores(ref, weight, bias, target)
    (rgold.sum() + 0.3 * rmean.sum()).backward()
    torch.testing.assert_close(h.grad, ref.grad)


def test_bf16_with_bias_within_tolerance():
    hidden, weight, bias, target = problem(n=64, d=32, vocab=500, dtype=torch.float32)
    leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
    gold, mean = lexicon_scores(*leaves, target, 24, torch.bfloat16)
    (gold.sum() + 0.1 * mean.sum()).backward()
    ref = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
    rgold, rmean = lexicon_scores(*ref, target, 24)
    (rgold.sum() + 0.1 * rmean.sum()).backward()
    torch.testing.assert_close(gold, rgold, atol=0.15, rtol=0.02)
    for x, y in zip(leaves, ref):
        assert (x.grad - y.grad).norm() / y.grad.norm() < 0.03


@pytest.mark.parametrize("scale,dtype", [(1.0, torch.float64), (400.0, torch.float64), (1.0, torch.float32),
                                         (40.0, torch.float32)])
def test_log_mixture_probability_and_log_space_paths(scale, dtype):
    # large scales: some mixture probabilities are below what the probability-space sum can represent, so
    # those rows must come from the log-space fallback
    src_feat, tgt_feat, log_align, weight, bias = mixture_problem(seed=3, src_len=5, vocab=17)
    weight = weight * scale
    hidden = torch.relu(src_feat[:, None] + tgt_feat[:, :, None])
    logits = hidden @ weight.t() + bias
    expected = torch.logsumexp(log_align[..., None] + torch.log_softmax(logits, -1), dim=2)
    if scale > 1:
        assert expected.min() < math.log(_underflow_floor(dtype)) - 10
    src_feat, tgt_feat, log_align, weight, bias = (x.to(dtype) for x in (src_feat, tgt_feat, log_align, weight, bias))
    # float32 against the float64 reference: logits up to ~40 * |x| lose ~eps32 * 40 * 17 terms ~ 4e-5 in the
    # log-sum-exp, hence 1e-4; float64 uses assert_close's float64 defaults
    tol = {} if dtype == torch.float64 else {"atol": 1e-4, "rtol": 1e-4}
    for chunk in (1, 6, 100):
        out, logz = log_mixture(src_feat, tgt_feat, log_align, weight, bias, chunk, return_logz=True)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), expected, **tol)
        torch.testing.assert_close(logz.double(), torch.logsumexp(logits, -1), **tol)
    keep = log_align.topk(2, dim=-1).indices
    kept = log_align.gather(-1, keep).log_softmax(-1)
    pruned = torch.full_like(log_align, -1e9).scatter(-1, keep, kept)
    expected = torch.logsumexp(pruned[..., None] + torch.log_softmax(logits, -1), dim=2)
    out = log_mixture(src_feat, tgt_feat, pruned, weight, bias, 4, keep_idx=keep)
    torch.testing.assert_close(out.double(), expected, **tol)


def test_workspace_reuse_across_sizes_and_threads():
    # the chunk buffers outlive a call (CPU): later calls with other sizes, and calls from other threads at
    # the same time, must still get their own correct results
    from concurrent.futures import ThreadPoolExecutor

    from hmm_nmt.hmm.lexicon import release_workspace

    problems = [problem(n=n, d=6, vocab=v, seed=n) for n, v in ((37, 23), (5, 90), (64, 11))]
    expected = [reference_lexicon_scores(h, w, b, t) for h, w, b, t in problems]

    def run(k):
        h, w, b, t = problems[k % 3]
        for _ in range(20):
            gold, mean = lexicon_scores(h, w, b, t, 8 + k)
            torch.testing.assert_close(gold, expected[k % 3][0])
            torch.testing.assert_close(mean, expected[k % 3][1])
        return True

    assert all(run(k) for k in range(3))
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(run, range(8)))
    release_workspace()
    assert run(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_precomputed_normalisers_give_the_same_values_and_gradients(dtype):
    # lexicon_logz first (no gradients), then lexicon_scores(logz=...) skips the pass over the vocabulary
    from hmm_nmt.hmm.lexicon import lexicon_logz

    work = torch.float64 if dtype == torch.float32 else torch.float32
    hidden, weight, bias, target = problem(n=40, d=8, vocab=30, dtype=work)
    logz = lexicon_logz(hidden, weight, bias, 16, dtype)
    assert not logz.requires_grad
    results = []
    for pre in (None, logz):
        leaves = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
        gold, mean = lexicon_scores(*leaves, target, 16, dtype, logz=pre)
        (gold.sum() + 0.3 * mean.sum()).backward()
        results.append((gold, mean, *[x.grad for x in leaves]))
    for a, b in zip(*results):  # the same normalisers and gold logits either way
        torch.testing.assert_close(a, b)


def test_mixture_log_prob_sum_gradcheck_and_reference():
    from hmm_nmt.hmm.direct import MASKED
    from hmm_nmt.hmm.lexicon import mixture_log_prob_sum
    g = torch.Generator().manual_seed(4)
    bsz, tgt_len, src_len, d, vocab = 2, 3, 4, 5, 7
    src = torch.randn(bsz, src_len, d, generator=g, dtype=torch.float64)
    tgt = torch.randn(bsz, tgt_len, d, generator=g, dtype=torch.float64)
    align = torch.randn(bsz, tgt_len, src_len, generator=g, dtype=torch.float64)
    align[1, :, :1] = MASKED  # a padded source position
    align = align.log_softmax(-1)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    bias = torch.randn(vocab, generator=g, dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    leaves = [t.clone().requires_grad_() for t in (src, tgt, align, weight, bias)]
    # chunk_rows 4: one target position per chunk, so the chunking is exercised
    assert torch.autograd.gradcheck(lambda *x: mixture_log_prob_sum(*x, mask, 4), leaves)
    hidden = torch.relu(src[:, None] + tgt[:, :, None])  # (B, I, J, d)
    lp = torch.log_softmax(hidden @ weight.t() + bias, -1)
    ref = torch.logsumexp(align[..., None] + lp, dim=2).sum(-1).masked_fill(~mask, 0.0)
    torch.testing.assert_close(mixture_log_prob_sum(src, tgt, align, weight, bias, mask, 4), ref)
