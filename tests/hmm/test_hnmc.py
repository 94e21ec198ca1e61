"""Hidden neural Markov chain layers: wiring (loop-built potentials + enumeration), the HNMC/HNMC2 contain
the discrete HMM/HMM2 (exact EFB posteriors with the right weights), stacking, gradients, masks."""
import itertools

import numpy as np
import pytest
import torch
from test_efb import HMM, HMM2, brute_force

from hmm_nmt.hmm import efb
from hmm_nmt.hmm.hnmc import HNMC2Layer, HNMCCNLayer, HNMCLayer, HNMCStack, make_architecture

torch.set_num_threads(1)
DT = torch.float64


def enumerate_chain(G, init, order=1):
    """Posteriors of a chain with potentials G (T, N, N) (order 2: (T, N, N, N)) by enumeration."""
    T, N = G.shape[0], G.shape[-1]
    post = np.zeros((T, N))
    prev = itertools.product(range(N), repeat=order)
    for start in prev:
        for x in itertools.product(range(N), repeat=T):
            if order == 1:
                p = init[start[0]]
                seq = (start[0],) + x
                for t in range(T):
                    p *= G[t, seq[t], seq[t + 1]]
            else:
                p = init[start[0], start[1]]
                seq = start + x
                for t in range(T):
                    p *= G[t, seq[t], seq[t + 1], seq[t + 2]]
            for t, i in enumerate(x):
                post[t, i] += p
    return post / post.sum(1, keepdims=True)


def f(z, act):
    return efb.log_positive(torch.as_tensor(z, dtype=DT), act).exp().item()


@pytest.mark.parametrize("act", ["melu", "exp", "sigmoid"])
def test_layers_match_loop_built_potentials(act):
    torch.manual_seed(0)
    D, N, T = 3, 3, 4
    y = torch.randn(1, T, D, dtype=DT)
    # HNMC: G_t(j, i) = f(W y_t + U onehot(j) + c)_i
    layer = HNMCLayer(D, N, act).double()
    W, U, c = layer.weight_y.detach().numpy(), layer.weight_prev.detach().numpy(), layer.bias.detach().numpy()
    Y = y[0].numpy()
    G = np.array([[[f((W @ Y[t] + U[:, j] + c)[i], act) for i in range(N)] for j in range(N)] for t in range(T)])
    want = enumerate_chain(G, np.full(N, 1.0 / N))
    np.testing.assert_allclose(layer(y)[0].exp().detach().numpy(), want, atol=1e-10)
    # HNMC2: G_t(k, j, i) = f(W y_t + U onehot(k, j) + c)_i
    layer = HNMC2Layer(D, 2, act).double()
    N2 = 2
    W, U, c = layer.weight_y.detach().numpy(), layer.weight_pair.detach().numpy(), layer.bias.detach().numpy()
    G = np.array([[[[f((W @ Y[t] + U[:, k * N2 + j] + c)[i], act) for i in range(N2)] for j in range(N2)]
                   for k in range(N2)] for t in range(T)])
    want = enumerate_chain(G, np.full((N2, N2), 1.0 / N2 ** 2), order=2)
    np.testing.assert_allclose(layer(y)[0].exp().detach().numpy(), want, atol=1e-10)
    # HNMC-CN: G_t(j, i) = f(W1 y_{t-1} + W2 y_t + U_I onehot(j) + c_I)_i * f(W3 y_t + U_J onehot(i) + c_J)_j
    layer = HNMCCNLayer(D, N, act).double()
    p = {k: v.detach().numpy() for k, v in layer.named_parameters()}
    Yp = np.vstack([np.zeros(D), Y[:-1]])
    G = np.array([[[f((p["weight_i_prev_obs"] @ Yp[t] + p["weight_i_obs"] @ Y[t] + p["weight_i_prev"][:, j]
                       + p["bias_i"])[i], act)
                     * f((p["weight_j_obs"] @ Y[t] + p["weight_j_next"][:, i] + p["bias_j"])[j], act)
                     for i in range(N)] for j in range(N)] for t in range(T)])
    want = enumerate_chain(G, np.full(N, 1.0 / N))
    np.testing.assert_allclose(layer(y)[0].exp().detach().numpy(), want, atol=1e-10)


def test_hnmc_contains_the_hmm():
    """With one-hot observations, exp activation, W[:, y] = log L_y - log pi, U[i, j] = log a_j(i) and the
    virtual initial state weighted by pi, the HNMC is the EFB of the discrete HMM: exact posteriors."""
    rng = np.random.default_rng(0)
    hmm = HMM(rng, N=3, M=4)
    layer = HNMCLayer(4, 3, "exp").double()
    with torch.no_grad():
        layer.weight_y.copy_(torch.tensor(np.log(hmm.L) - np.log(hmm.pi)[:, None]))
        layer.weight_prev.copy_(torch.tensor(np.log(hmm.a).T))
        layer.bias.zero_()
    for T in (1, 4, 6):
        y = hmm.sample(rng, T)
        onehot = torch.nn.functional.one_hot(torch.tensor([y]), 4).double()
        got = layer(onehot, log_init=torch.tensor(np.log(hmm.pi)))[0].exp().detach().numpy()
        np.testing.assert_allclose(got, brute_force(hmm, y)[0], atol=1e-10)


def test_hnmc2_contains_the_hmm2():
    """Same for the HNMC2 and the stationary HMM2, the virtual initial pair weighted by p(x_t, x_{t+1})."""
    rng = np.random.default_rng(1)
    hmm = HMM2(rng, N=3, M=4)
    layer = HNMC2Layer(4, 3, "exp").double()
    with torch.no_grad():
        layer.weight_y.copy_(torch.tensor(np.log(hmm.L) - np.log(hmm.pi)[:, None]))
        layer.weight_pair.copy_(torch.tensor(np.log(hmm.a2).reshape(9, 3).T))
        layer.bias.zero_()
    Q = hmm.pi[:, None] * hmm.a
    for T in (1, 2, 5):
        y = hmm.sample(rng, T)
        onehot = torch.nn.functional.one_hot(torch.tensor([y]), 4).double()
        got = layer(onehot, log_init=torch.tensor(np.log(Q)))[0].exp().detach().numpy()
        np.testing.assert_allclose(got, brute_force(hmm, y)[0], atol=1e-10)


@pytest.mark.parametrize("kind", ["hnmc", "hnmc2", "hnmc_cn"])
def test_padding_and_stacking(kind):
    torch.manual_seed(1)
    stack = HNMCStack(kind, 5, [4, 3]).double()
    lengths = torch.tensor([6, 2, 4])
    mask = efb.lengths_to_mask(lengths, 6)
    y = torch.randn(3, 6, 5, dtype=DT)
    out = stack(y, mask)
    assert out.shape == (3, 6, 3)
    torch.testing.assert_close(out.logsumexp(-1), torch.zeros(3, 6, dtype=DT))
    for b, n in enumerate(lengths.tolist()):
        alone = stack(y[b:b + 1, :n])
        torch.testing.assert_close(out[b, :n], alone[0], atol=1e-12, rtol=0)
    # stacking = the second layer observes the posteriors of the first
    l1, l2 = stack.layers
    torch.testing.assert_close(out, l2(l1(y, mask).exp(), mask))


@pytest.mark.parametrize("kind", ["hnmc", "hnmc2", "hnmc_cn"])
def test_gradcheck_layers(kind):
    torch.manual_seed(2)
    layer = {"hnmc": HNMCLayer, "hnmc2": HNMC2Layer, "hnmc_cn": HNMCCNLayer}[kind](3, 2).double()
    mask = efb.lengths_to_mask(torch.tensor([3, 2]), 3)
    y = torch.randn(2, 3, 3, dtype=DT, requires_grad=True)
    params = dict(layer.named_parameters())
    names = list(params)

    def fn(y, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps)), (y, mask))

    assert torch.autograd.gradcheck(fn, (y,) + tuple(p.detach().requires_grad_() for p in params.values()))


@pytest.mark.parametrize("arch", [1, 2, 3])
@pytest.mark.parametrize("kind", ["hnmc", "hnmc2", "hnmc_cn"])
def test_architectures(kind, arch):
    torch.manual_seed(3)
    model = make_architecture(kind, arch, input_dim=6, num_outputs=5, hidden_size=4)
    n_layers = {1: 1, 2: 1, 3: 2}[arch]
    assert len(model.stack.layers) == n_layers
    assert (model.classifier is not None) == (arch == 2)
    out = model(torch.randn(2, 7, 6), efb.lengths_to_mask(torch.tensor([7, 3]), 7))
    assert out.shape == (2, 7, 5)
    # a float32 normalisation check of 5 terms: 1e-5 is ~100 float32 ulps at 1 (path comparisons are in DT)
    torch.testing.assert_close(out.logsumexp(-1), torch.zeros(2, 7), atol=1e-5, rtol=0)
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with pytest.raises(ValueError):
        make_architecture(kind, 4, 6, 5, 4)


def test_forward_step_equals_forward_only():
    torch.manual_seed(4)
    layer = HNMCLayer(5, 4)
    y = torch.randn(2, 6, 5)
    full = layer.forward_only(y)
    a = layer.initial_log_alpha(2, y)
    for t in range(6):
        a = layer.step(y[:, t], a)
        torch.testing.assert_close(a, full[:, t])


def test_exp_fast_forward_equals_generic_chain():
    """With the exp activation the potentials factorise; the matmul forward equals the generic DP."""
    torch.manual_seed(5)
    layer = HNMCLayer(5, 6, "exp").double()
    with torch.no_grad():
        layer.weight_prev.mul_(30)  # far apart transition weights: the shifts must keep it exact
    y = torch.randn(3, 40, 5, dtype=DT) * 10
    mask = efb.lengths_to_mask(torch.tensor([40, 17, 1]), 40)
    fast = layer.forward_only(y, mask)
    generic = efb.chain_forward(layer.log_potentials(y), None, mask)[0]
    torch.testing.assert_close(fast, generic, atol=1e-9, rtol=0)
    a = layer.initial_log_alpha(3, y)
    for t in range(5):
        a = layer.step(y[:, t], a)
        torch.testing.assert_close(a[:2], generic[:2, t], atol=1e-9, rtol=0)  # rows long enough
