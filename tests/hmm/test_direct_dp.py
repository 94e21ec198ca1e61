"""The direct-HMM dynamic programme against brute force, torch-struct and an explicit backward pass."""
import itertools
import math

import pytest
import torch

from hmm_nmt.hmm import direct


def random_problem(bsz=3, tgt_len=4, src_len=3, seed=0, dtype=torch.float64):
    """Random potentials with target and source padding; every sentence has its own lengths."""
    g = torch.Generator().manual_seed(seed)
    tgt_lens = torch.tensor([tgt_len, tgt_len - 1, max(1, tgt_len - 2)][:bsz])
    src_lens = torch.tensor([src_len, src_len - 1, src_len][:bsz])
    tgt_mask = torch.arange(tgt_len)[None] < tgt_lens[:, None]
    src_pad = torch.arange(src_len)[None] >= src_lens[:, None]
    lex = torch.randn(bsz, tgt_len, src_len, generator=g, dtype=dtype).log_softmax(-1) - 1.0
    mask = lambda x: x.masked_fill(src_pad.view(bsz, *([1] * (x.dim() - 2)), src_len), direct.MASKED)  # noqa: E731
    log_align = torch.log_softmax(mask(torch.randn(bsz, tgt_len, src_len, generator=g, dtype=dtype)), -1)
    log_init = torch.log_softmax(mask(torch.randn(bsz, src_len, generator=g, dtype=dtype)), -1)
    log_trans = torch.log_softmax(mask(torch.randn(bsz, tgt_len, src_len, src_len, generator=g, dtype=dtype)), -1)
    return dict(lex=lex, tgt_mask=tgt_mask, src_pad=src_pad, tgt_lens=tgt_lens, src_lens=src_lens,
                log_align=log_align, log_init=log_init, log_trans=log_trans)


def brute_force(p, order):
    """Sum over every alignment sequence b_1..b_I of the real positions of each sentence."""
    out = []
    for b in range(p["lex"].size(0)):
        n_tgt, n_src = int(p["tgt_lens"][b]), int(p["src_lens"][b])
        total = 0.0
        for align in itertools.product(range(n_src), repeat=n_tgt):
            lp = 0.0
            for i, j in enumerate(align):
                if order == 0:
                    lp += p["log_align"][b, i, j].item()
                elif i == 0:
                    lp += p["log_init"][b, j].item()
                else:
                    lp += p["log_trans"][b, i, align[i - 1], j].item()
                lp += p["lex"][b, i, j].item()
            total += math.exp(lp)
        out.append(math.log(total))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("seed", [0, 1])
def test_zero_order_equals_brute_force(seed):
    p = random_problem(seed=seed)
    ll = direct.zero_order_log_likelihood(p["log_align"], p["lex"], p["tgt_mask"])
    torch.testing.assert_close(ll, brute_force(p, 0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_order_equals_brute_force(seed):
    p = random_problem(bsz=3, tgt_len=4, src_len=4, seed=seed)
    ll = direct.first_order_log_likelihood(p["log_init"], p["log_trans"], p["lex"], p["tgt_mask"])
    torch.testing.assert_close(ll, brute_force(p, 1))


def test_first_order_equals_torch_struct_partition():
    torch_struct = pytest.importorskip("torch_struct")
    p = random_problem(bsz=3, tgt_len=5, src_len=4, seed=3)
    bsz, tgt_len, src_len = p["lex"].shape
    # torch-struct's edge potential phi(n, z_{n+1}, z_n) for n = 0..N-2
    phi = p["log_trans"][:, 1:].transpose(-1, -2) + p["lex"][:, 1:, :, None]
    phi[:, 0] = phi[:, 0] + (p["log_init"] + p["lex"][:, 0])[:, None, :]
    # torch-struct needs every sentence to have >= 2 positions; our third has 3
    crf = torch_struct.LinearChainCRF(phi, lengths=p["tgt_lens"])
    ours = direct.first_order_log_likelihood(p["log_init"], p["log_trans"], p["lex"], p["tgt_mask"])
    torch.testing.assert_close(ours, crf.partition)


def test_padding_does_not_change_likelihood():
    p = random_problem(bsz=3, tgt_len=5, src_len=4, seed=4)
    for order in (0, 1):
        full = direct.log_likelihood(p["lex"], p["tgt_mask"], **potentials(p, order))
        for b in range(3):
            n, m = int(p["tgt_lens"][b]), int(p["src_lens"][b])
            q = {"lex": p["lex"][b:b + 1, :n, :m], "tgt_mask": p["tgt_mask"][b:b + 1, :n],
                 "log_align": p["log_align"][b:b + 1, :n, :m], "log_init": p["log_init"][b:b + 1, :m],
                 "log_trans": p["log_trans"][b:b + 1, :n, :m, :m]}
            alone = direct.log_likelihood(q["lex"], q["tgt_mask"], **potentials(q, order))
            torch.testing.assert_close(full[b:b + 1], alone)


def potentials(p, order):
    if order == 0:
        return {"log_align": p["log_align"]}
    return {"log_init": p["log_init"], "log_trans": p["log_trans"]}


@pytest.mark.parametrize("order", [0, 1])
def test_gradcheck(order):
    p = random_problem(bsz=2, tgt_len=3, src_len=3, seed=5)
    inputs = [p["lex"].clone().requires_grad_()] + [v.clone().requires_grad_() for v in potentials(p, order).values()]
    names = list(potentials(p, order))

    def f(lex, *pots):
        return direct.log_likelihood(lex, p["tgt_mask"], **dict(zip(names, pots)))

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("order", [0, 1])
def test_posteriors_autograd_equal_explicit_forward_backward(order):
    p = random_problem(bsz=3, tgt_len=5, src_len=4, seed=6)
    pots = potentials(p, order)
    auto = direct.posteriors(p["lex"], p["tgt_mask"], **pots)
    explicit = direct.forward_backward(p["lex"], p["tgt_mask"], **pots)
    torch.testing.assert_close(auto, explicit)
    sums = explicit.sum(-1)
    torch.testing.assert_close(sums, p["tgt_mask"].to(sums.dtype))
    # no posterior mass on source padding
    assert explicit.masked_select(p["src_pad"][:, None, :].expand_as(explicit)).abs().max() < 1e-12


def test_first_order_posterior_matches_brute_force_marginal():
    p = random_problem(bsz=1, tgt_len=3, src_len=3, seed=7)
    post = direct.forward_backward(p["lex"], p["tgt_mask"], **potentials(p, 1))[0]
    marg = torch.zeros(3, 3, dtype=torch.float64)
    for align in itertools.product(range(3), repeat=3):
        lp = p["log_init"][0, align[0]] + sum(p["log_trans"][0, i, align[i - 1], align[i]] for i in (1, 2))
        lp = lp + sum(p["lex"][0, i, align[i]] for i in range(3))
        for i, j in enumerate(align):
            marg[i, j] += lp.exp()
    torch.testing.assert_close(post, marg / marg[0].sum())


def test_long_sentence_stays_finite():
    p = random_problem(bsz=2, tgt_len=200, src_len=30, seed=8, dtype=torch.float32)
    ll = direct.first_order_log_likelihood(p["log_init"], p["log_trans"], p["lex"], p["tgt_mask"])
    assert torch.isfinite(ll).all() and (ll < -200).all()


def restricted_brute_force(p, keeps):
    """First-order sum over the alignment sequences whose every b_i lies in the kept set keeps[i] (B, J)."""
    out = []
    for b in range(p["lex"].size(0)):
        n_tgt, n_src = int(p["tgt_lens"][b]), int(p["src_lens"][b])
        total = 0.0
        for align in itertools.product(range(n_src), repeat=n_tgt):
            if not all(keeps[i][b, j] for i, j in enumerate(align)):
                continue
            lp = p["log_init"][b, align[0]].item() + sum(
                p["log_trans"][b, i, align[i - 1], align[i]].item() for i in range(1, n_tgt))
            total += math.exp(lp + sum(p["lex"][b, i, j].item() for i, j in enumerate(align)))
        out.append(math.log(total) if total > 0 else -math.inf)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_first_order_pruned_forward_is_the_restricted_sum_and_a_lower_bound(seed, k):
    p = random_problem(bsz=3, tgt_len=4, src_len=4, seed=seed)
    calls = []

    def gold(i, keep):
        calls.append(keep.clone())
        return p["lex"][:, i].masked_fill(~keep, 0.0)  # only the kept entries may be read

    keep, ll_gold, kept = direct.first_order_topk_paths(p["log_init"], p["log_trans"], gold, p["tgt_mask"],
                                                        ~p["src_pad"], k)
    assert all(torch.equal(keep[:, i], c) for i, c in enumerate(calls))
    keeps = list(keep.unbind(1))
    lex = p["lex"].clone().requires_grad_()
    ll = direct.first_order_pruned_log_likelihood(p["log_init"], p["log_trans"], lex, keep, p["tgt_mask"])
    exact = direct.first_order_log_likelihood(p["log_init"], p["log_trans"], p["lex"], p["tgt_mask"])
    ll.sum().backward()
    assert (lex.grad[~keep] == 0).all()  # scores outside the kept sets are never used
    torch.testing.assert_close(ll, ll_gold)  # eps = 0
    # the pruned forward is exactly the sum over the paths inside the kept sets ...
    torch.testing.assert_close(ll, restricted_brute_force(p, keeps))
    real = p["tgt_mask"]
    assert all((kp.sum(-1) == torch.clamp(p["src_lens"], max=k) * real[:, i]).all() for i, kp in enumerate(keeps))
    # ... hence never above the exact likelihood, and equal to it when K covers every source position
    assert (ll <= exact + 1e-9).all()
    if k >= 4:
        torch.testing.assert_close(ll, exact)
        torch.testing.assert_close(kept.sum(-1), p["tgt_lens"].to(kept.dtype))
    # the pruned model's own likelihood (alignment renormalised over the kept sets) is the same filter
    # without the kept masses: path sum - sum_i log m_i
    filt = direct.first_order_pruned_filter_log_likelihood(p["log_init"], p["log_trans"], p["lex"], keep,
                                                          p["tgt_mask"])
    torch.testing.assert_close(filt, ll.detach() - kept.clamp(min=1e-300).log().masked_fill(~real, 0).sum(-1))
    assert (filt >= ll.detach() - 1e-9).all()


@pytest.mark.parametrize("seed", range(4))
def test_zero_order_topk_restriction_is_a_lower_bound(seed):
    p = random_problem(bsz=3, tgt_len=4, src_len=4, seed=seed)
    exact = direct.zero_order_log_likelihood(p["log_align"], p["lex"], p["tgt_mask"])
    valid = ~p["src_pad"][:, None, :].expand_as(p["lex"])
    for k in (1, 2, 3, 4):
        keep = direct.topk_mask(p["log_align"], valid, k)
        assert (keep.sum(-1) == torch.clamp(p["src_lens"], max=k)[:, None]).all()
        ll = direct.zero_order_log_likelihood(p["log_align"].masked_fill(~keep, direct.MASKED), p["lex"], p["tgt_mask"])
        assert (ll <= exact + 1e-9).all()
        if k == 4:
            torch.testing.assert_close(ll, exact)


def brute_force_links(p, order, allowed):
    """log p(b_i in C_i for every constrained i | E, F) by enumerating every alignment sequence."""
    out = []
    for b in range(p["lex"].size(0)):
        n_tgt, n_src = int(p["tgt_lens"][b]), int(p["src_lens"][b])
        total = kept = 0.0
        for align in itertools.product(range(n_src), repeat=n_tgt):
            lp = sum((p["log_align"][b, i, j] if order == 0 else p["log_init"][b, j] if i == 0
                      else p["log_trans"][b, i, align[i - 1], j]).item() + p["lex"][b, i, j].item()
                     for i, j in enumerate(align))
            total += math.exp(lp)
            if all(allowed[b, i, j] or not allowed[b, i].any() for i, j in enumerate(align)):
                kept += math.exp(lp)
        out.append(math.log(kept / total) if kept else -math.inf)
    return torch.tensor(out, dtype=torch.float64)


def random_links(p, seed):
    """Allowed sets on some real (i, j): rows with one, two or no allowed positions."""
    g = torch.Generator().manual_seed(seed)
    real = p["tgt_mask"][:, :, None] & ~p["src_pad"][:, None, :]
    allowed = (torch.rand(real.shape, generator=g) < 0.4) & real
    allowed[:, 0] = False  # a free row
    return allowed


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("seed", [0, 1])
def test_link_log_posterior_equals_brute_force(order, seed):
    p = random_problem(bsz=3, tgt_len=4, src_len=4, seed=seed)
    allowed = random_links(p, seed)
    assert allowed.any(-1).sum() >= 3 and (allowed.sum(-1) >= 2).any()  # the draw has multi-position rows
    got = direct.link_log_posterior(p["lex"], p["tgt_mask"], allowed, **potentials(p, order))
    torch.testing.assert_close(got, brute_force_links(p, order, allowed))
    assert (got <= 1e-12).all()


@pytest.mark.parametrize("order", [0, 1])
def test_one_link_is_the_posterior(order):
    """With a single allowed position j at one target position i, it is log p(b_i = j | E, F)."""
    p = random_problem(bsz=3, tgt_len=4, src_len=3, seed=5)
    post = direct.forward_backward(p["lex"], p["tgt_mask"], **potentials(p, order))
    for i, j in ((0, 1), (1, 0), (2, 1)):
        allowed = torch.zeros_like(post, dtype=torch.bool)
        allowed[:, i, j] = True
        got = direct.link_log_posterior(p["lex"], p["tgt_mask"], allowed, **potentials(p, order))
        real = p["tgt_mask"][:, i]  # a padded target position is no evidence: 0
        torch.testing.assert_close(got, torch.where(real, post[:, i, j].log(), torch.zeros_like(got)))


def test_no_links_is_zero_and_gradient_is_finite():
    p = random_problem(bsz=3, tgt_len=4, src_len=4, seed=6)
    lex = p["lex"].clone().requires_grad_(True)
    free = torch.zeros(lex.shape, dtype=torch.bool)
    torch.testing.assert_close(direct.link_log_posterior(lex, p["tgt_mask"], free, **potentials(p, 1)),
                               torch.zeros(3, dtype=torch.float64))
    allowed = random_links(p, 0)
    direct.link_log_posterior(lex, p["tgt_mask"], allowed, **potentials(p, 1)).sum().backward()
    assert torch.isfinite(lex.grad).all() and lex.grad.abs().sum() > 0
