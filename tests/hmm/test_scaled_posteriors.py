"""The scaled forward-backward in probability space (hmm_nmt.hmm.scaled: the first order's likelihood, its
gradients and direct.scaled_posteriors) against the log-space recursion, brute force over alignments, gradcheck,
and the underflow it must not hide."""
import itertools
import math

import pytest
import torch

from hmm_nmt.hmm import direct, scaled


def log_space_log_z(lex, tgt_mask, log_init, log_trans):
    """The oracle: the log-space forward of the chain module (direct.first_order_forward)."""
    q = direct.first_order_forward(log_init, log_trans, lex, tgt_mask)
    return torch.logsumexp(q[:, -1], dim=-1)


def log_space_grads(lex, tgt_mask, log_init, log_trans, weights=None):
    """Gradients of sum_b w_b log p(E_b | F_b) w.r.t. lex, log_init, log_trans by autograd through the log-space
    recursion."""
    args = [x.detach().clone().requires_grad_() for x in (lex, log_init, log_trans)]
    ll = log_space_log_z(args[0], tgt_mask, args[1], args[2])
    w = torch.ones_like(ll) if weights is None else weights
    return torch.autograd.grad((ll * w).sum(), args)


def problem(bsz=3, tgt_len=5, src_len=4, seed=0, dtype=torch.float64, scale=1.0):
    """Random first-order potentials; sentence b has its own target and source lengths (padding on both)."""
    g = torch.Generator().manual_seed(seed)
    tgt_lens = torch.tensor([tgt_len, tgt_len - 1, max(1, tgt_len - 3)][:bsz])
    src_lens = torch.tensor([src_len, src_len - 1, src_len][:bsz])
    tgt_mask = torch.arange(tgt_len)[None] < tgt_lens[:, None]
    src_pad = torch.arange(src_len)[None] >= src_lens[:, None]

    def masked(x):
        return x.masked_fill(src_pad.view(bsz, *([1] * (x.dim() - 2)), src_len), direct.MASKED)

    lex = (scale * torch.randn(bsz, tgt_len, src_len, generator=g, dtype=dtype)).log_softmax(-1) - 1.0
    log_init = masked(scale * torch.randn(bsz, src_len, generator=g, dtype=dtype)).log_softmax(-1)
    log_trans = masked(scale * torch.randn(bsz, tgt_len, src_len, src_len, generator=g, dtype=dtype)).log_softmax(-1)
    return dict(lex=lex, tgt_mask=tgt_mask, src_pad=src_pad, log_init=log_init, log_trans=log_trans,
                tgt_lens=tgt_lens, src_lens=src_lens)


def args(p):
    return (p["lex"], p["tgt_mask"]), {"log_init": p["log_init"], "log_trans": p["log_trans"]}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("scale", [1.0, 6.0])
def test_scaled_equals_log_space_posteriors(seed, scale):
    p = problem(seed=seed, scale=scale)
    a, kw = args(p)
    scaled = direct.scaled_posteriors(*a, **kw)
    torch.testing.assert_close(scaled, log_space_grads(*a, kw["log_init"], kw["log_trans"])[0])
    torch.testing.assert_close(scaled, direct.forward_backward(*a, **kw))
    torch.testing.assert_close(scaled.sum(-1), p["tgt_mask"].to(scaled.dtype))
    assert scaled.masked_select(p["src_pad"][:, None, :].expand_as(scaled)).abs().max() == 0


def test_scaled_equals_brute_force_marginals():
    p = problem(bsz=3, tgt_len=4, src_len=3, seed=3, scale=3.0)
    a, kw = args(p)
    scaled = direct.scaled_posteriors(*a, **kw)
    for b in range(3):
        n_tgt, n_src = int(p["tgt_lens"][b]), int(p["src_lens"][b])
        marg = torch.zeros(n_tgt, n_src, dtype=torch.float64)
        for align in itertools.product(range(n_src), repeat=n_tgt):
            lp = p["log_init"][b, align[0]] + sum(p["log_trans"][b, i, align[i - 1], align[i]] for i in range(1, n_tgt))
            lp = lp + sum(p["lex"][b, i, align[i]] for i in range(n_tgt))
            for i, j in enumerate(align):
                marg[i, j] += lp.exp()
        torch.testing.assert_close(scaled[b, :n_tgt, :n_src], marg / marg[0].sum())


def test_zero_order_is_the_closed_form():
    p = problem(seed=4)
    log_align = p["log_trans"][:, :, 0]
    got = direct.scaled_posteriors(p["lex"], p["tgt_mask"], log_align=log_align)
    torch.testing.assert_close(got, direct.posteriors(p["lex"], p["tgt_mask"], log_align=log_align))


def test_float32_is_as_close_to_float64_as_the_log_space_recursion():
    """On a batch the size the aligner runs, the float32 scaled posteriors are no farther from the float64 ones
    than the float32 log-space posteriors are."""
    p = problem(bsz=3, tgt_len=40, src_len=35, seed=5, scale=3.0)
    a, kw = args(p)
    exact = direct.forward_backward(*a, **kw)
    a32 = tuple(x.float() if x.is_floating_point() else x for x in a)
    kw32 = {k: v.float() for k, v in kw.items()}
    err_scaled = (direct.scaled_posteriors(*a32, **kw32).double() - exact).abs().max()
    err_log = (direct.forward_backward(*a32, **kw32).double() - exact).abs().max()
    assert err_scaled <= max(err_log, 1e-6)


def test_underflowing_transitions_fall_back_to_log_space(monkeypatch):
    """Sentence 1's lexicon allows one path only, and that path's transitions are e^-100 and e^-120: in
    float32 they underflow to 0 and the step's mass with them. The raised-entry bound catches it and that
    sentence (only) is recomputed in log space; sentence 0 is left to the scaled recursion."""
    p = problem(bsz=2, tgt_len=3, src_len=3, seed=6, dtype=torch.float32)
    p["tgt_mask"][:] = True
    p["src_pad"][:] = False
    lex = torch.full((2, 3, 3), -2.0)
    lex[1] = direct.MASKED
    lex[1, 0, 0] = lex[1, 1, 2] = lex[1, 2, 1] = -1.0  # the only path: 0 -> 2 -> 1
    log_trans = torch.log_softmax(torch.randn(2, 3, 3, 3), -1)
    log_trans[1, 1, 0] = torch.tensor([0.0, -1e-30, -100.0])  # into j=2 from j'=0: e^-100
    log_trans[1, 2, 2] = torch.tensor([-1e-30, -120.0, 0.0])  # into j=1 from j'=2: e^-120
    log_init = torch.log_softmax(torch.randn(2, 3), -1)
    calls = []
    original = scaled._log_space_log_z

    def spy(lex_, *rest):
        calls.append(lex_.size(0))
        return original(lex_, *rest)

    monkeypatch.setattr(scaled, "_log_space_log_z", spy)
    got = direct.scaled_posteriors(lex, p["tgt_mask"], log_init=log_init, log_trans=log_trans)
    assert calls == [1]
    expected = torch.zeros(3, 3)
    expected[0, 0] = expected[1, 2] = expected[2, 1] = 1.0
    torch.testing.assert_close(got[1], expected)
    torch.testing.assert_close(got[0], direct.forward_backward(lex[:1], p["tgt_mask"][:1], log_init=log_init[:1],
                                                               log_trans=log_trans[:1])[0])
    # the likelihood and its gradients redo the same sentence, forward and backward
    calls.clear()
    lex_ = lex.clone().requires_grad_()
    ll = direct.first_order_log_likelihood(log_init, log_trans, lex_, p["tgt_mask"])
    torch.testing.assert_close(ll, original(lex, p["tgt_mask"], log_init, log_trans))
    (grad,) = torch.autograd.grad(ll.sum(), lex_)
    assert calls == [1, 1]
    torch.testing.assert_close(grad, got)


def test_bound_covers_the_raised_entries():
    """Transitions below e^FLOOR that carry real posterior mass are not silently raised: with two paths whose
    transitions are e^-100 and e^-95, the log-space answer (mass e^-5 : 1) comes back, not the raised one."""
    lex = torch.full((1, 2, 2), direct.MASKED, dtype=torch.float64)
    lex[0, 0, 0] = 0.0
    lex[0, 1] = 0.0
    log_init = torch.tensor([[0.0, direct.MASKED]], dtype=torch.float64).log_softmax(-1)
    log_trans = torch.zeros(1, 2, 2, 2, dtype=torch.float64)
    log_trans[0, 1, 0] = torch.tensor([-100.0, -95.0])
    mask = torch.ones(1, 2, dtype=torch.bool)
    got = direct.scaled_posteriors(lex, mask, log_init=log_init, log_trans=log_trans)
    w = torch.tensor([math.exp(-5.0), 1.0], dtype=torch.float64)
    torch.testing.assert_close(got[0, 1], w / w.sum())


def test_long_sentence_stays_finite_and_sums_to_one():
    p = problem(bsz=2, tgt_len=200, src_len=30, seed=8, dtype=torch.float32, scale=4.0)
    a, kw = args(p)
    post = direct.scaled_posteriors(*a, **kw)
    assert torch.isfinite(post).all()
    torch.testing.assert_close(post.sum(-1), p["tgt_mask"].float())


@pytest.mark.parametrize("seed", [0, 1])
def test_likelihood_and_gradients_equal_the_log_space_recursion(seed):
    """log p(E | F) and its gradients w.r.t. the lexicon, start and transition scores (the closed-form backward)
    equal autograd through the log-space recursion, with a weight per sentence and padding on both sides."""
    p = problem(bsz=3, tgt_len=6, src_len=5, seed=seed, scale=3.0)
    args = [p[k].clone().requires_grad_() for k in ("lex", "log_init", "log_trans")]
    ll = direct.first_order_log_likelihood(args[1], args[2], args[0], p["tgt_mask"])
    torch.testing.assert_close(ll, log_space_log_z(p["lex"], p["tgt_mask"], p["log_init"], p["log_trans"]))
    w = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    got = torch.autograd.grad((ll * w).sum(), args)
    want = log_space_grads(p["lex"], p["tgt_mask"], p["log_init"], p["log_trans"], w)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)


def test_gradcheck():
    p = problem(bsz=2, tgt_len=3, src_len=3, seed=9)
    inputs = [p[k].clone().requires_grad_() for k in ("lex", "log_init", "log_trans")]
    assert torch.autograd.gradcheck(lambda lex, i, t: scaled.log_likelihood(i, t, lex, p["tgt_mask"]), inputs)


def test_links_restriction_trains_through_an_underflowing_path():
    """The second pass's loss masks the lexicon outside the links; where the linked path needs a transition of
    e^-100, log Z_C and its gradient come from the log-space recursion, finite and exact."""
    p = problem(bsz=1, tgt_len=2, src_len=2, seed=10, dtype=torch.float32)
    log_trans = p["log_trans"].clone()
    log_trans[0, 1, 0] = torch.tensor([0.0, -100.0])
    log_init = torch.tensor([[0.0, -200.0]])
    allowed = torch.tensor([[[True, False], [False, True]]])
    lex = p["lex"].clone().requires_grad_()
    got = direct.link_log_posterior(lex, p["tgt_mask"], allowed, log_init=log_init, log_trans=log_trans)
    restricted = p["lex"] + direct.restriction(allowed)
    want = log_space_log_z(restricted, p["tgt_mask"], log_init, log_trans) \
        - log_space_log_z(p["lex"], p["tgt_mask"], log_init, log_trans)
    torch.testing.assert_close(got, want)
    (grad,) = torch.autograd.grad(got.sum(), lex)
    assert torch.isfinite(grad).all()
