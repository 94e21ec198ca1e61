"""Entropic forward-backward == classic forward-backward == brute force, for HMM, HMM2 and HMM-CN.

The models are random discrete ones with known parameters; the EFB inputs L_y(i) = p(x = i | y), I and
J are computed from them exactly as the paper defines them (stationary marginals), so the EFB posteriors
must equal the true posteriors p(x_t | y_{1:T}). Oracles independent of hmm_nmt.hmm.efb: enumeration of
all state sequences (short T), a textbook scaled forward-backward in numpy (long T, where the
unnormalised recursion underflows) and torch-struct's LinearChainCRF.
"""
import itertools
import math

import numpy as np
import pytest
import torch

from hmm_nmt.hmm import efb

torch.set_num_threads(1)
DT = torch.float64


def stochastic(rng, *shape, axis=-1):
    x = rng.gamma(0.7, size=shape) + 1e-3
    return x / x.sum(axis=axis, keepdims=True)


def stationary(P):
    """Stationary distribution of a row-stochastic matrix P (left eigenvector of eigenvalue 1)."""
    w, v = np.linalg.eig(P.T)
    s = np.real(v[:, np.argmin(np.abs(w - 1))])
    s = s / s.sum()
    assert np.all(s > 0) and np.allclose(s @ P, s)
    return s


# ------------------------------------------------------------------------------------------------ models
class HMM:
    def __init__(self, rng, N=3, M=4):
        self.N, self.M = N, M
        self.a = stochastic(rng, N, N)
        self.pi = stationary(self.a)
        self.b = stochastic(rng, N, M)  # b[i, y] = p(y | x = i)
        self.L = (self.pi[:, None] * self.b) / (self.pi[:, None] * self.b).sum(0, keepdims=True)  # L[i, y]

    def sample(self, rng, T):
        x = [rng.choice(self.N, p=self.pi)]
        for _ in range(T - 1):
            x.append(rng.choice(self.N, p=self.a[x[-1]]))
        return [rng.choice(self.M, p=self.b[i]) for i in x]

    def joint(self, x, y):
        p = self.pi[x[0]] * self.b[x[0], y[0]]
        for t in range(1, len(y)):
            p *= self.a[x[t - 1], x[t]] * self.b[x[t], y[t]]
        return p

    def potentials(self, y):
        """Classic potentials G_t(j, i) for the numpy scaled oracle (step 0: pi b, j ignored)."""
        G = [np.tile(self.pi * self.b[:, y[0]], (self.N, 1))]
        G += [self.a * self.b[:, y[t]][None, :] for t in range(1, len(y))]
        return G

    def efb(self, ys, mask=None):
        log_L = torch.tensor(np.log(self.L.T[np.array(ys)]), dtype=DT)  # (B, T, N)
        return efb.efb_hmm(log_L, torch.tensor(np.log(self.pi)), torch.tensor(np.log(self.a)), mask)

    def classic(self, ys, mask=None):
        log_b = torch.tensor(np.log(self.b.T[np.array(ys)]), dtype=DT)
        return efb.classic_fb_hmm(torch.tensor(np.log(self.pi)), torch.tensor(np.log(self.a)), log_b, mask)


class HMM2:
    """Order-2 chain started from the stationary distribution of its pair chain, so p(x_t) = pi."""

    def __init__(self, rng, N=3, M=4):
        self.N, self.M = N, M
        self.a2 = stochastic(rng, N, N, N)  # a2[k, j, i]
        P = np.zeros((N * N, N * N))
        for k, j, i in itertools.product(range(N), repeat=3):
            P[k * N + j, j * N + i] = self.a2[k, j, i]
        Q = stationary(P).reshape(N, N)  # Q[j, i] = p(x_t = j, x_{t+1} = i)
        self.pi = Q.sum(1)
        assert np.allclose(self.pi, Q.sum(0))
        self.a = Q / self.pi[:, None]
        self.b = stochastic(rng, N, M)
        self.L = (self.pi[:, None] * self.b) / (self.pi[:, None] * self.b).sum(0, keepdims=True)

    def sample(self, rng, T):
        x = [rng.choice(self.N, p=self.pi)]
        if T > 1:
            x.append(rng.choice(self.N, p=self.a[x[0]]))
        for _ in range(T - 2):
            x.append(rng.choice(self.N, p=self.a2[x[-2], x[-1]]))
        return [rng.choice(self.M, p=self.b[i]) for i in x]

    def joint(self, x, y):
        p = self.pi[x[0]] * self.b[x[0], y[0]]
        if len(y) > 1:
            p *= self.a[x[0], x[1]] * self.b[x[1], y[1]]
        for t in range(2, len(y)):
            p *= self.a2[x[t - 2], x[t - 1], x[t]] * self.b[x[t], y[t]]
        return p

    def args(self):
        return tuple(torch.tensor(np.log(v)) for v in (self.pi, self.a, self.a2))

    def efb(self, ys, mask=None):
        log_L = torch.tensor(np.log(self.L.T[np.array(ys)]), dtype=DT)
        log_pi, log_a, log_a2 = self.args()
        return efb.efb_hmm2(log_L, log_pi, log_a, log_a2, mask)

    def classic(self, ys, mask=None):
        log_b = torch.tensor(np.log(self.b.T[np.array(ys)]), dtype=DT)
        log_pi, log_a, log_a2 = self.args()
        return efb.classic_fb_hmm2(log_pi, log_a, log_a2, log_b, mask)


class HMMCN:
    """HMM with complexified noise: the pair (x_t, y_t) is a Markov chain with
    p(x_{t+1}, y_{t+1} | x_t, y_t) = I_{x_t, y_t}(x_{t+1}) c(y_{t+1} | x_t, x_{t+1}), started stationary."""

    def __init__(self, rng, N=3, M=4):
        self.N, self.M = N, M
        self.I = stochastic(rng, N, M, N)  # I[j, y, i] = p(x_{t+1} = i | x_t = j, y_t = y)
        self.c = stochastic(rng, N, N, M)  # c[j, i, y] = p(y_{t+1} = y | x_t = j, x_{t+1} = i)
        P = np.einsum("jyi,jiz->jyiz", self.I, self.c).reshape(N * M, N * M)
        self.mu = stationary(P).reshape(N, M)  # mu[i, y] = p(x_t = i, y_t = y)
        self.pi = self.mu.sum(1)
        Q = np.einsum("jy,jyi->ji", self.mu, self.I)  # Q[j, i] = p(x_t = j, x_{t+1} = i)
        self.a = Q / self.pi[:, None]
        self.L = self.mu / self.mu.sum(0, keepdims=True)  # L[i, y] = p(x_t = i | y_t = y)
        joint = Q[:, :, None] * self.c  # p(x_t = j, x_{t+1} = i, y_{t+1} = y)
        # the marginal of (x_{t+1}, y_{t+1}) seen through the last transition is again mu (stationarity)
        assert np.allclose(joint.sum(0), self.mu)
        self.J = joint / joint.sum(0, keepdims=True)  # J[j, i, y] = p(x_t = j | x_{t+1} = i, y_{t+1} = y)

    def sample(self, rng, T):
        k = rng.choice(self.N * self.M, p=self.mu.reshape(-1))
        x, y = [k // self.M], [k % self.M]
        for _ in range(T - 1):
            i = rng.choice(self.N, p=self.I[x[-1], y[-1]])
            y.append(rng.choice(self.M, p=self.c[x[-1], i]))
            x.append(i)
        return y

    def joint(self, x, y):
        p = self.mu[x[0], y[0]]
        for t in range(1, len(y)):
            p *= self.I[x[t - 1], y[t - 1], x[t]] * self.c[x[t - 1], x[t], y[t]]
        return p

    def potentials(self, y):
        G = [np.tile(self.mu[:, y[0]], (self.N, 1))]
        G += [self.I[:, y[t - 1], :] * self.c[:, :, y[t]] for t in range(1, len(y))]
        return G

    def efb(self, ys, mask=None):
        Y = np.array(ys)
        log_L = torch.tensor(np.log(self.L.T[Y]))
        log_I = torch.tensor(np.log(np.moveaxis(self.I, 1, 0)[Y]))  # [b, t, j, i]
        log_J = torch.tensor(np.log(np.moveaxis(self.J, 2, 0)[Y]).swapaxes(-1, -2))  # [b, t, i, j]
        return efb.efb_hmm_cn(log_L, torch.tensor(np.log(self.pi)), torch.tensor(np.log(self.a)), log_I, log_J, mask)

    def classic(self, ys, mask=None):
        Y = np.array(ys)
        log_p1 = torch.tensor(np.log(self.mu[:, Y[:, 0]].T))
        log_I = torch.tensor(np.log(np.moveaxis(self.I, 1, 0)[Y]))
        log_c = torch.tensor(np.log(np.moveaxis(self.c, 2, 0)[Y]))  # [b, t, j, i]
        return efb.classic_fb_hmm_cn(log_p1, log_I, log_c, mask)


# ------------------------------------------------------------------------------------------------ oracles
def brute_force(model, y):
    """p(x_t = i | y) by enumerating all N^T state sequences, and p(y)."""
    T, N = len(y), model.N
    post = np.zeros((T, N))
    for x in itertools.product(range(N), repeat=T):
        p = model.joint(x, y)
        for t, i in enumerate(x):
            post[t, i] += p
    return post / post.sum(1, keepdims=True), post[0].sum()


def scaled_fb(G):
    """Textbook scaled forward-backward (Rabiner) over potentials G_t(j, i), numpy float64."""
    T, N = len(G), G[0].shape[0]
    alpha = np.zeros((T, N))
    beta = np.ones((T, N))
    a = np.full(N, 1.0 / N)
    log_like = 0.0
    for t in range(T):
        a = a @ G[t]
        log_like += math.log(a.sum())
        a = a / a.sum()
        alpha[t] = a
    for t in range(T - 2, -1, -1):
        b = G[t + 1] @ beta[t + 1]
        beta[t] = b / b.sum()
    post = alpha * beta
    return post / post.sum(1, keepdims=True), log_like


def pair_potentials(model, y):
    """HMM2 as an order-1 chain over pairs (x_{t-1}, x_t) (N^2 states) for the numpy oracle."""
    N = model.N
    G = []
    for t in range(len(y)):
        g = np.zeros((N * N, N * N))
        for k, j, i in itertools.product(range(N), repeat=3):
            if t == 0:
                g[k * N + j, j * N + i] = model.pi[i] * model.b[i, y[0]]
            elif t == 1:
                g[k * N + j, j * N + i] = model.a[j, i] * model.b[i, y[1]]
            else:
                g[k * N + j, j * N + i] = model.a2[k, j, i] * model.b[i, y[t]]
        G.append(g)
    return G


def pad_batch(seqs):
    T = max(len(s) for s in seqs)
    ys = [list(s) + [0] * (T - len(s)) for s in seqs]
    mask = torch.tensor([[t < len(s) for t in range(T)] for s in seqs])
    return ys, mask


MODELS = {"hmm": HMM, "hmm2": HMM2, "hmm_cn": HMMCN}


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("name", sorted(MODELS))
def test_efb_equals_classic_and_brute_force(name):
    rng = np.random.default_rng(0)
    for trial in range(3):
        model = MODELS[name](rng, N=3, M=4)
        seqs = [model.sample(rng, T) for T in (1, 2, 3, 5, 6)]
        ys, mask = pad_batch(seqs)
        post_efb = model.efb(ys, mask)[0].exp()
        post_fb, log_py = model.classic(ys, mask)
        post_fb = post_fb.exp()
        for b, y in enumerate(seqs):
            truth, py = brute_force(model, y)
            T = len(y)
            np.testing.assert_allclose(post_efb[b, :T].numpy(), truth, atol=1e-10, rtol=0)
            np.testing.assert_allclose(post_fb[b, :T].numpy(), truth, atol=1e-10, rtol=0)
            np.testing.assert_allclose(log_py[b].item(), math.log(py), rtol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_long_sequences_do_not_underflow(name):
    rng = np.random.default_rng(1)
    model = MODELS[name](rng, N=3, M=4)
    T = 2000
    seqs = [model.sample(rng, T), model.sample(rng, T - 537)]
    ys, mask = pad_batch(seqs)
    post_efb, log_z_efb = model.efb(ys, mask)
    post_fb, log_py = model.classic(ys, mask)
    assert torch.isfinite(post_efb[mask]).all() and torch.isfinite(post_fb[mask]).all()
    for b, y in enumerate(seqs):
        G = pair_potentials(model, y) if name == "hmm2" else model.potentials(y)
        # the unnormalised classic forward underflows to exactly 0 in float64 here
        a = np.full(G[0].shape[0], 1.0 / G[0].shape[0])
        for g in G:
            a = a @ g
        assert a.sum() == 0.0
        truth, log_like = scaled_fb(G)
        if name == "hmm2":
            N = model.N
            truth = truth.reshape(len(y), N, N).sum(1)
        T_b = len(y)
        np.testing.assert_allclose(post_efb[b, :T_b].exp().numpy(), truth, atol=1e-6, rtol=0)
        np.testing.assert_allclose(post_fb[b, :T_b].exp().numpy(), truth, atol=1e-6, rtol=0)
        np.testing.assert_allclose(log_py[b].item(), log_like, rtol=1e-9)
        assert log_like < -1000  # p(y) itself is far below the float64 range


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_long_hmm_matches_torch_struct():
    torch_struct = pytest.importorskip("torch_struct")
    rng = np.random.default_rng(2)
    model = HMM(rng, N=4, M=5)
    lengths = [1500, 900]
    seqs = [model.sample(rng, T) for T in lengths]
    ys, mask = pad_batch(seqs)
    post = model.efb(ys, mask)[0].exp()
    # linear-chain CRF over edges: log_potentials[b, n, z_{n+1}, z_n]
    Y = np.array(ys)
    log_b = torch.tensor(np.log(model.b.T[Y]))
    edge = torch.tensor(np.log(model.a)).T.view(1, 1, 4, 4) + log_b[:, 1:].unsqueeze(-1)
    edge = edge.clone()
    edge[:, 0] += (torch.tensor(np.log(model.pi)) + log_b[:, 0]).unsqueeze(1)
    dist = torch_struct.LinearChainCRF(edge, lengths=torch.tensor(lengths))
    m = dist.marginals  # (B, T-1, N, N)
    for b, T in enumerate(lengths):
        nodes = torch.cat([m[b, 0].sum(0, keepdim=True), m[b, : T - 1].sum(-1)], dim=0)
        np.testing.assert_allclose(post[b, :T].numpy(), nodes.detach().numpy(), atol=1e-6, rtol=0)


def test_padding_gives_same_posteriors():
    rng = np.random.default_rng(3)
    for name, cls in MODELS.items():
        model = cls(rng)
        seqs = [model.sample(rng, T) for T in (7, 3, 1, 5)]
        ys, mask = pad_batch(seqs)
        batched = model.efb(ys, mask)[0]
        for b, y in enumerate(seqs):
            alone = model.efb([y])[0][0]
            torch.testing.assert_close(batched[b, : len(y)], alone, atol=1e-12, rtol=0)
        # junk in the padding does not change anything
        ys_junk = [list(s) + [3] * (len(ys[0]) - len(s)) for s in seqs]
        torch.testing.assert_close(model.efb(ys_junk, mask)[0][mask], batched[mask], atol=1e-12, rtol=0)


def test_posteriors_are_gradients_of_log_partition():
    """torch-struct identity: d log Z / d log G_t(j, i) = p(x_{t-1} = j, x_t = i); summing over j gives the
    EFB posteriors (forward and backward are consistent with each other)."""
    g = torch.Generator().manual_seed(0)
    B, T, N = 3, 6, 4
    log_G = torch.randn(B, T, N, N, dtype=DT, generator=g, requires_grad=True)
    mask = efb.lengths_to_mask(torch.tensor([6, 4, 1]), T)
    log_post, log_Z = efb.chain_posteriors(log_G, None, mask)
    (grad,) = torch.autograd.grad(log_Z.sum(), log_G)
    node = grad.sum(2)
    torch.testing.assert_close(node[mask], log_post.exp()[mask], atol=1e-10, rtol=0)
    assert grad[~mask].abs().max() == 0  # padded steps contribute nothing

    log_G2 = torch.randn(B, T, N, N, N, dtype=DT, generator=g, requires_grad=True)
    log_post2, log_Z2 = efb.chain2_posteriors(log_G2, None, mask)
    (grad2,) = torch.autograd.grad(log_Z2.sum(), log_G2)
    torch.testing.assert_close(grad2.sum((2, 3))[mask], log_post2.exp()[mask], atol=1e-10, rtol=0)


def test_gradcheck_tiny():
    g = torch.Generator().manual_seed(1)
    mask = efb.lengths_to_mask(torch.tensor([4, 2]), 4)
    log_G = torch.randn(2, 4, 3, 3, dtype=DT, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda G: efb.chain_posteriors(G, None, mask), (log_G,))
    log_G2 = torch.randn(2, 4, 2, 2, 2, dtype=DT, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda G: efb.chain2_posteriors(G, None, mask), (log_G2,))
    # through the paper's parametrisation, with respect to L and the transition matrix
    log_L = torch.randn(2, 4, 3, dtype=DT, generator=g).log_softmax(-1).requires_grad_()
    log_pi = torch.randn(3, dtype=DT, generator=g).log_softmax(-1).requires_grad_()
    log_a = torch.randn(3, 3, dtype=DT, generator=g).log_softmax(-1).requires_grad_()
    assert torch.autograd.gradcheck(lambda L, p, a: efb.efb_hmm(L, p, a, mask)[0], (log_L, log_pi, log_a))


def test_melu_and_positive_activations():
    x = torch.linspace(-700, 50, 20001, dtype=DT)
    melu = efb.log_melu(x).exp()
    assert (melu > 0).all()
    torch.testing.assert_close(melu[x > 0], 1 + x[x > 0])
    torch.testing.assert_close(melu[x <= 0], x[x <= 0].exp())
    # differentiable, continuous first derivative at 0 (both branches have slope 1 there)
    z = torch.tensor([-1e-7, 0.0, 1e-7], dtype=DT, requires_grad=True)
    (d,) = torch.autograd.grad(efb.log_melu(z).exp().sum(), z)
    torch.testing.assert_close(d, torch.ones(3, dtype=DT), atol=1e-6, rtol=0)
    assert torch.autograd.gradcheck(efb.log_melu, (torch.randn(50, dtype=DT, requires_grad=True),))
    for act in ("melu", "exp", "sigmoid"):
        v = efb.log_positive(torch.tensor([-30.0, 0.0, 30.0], dtype=DT), act)
        assert torch.isfinite(v).all() and (v.exp() > 0).all()
    torch.testing.assert_close(efb.log_positive(x[:5], "sigmoid").exp(), torch.sigmoid(x[:5]))
    with pytest.raises(ValueError, match="unknown positive activation"):
        efb.log_positive(x, "relu")
