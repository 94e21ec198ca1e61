"""The separable lexicon kernels (hmm_nmt.hmm.separable_lexicon) against the materialised softmax."""
import pytest
import torch

from hmm_nmt.hmm.separable_lexicon import (
    reference_separable_log_probs,
    reference_separable_scores,
    separable_log_mixture,
    separable_logz,
    separable_scores,
    source_terms,
)

F64 = torch.float64


def problem(batch=2, tgt=3, src=4, vocab=11, dim=5, scale=1.0, seed=0, dtype=F64, bias=True):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, src, dim, generator=g, dtype=F64).mul(scale).to(dtype),
            torch.randn(batch, tgt, dim, generator=g, dtype=F64).mul(scale).to(dtype),
            torch.randn(vocab, dim, generator=g, dtype=F64).to(dtype),
            torch.randn(vocab, generator=g, dtype=F64).to(dtype) if bias else None,
            torch.randint(0, vocab, (batch, tgt), generator=g))


@pytest.mark.parametrize("bias", [True, False])
def test_scores_equal_the_materialised_softmax(bias):
    src, tgt, w, b, target = problem(bias=bias)
    ref = reference_separable_log_probs(src, tgt, w, b)  # (B, I, J, V)
    gold, mean = separable_scores(src, tgt, w, b, target)
    expected = ref.gather(-1, target[:, :, None, None].expand(*ref.shape[:3], 1)).squeeze(-1)
    torch.testing.assert_close(gold, expected)
    torch.testing.assert_close(mean, ref.mean(-1))  # label smoothing's mean over the whole vocabulary
    torch.testing.assert_close(ref.exp().sum(-1), torch.ones(ref.shape[:3], dtype=F64))


def test_gradients_equal_autograd_through_the_materialised_softmax():
    src, tgt, w, b, target = problem()
    leaves = [t.clone().requires_grad_() for t in (src, tgt, w, b)]
    weights = torch.randn(2, *target.shape, 4, dtype=F64)
    grads = []
    for kernel in (True, False):
        if kernel:
            gold, mean = separable_scores(*leaves, target)
        else:
            ref = reference_separable_log_probs(*leaves)
            gold = ref.gather(-1, target[:, :, None, None].expand(*ref.shape[:3], 1)).squeeze(-1)
            mean = ref.mean(-1)
        grads.append(torch.autograd.grad((weights[0] * gold + weights[1] * mean).sum(), leaves))
    for a, c in zip(*grads):
        torch.testing.assert_close(a, c)


def test_gradcheck_float64():
    src, tgt, w, b, target = problem(batch=1, tgt=2, src=3, vocab=5, dim=3)
    inputs = tuple(t.clone().requires_grad_() for t in (src, tgt, w, b))
    assert torch.autograd.gradcheck(lambda *x: separable_scores(*x, target), inputs)


def test_underflowed_normalisers_are_recomputed_exactly():
    """Logits of +-200 in float32: every shifted product exp(a - max a) exp(b - max b) underflows where the
    two experts peak on different words; the fallback still gives the exact log Z and finite gradients."""
    a = torch.zeros(1, 2, 3)
    a[0, 0, 0], a[0, 1, 1] = 200.0, 200.0  # source position 0 peaks on word 0, position 1 on word 1
    b = torch.zeros(1, 1, 3)
    b[0, 0, 1] = 200.0  # the target expert peaks on word 1
    a[0, 0, 1] = -200.0  # so that at (i=0, j=0) no word is near both maxima
    b[0, 0, 0] = -200.0
    a.requires_grad_()
    logz = separable_logz(a, b)
    expected = torch.logsumexp(a.detach().double()[0][None, :, :] + b.double()[0][:, None, :], -1)[None]
    torch.testing.assert_close(logz.double(), expected, rtol=1e-6, atol=1e-4)
    (grad,) = torch.autograd.grad(logz.sum(), a)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad.sum(-1), torch.ones(1, 2))  # the softmax over V of each (i, j) row


@pytest.mark.parametrize("scale, dtype", [(1.0, F64), (60.0, F64), (60.0, torch.float32)])
def test_mixture_equals_the_materialised_mixture(scale, dtype):
    src, tgt, w, b, _ = problem(scale=scale, dtype=dtype)
    log_align = torch.randn(2, 3, 4, dtype=F64).log_softmax(-1).to(dtype)
    ref = reference_separable_log_probs(src.double(), tgt.double(), w.double(), b.double())
    expected = torch.logsumexp(ref + log_align.double()[..., None], dim=2)
    out, logz = separable_log_mixture(src, tgt, log_align, w, b, return_logz=True)
    tol = {} if dtype == F64 else {"rtol": 1e-5, "atol": 1e-3}
    torch.testing.assert_close(out.double(), expected, **tol)
    torch.testing.assert_close(logz.double(), torch.logsumexp(
        torch.nn.functional.linear(src.double()[:, None] + tgt.double()[:, :, None], w.double(), b.double()), -1),
        **tol)
    assert torch.isfinite(out).all()
    # the cached source terms of incremental decoding give the same result
    torch.testing.assert_close(separable_log_mixture(src, tgt, log_align, w, b, source=source_terms(src, w, b)), out)


def test_mixture_underflow_falls_back_to_the_exact_sum():
    """A word far below every source row's maximum: the shifted exponentials are all 0 in float32."""
    src, tgt, w, b, _ = problem(batch=1, tgt=1, src=2, vocab=4, dim=2, dtype=torch.float32)
    src = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    tgt = torch.tensor([[[0.0, 0.0]]])
    w = torch.tensor([[100.0, 0.0], [0.0, 100.0], [-100.0, -100.0], [0.0, 0.0]])
    b = torch.zeros(4)
    log_align = torch.tensor([[[0.3, 0.7]]]).log()
    out = separable_log_mixture(src, tgt, log_align, w, b)
    ref = reference_separable_log_probs(src.double(), tgt.double(), w.double(), b.double())
    expected = torch.logsumexp(ref + log_align.double()[..., None], dim=2)
    assert expected[0, 0, 2] < -150  # word 2 is exp(-200) below the peaks: its shifted exponentials are 0
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("chunk_rows", [1, 5, 1024])
def test_topk_mixture_mixes_only_the_kept_positions(chunk_rows):
    src, tgt, w, b, _ = problem()
    log_align = torch.randn(2, 3, 4, dtype=F64).log_softmax(-1)
    idx = log_align.topk(2, dim=-1).indices
    kept = torch.full_like(log_align, -1e9).scatter(-1, idx, log_align.gather(-1, idx).log_softmax(-1))
    ref = reference_separable_log_probs(src, tgt, w, b)
    expected = torch.logsumexp(ref + kept[..., None], dim=2)
    torch.testing.assert_close(separable_log_mixture(src, tgt, kept, w, b, keep_idx=idx, chunk_rows=chunk_rows),
                               expected)


@pytest.mark.parametrize("owner", [[0, 0, 1, 1, 2, 2], [2, 0, 1, 0, 2, 1], [0, 0, 0, 1, 2, 2]],
                         ids=["beams", "permuted beams", "unequal groups"])
@pytest.mark.parametrize("topk", [False, True])
def test_shared_source_rows_give_the_per_row_result(owner, topk):
    """Decoding keeps one set of source terms per sentence for all its beams: the mixture and log Z equal
    those of the per-hypothesis rows, whatever the grouping."""
    src_u, _, w, b, _ = problem(batch=3)
    owner = torch.tensor(owner)
    _, tgt, _, _, _ = problem(batch=6, seed=1)
    src = src_u[owner]
    log_align = torch.randn(6, 3, 4, dtype=F64).log_softmax(-1)
    idx = log_align.topk(2, dim=-1).indices if topk else None
    if topk:
        log_align = torch.full_like(log_align, -1e9).scatter(-1, idx, log_align.gather(-1, idx).log_softmax(-1))
    per_row = separable_log_mixture(src, tgt, log_align, w, b, keep_idx=idx, return_logz=True)
    shared = separable_log_mixture(src, tgt, log_align, w, b, keep_idx=idx, return_logz=True,
                                   source=source_terms(src_u, w, b), owner=owner)
    for x, y in zip(shared, per_row):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("outputs", ["both", "gold", "mean"])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_backward_equals_autograd_through_the_normalisers(outputs, bias):
    """The fused kernel's hand-written backward against autograd through separable_logz, float64; also
    when only one of the two outputs reaches the loss (label smoothing off: no gradient for the mean)."""
    src, tgt, w, b, target = problem(batch=3, tgt=5, src=4, vocab=13, dim=6, bias=bias)
    leaves = [t.clone().requires_grad_() for t in (src, tgt, w) + ((b,) if bias else ())]
    weights = torch.randn(2, 3, 5, 4, dtype=F64)
    results = []
    for kernel in (separable_scores, reference_separable_scores):
        gold, mean = kernel(*leaves[:3], leaves[3] if bias else None, target)
        loss = {"both": (weights[0] * gold + weights[1] * mean).sum(), "gold": (weights[0] * gold).sum(),
                "mean": (weights[1] * mean).sum()}[outputs]
        results.append((gold.detach(), mean.detach()) + torch.autograd.grad(loss, leaves))
    for x, y in zip(*results):
        torch.testing.assert_close(x, y)


@pytest.mark.parametrize("bias", [False, True])
def test_fused_kernel_recomputes_underflowed_normalisers_and_their_gradient(bias):
    """The logits of test_underflowed_normalisers_are_recomputed_exactly through features (W = identity):
    in float32 the fused kernel's log Z and gradients equal the float64 materialised softmax."""
    a = torch.zeros(1, 2, 3)
    a[0, 0, 0], a[0, 1, 1], a[0, 0, 1] = 200.0, 200.0, -200.0
    b = torch.zeros(1, 1, 3)
    b[0, 0, 1], b[0, 0, 0] = 200.0, -200.0
    w = torch.eye(3)
    target = torch.tensor([[2]])
    tensors = (a, b, w) + ((torch.tensor([0.5, -1.5, 2.0]),) if bias else ())
    leaves32 = [t.clone().requires_grad_() for t in tensors]
    leaves64 = [t.double().requires_grad_() for t in tensors]
    gold, mean = separable_scores(*leaves32[:3], leaves32[3] if bias else None, target)
    ref = reference_separable_log_probs(*leaves64[:3], leaves64[3] if bias else None)  # (1, 1, 2, 3)
    ref_gold = ref[..., 2]
    torch.testing.assert_close(gold.double(), ref_gold.detach(), rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(mean.double(), ref.mean(-1).detach(), rtol=1e-6, atol=1e-4)
    got = torch.autograd.grad((gold + 0.5 * mean).sum(), leaves32)
    want = torch.autograd.grad((ref_gold + 0.5 * ref.mean(-1)).sum(), leaves64)
    for x, y in zip(got, want):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(x.double(), y, rtol=1e-5, atol=1e-5)
