"""The shared chain module (hmm_nmt.hmm.chain, chain2, semiring) against brute-force enumeration over all
state paths, torch-struct's linear-chain CRF, autograd, and each other; float64 throughout."""
import itertools
import math

import pytest
import torch

from hmm_nmt.hmm import chain, chain2
from hmm_nmt.hmm.semiring import LOG, LOG_SAFE, MAX, ProbLog

D = torch.float64


def _problem(B=3, T=4, N=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    log_G = torch.randn(B, T, N, N, generator=g, dtype=D)
    log_emit = torch.randn(B, T, N, generator=g, dtype=D)
    log_start = torch.randn(B, N, generator=g, dtype=D)
    return log_G, log_emit, log_start


def _path_score(log_G, log_emit, log_start, b, path):
    s = log_start[b, path[0]] + log_emit[b, 0, path[0]]
    for t in range(1, len(path)):
        s = s + log_G[b, t, path[t - 1], path[t]] + log_emit[b, t, path[t]]
    return s


def _all_paths(log_G, log_emit, log_start, b, T):
    N = log_G.size(-1)
    return {p: _path_score(log_G, log_emit, log_start, b, p) for p in itertools.product(range(N), repeat=T)}


def test_forward_and_viterbi_equal_enumeration_with_padding():
    log_G, log_emit, log_start = _problem(B=3, T=4, N=3)
    lengths = torch.tensor([4, 2, 1])
    mask = torch.arange(4)[None] < lengths[:, None]
    fwd = chain.forward(log_G, mask=mask, log_emit=log_emit, log_start=log_start)
    raw = chain.forward(log_G, mask=mask, log_emit=log_emit, log_start=log_start, normalize=False)
    best = chain.forward(log_G, mask=mask, log_emit=log_emit, log_start=log_start, semiring=MAX, normalize=False)
    score, path = chain.viterbi(log_G, mask=mask, log_emit=log_emit, log_start=log_start)
    for b, T in enumerate(lengths.tolist()):
        paths = _all_paths(log_G, log_emit, log_start, b, T)
        values = torch.stack(list(paths.values()))
        assert torch.allclose(fwd.log_Z[b], torch.logsumexp(values, 0), atol=1e-10)
        assert torch.allclose(raw.log_Z[b], torch.logsumexp(values, 0), atol=1e-10)
        top = max(paths, key=lambda p: paths[p].item())
        assert torch.allclose(best.log_Z[b], values.max(), atol=1e-10)
        assert torch.allclose(score[b], values.max(), atol=1e-10)
        assert tuple(path[b, :T].tolist()) == top
        assert (path[b, T:] == -1).all()
    # normalised: log Z is the sum of the per-step normalisers, 0 on padding
    assert torch.allclose(fwd.log_c.sum(1), fwd.log_Z) and (fwd.log_c[~mask] == 0).all()


def test_virtual_start_form_and_time_invariant_potentials():
    """G_0 from a virtual state with weights log_init == an explicit start vector; a (N, N) matrix broadcasts."""
    N, T = 3, 5
    g = torch.Generator().manual_seed(1)
    trans = torch.randn(N, N, generator=g, dtype=D)
    emit = torch.randn(2, T, N, generator=g, dtype=D)
    init = torch.log_softmax(torch.randn(N, generator=g, dtype=D), 0)
    start = torch.logsumexp(init[:, None] + trans, 0).expand(2, N)
    a = chain.forward(trans, init, log_emit=emit)
    b = chain.forward(trans.expand(2, T, N, N), mask=None, log_emit=emit, log_start=start)
    assert torch.allclose(a.log_Z, b.log_Z, atol=1e-12) and torch.allclose(a.log_alpha, b.log_alpha, atol=1e-12)


def test_partition_equals_torch_struct_linear_chain():
    torch_struct = pytest.importorskip("torch_struct")
    log_G, log_emit, log_start = _problem(B=2, T=6, N=4, seed=3)
    lengths = torch.tensor([6, 4])
    mask = torch.arange(6)[None] < lengths[:, None]
    # torch-struct: edge[b, n, z_{n+1}, z_n]
    edge = (log_G[:, 1:] + log_emit[:, 1:, None, :]).transpose(-1, -2).clone()
    edge[:, 0] += (log_start + log_emit[:, 0]).unsqueeze(1)
    dist = torch_struct.LinearChainCRF(edge, lengths=lengths)
    fwd = chain.forward(log_G, mask=mask, log_emit=log_emit, log_start=log_start)
    assert torch.allclose(fwd.log_Z, dist.partition, atol=1e-9)
    score, path = chain.viterbi(log_G, mask=mask, log_emit=log_emit, log_start=log_start)
    assert torch.allclose(score, dist.max, atol=1e-9)
    nodes, _ = chain.marginals(log_G, mask=mask, log_emit=log_emit, log_start=log_start)
    m = dist.marginals
    for b, T in enumerate(lengths.tolist()):
        ref = torch.cat([m[b, 0].sum(0, keepdim=True), m[b, : T - 1].sum(-1)], dim=0)
        assert torch.allclose(nodes[b, :T].exp(), ref, atol=1e-9)


@pytest.mark.parametrize("form", ["potentials", "emissions"])
def test_explicit_marginals_equal_autograd(form):
    log_G, log_emit, log_start = _problem(B=3, T=5, N=4, seed=4)
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 1])[:, None]
    kw = {"log_emit": log_emit, "log_start": log_start} if form == "emissions" else {}
    exp, z1 = chain.marginals(log_G, None, mask, **kw)
    auto, z2 = chain.marginals(log_G, None, mask, method="autograd", **kw)
    assert torch.allclose(z1, z2)
    assert torch.allclose(exp.exp() * mask[..., None], auto.exp(), atol=1e-10)


def test_rabiner_scaled_backward_gives_marginals_directly():
    log_G, log_emit, log_start = _problem(B=2, T=6, N=3, seed=5)
    mask = torch.arange(6)[None] < torch.tensor([6, 4])[:, None]
    fwd = chain.forward(log_G, mask=mask, log_emit=log_emit, log_start=log_start)
    beta = chain.backward(log_G, mask, log_emit=log_emit, normalize=False, log_c=fwd.log_c)
    post, _ = chain.marginals(log_G, None, mask, log_emit=log_emit, log_start=log_start)
    assert torch.allclose((fwd.log_alpha + beta)[mask], post[mask], atol=1e-10)


def test_max_marginals_are_best_path_scores_through_each_state():
    log_G, log_emit, log_start = _problem(B=1, T=4, N=3, seed=6)
    fwd = chain.forward(log_G, log_emit=log_emit, log_start=log_start, semiring=MAX, normalize=False)
    beta = chain.backward(log_G, log_emit=log_emit, semiring=MAX, normalize=False)
    paths = _all_paths(log_G, log_emit, log_start, 0, 4)
    for t in range(4):
        for i in range(3):
            ref = max(v for p, v in paths.items() if p[t] == i)
            assert torch.allclose(fwd.log_alpha[0, t, i] + beta[0, t, i], ref, atol=1e-10)


def test_prob_matmul_semiring_equals_log_semiring():
    g = torch.Generator().manual_seed(7)
    B, T, N = 2, 5, 4
    log_P = torch.log_softmax(torch.randn(B, T, N, N, generator=g, dtype=D), -1)  # [j, i]
    emit = torch.randn(B, T, N, generator=g, dtype=D)
    mask = torch.arange(T)[None] < torch.tensor([5, 2])[:, None]
    a = chain.forward(log_P, None, mask, log_emit=emit)
    b = chain.forward(log_P.exp(), None, mask, log_emit=emit, semiring=ProbLog())
    c = chain.forward(log_P.exp().transpose(-1, -2), None, mask, log_emit=emit, semiring=ProbLog(successor_first=True))
    for x in (b, c):
        assert torch.allclose(a.log_Z, x.log_Z) and torch.allclose(a.log_alpha, x.log_alpha)
    bb = chain.backward(log_P.exp(), mask, log_emit=emit, semiring=ProbLog())
    assert torch.allclose(chain.backward(log_P, mask, log_emit=emit), bb)


def test_safe_semiring_takes_impossible_rows_without_nan():
    log_G, log_emit, log_start = _problem(B=1, T=3, N=3, seed=8)
    log_G = log_G.clone()
    log_G[:, :, :, 2] = float("-inf")  # state 2 is never entered after t = 0
    log_start = log_start.clone().requires_grad_(True)
    z = chain.forward(log_G, log_emit=log_emit, log_start=log_start, semiring=LOG_SAFE, normalize=False).log_Z
    z.sum().backward()
    assert torch.isfinite(z).all() and torch.isfinite(log_start.grad).all()


def test_filter_step_reproduces_the_forward():
    log_G, log_emit, _ = _problem(B=2, T=4, N=3, seed=9)
    fwd = chain.forward(log_G, None, log_emit=log_emit, return_predictive=True)
    a = torch.full((2, 3), -math.log(3), dtype=D)
    for t in range(4):
        pred, a, c = chain.filter_step(a, log_G[:, t], log_emit[:, t])
        assert torch.allclose(pred, fwd.log_pred[:, t]) and torch.allclose(a, fwd.log_alpha[:, t])
        assert torch.allclose(c, fwd.log_c[:, t])


def test_order_two_equals_lifted_order_one_and_enumeration():
    g = torch.Generator().manual_seed(10)
    B, T, N = 2, 4, 3
    log_G2 = torch.randn(B, T, N, N, N, generator=g, dtype=D)
    mask = torch.arange(T)[None] < torch.tensor([4, 3])[:, None]
    post2, z2 = chain2.marginals2(log_G2, None, mask)
    log_G, log_init = chain2.lift2(log_G2)
    post1, z1 = chain.marginals(log_G, log_init, mask)
    assert torch.allclose(z1, z2, atol=1e-10)
    single = torch.logsumexp(post1.view(B, T, N, N), dim=2)  # pair (j, i) -> x_t = i
    assert torch.allclose(single[mask], post2[mask], atol=1e-10)
    score, path = chain2.viterbi2(log_G2, None, mask)
    init = -math.log(N * N)
    for b, L in enumerate([4, 3]):
        # whole paths (x_-2, x_-1, x_0 .. x_{L-1}); the virtual pair is summed (Z) or maximised (Viterbi) over
        scores = {}
        for p in itertools.product(range(N), repeat=L + 2):
            scores[p] = init + sum(log_G2[b, t, p[t], p[t + 1], p[t + 2]] for t in range(L))
        values = torch.stack(list(scores.values()))
        assert torch.allclose(z2[b], torch.logsumexp(values, 0), atol=1e-10)
        for t in range(L):
            for i in range(N):
                ref = torch.logsumexp(torch.stack([v for p, v in scores.items() if p[t + 2] == i]), 0) - z2[b]
                assert torch.allclose(post2[b, t, i], ref, atol=1e-10)
        top = max(scores, key=lambda p: scores[p].item())
        assert torch.allclose(score[b], values.max(), atol=1e-10)
        assert tuple(path[b, :L].tolist()) == top[2:] and (path[b, L:] == -1).all()


def test_semirings_sum():
    x = torch.tensor([[0.0, 1.0, -2.0]], dtype=D)
    assert torch.allclose(LOG.sum(x, -1), torch.logsumexp(x, -1)) and MAX.sum(x, -1).item() == 1.0
    assert LOG_SAFE.sum(torch.full((1, 3), float("-inf")), -1).item() == float("-inf")
