"""The blocked products of hmm_nmt.hmm.blocked against their plain autograd expressions, in float64."""
import pytest
import torch

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.blocked import (
    reference_relu_weighted_sum,
    reference_trilinear_log_softmax,
    relu_weighted_sum,
    trilinear_log_softmax,
)

# rows per block: one, two (of five: a last block with one), all
ROWS = [1, 2, 1 << 20]


def _trilinear_inputs(bsz=5, tgt_len=4, src_len=6, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = dict(dtype=torch.float64)
    base = torch.randn(bsz, tgt_len, src_len, generator=g, **f)
    jump = torch.randn(bsz, src_len, src_len, generator=g, **f)
    jump[1, :, -2:] = direct.MASKED  # a sentence with two padded source positions
    q, p, r = (torch.randn(bsz, n, dim, generator=g, **f) for n in (tgt_len, src_len, src_len))
    return [x.requires_grad_() for x in (base, jump, q, p, r)]


@pytest.mark.parametrize("rows", ROWS)
def test_trilinear_log_softmax_matches_autograd(rows):
    inputs = _trilinear_inputs()
    out = trilinear_log_softmax(*inputs, block_bytes=rows * 4 * 6 * 8 * 8)  # a row: (I, J', d) in float64
    ref = reference_trilinear_log_softmax(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.allclose(out.exp().sum(-1), torch.ones(()).double())
    grad = torch.randn_like(out)
    grad[..., -1] = 0.0
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(ref, inputs, grad)
    for name, a, b in zip(("base", "jump", "q", "p", "r"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


def test_trilinear_log_softmax_gradcheck():
    inputs = _trilinear_inputs(bsz=3, tgt_len=2, src_len=3, dim=2, seed=1)
    inputs[1].data[1, :, -2:] = -30.0  # small but finite masked columns: finite differences lose -1e9 + eps
    assert torch.autograd.gradcheck(lambda *x: trilinear_log_softmax(*x, block_bytes=1), inputs)


def _relu_inputs(tgt_len=5, bsz=3, heads=2, src_len=4, dim=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = dict(dtype=torch.float64)
    alpha = torch.rand(bsz, heads, tgt_len, src_len, generator=g, **f)
    v = torch.randn(bsz, heads, src_len, dim, generator=g, **f)
    t = torch.randn(tgt_len, bsz, heads, dim, generator=g, **f)
    return [x.requires_grad_() for x in (alpha, v, t)]


@pytest.mark.parametrize("rows", ROWS)
def test_relu_weighted_sum_matches_autograd(rows):
    inputs = _relu_inputs()
    out = relu_weighted_sum(*inputs, block_bytes=rows * 3 * 2 * 4 * 3 * 8)  # a row: (B, H, S, D) in float64
    ref = reference_relu_weighted_sum(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(ref, inputs, grad)
    for name, a, b in zip(("alpha", "v", "t"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)


def test_relu_weighted_sum_gradcheck():
    inputs = _relu_inputs(tgt_len=3, bsz=2, heads=2, src_len=3, dim=2, seed=2)
    assert torch.autograd.gradcheck(lambda *x: relu_weighted_sum(*x, block_bytes=1), inputs)


def test_blocked_products_follow_the_input_dtype_under_autocast():
    """Mixed dtypes (as bf16 autocast hands them over) are computed in one dtype, the log-softmax in float32."""
    base, jump, q, p, r = (x.detach().float() for x in _trilinear_inputs())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = trilinear_log_softmax(base, jump, q.bfloat16(), p.bfloat16(), r.bfloat16())
    assert out.dtype == torch.float32
    ref = reference_trilinear_log_softmax(base, jump, *(x.bfloat16().float() for x in (q, p, r)))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    alpha, v, t = (x.detach() for x in _relu_inputs())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = relu_weighted_sum(alpha.float(), v.bfloat16(), t.bfloat16())
    assert out.dtype == torch.float32
