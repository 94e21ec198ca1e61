"""IOHMM core (hmm_nmt.hmm.iohmm): oracles, posteriors, EM/GEM monotonicity, masks, constraints."""
import itertools

import pytest
import torch

from hmm_nmt.hmm import iohmm

torch.set_num_threads(1)
D = torch.float64


def random_potentials(B, T, n, graph=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(B, T, n, n, generator=g, dtype=D)
    if graph is not None:
        a = a.masked_fill(~graph, float("-inf"))
    log_phi = torch.log_softmax(a, dim=-2)
    log_f = torch.randn(B, T, n, generator=g, dtype=D) * 2
    log_zeta0 = torch.log_softmax(torch.randn(n, generator=g, dtype=D), 0)
    return log_phi, log_f, log_zeta0


def brute_force(log_phi, log_f, log_zeta0, lengths):
    """Enumerate every state path x_0..x_L: log L, zeta_hat, h, alpha, beta (the paper's definitions)."""
    B, T, n = log_f.shape
    out = []
    for b in range(B):
        L = int(lengths[b])
        z0 = log_zeta0 if log_zeta0.dim() == 1 else log_zeta0[b]
        logp = {}
        for path in itertools.product(range(n), repeat=L + 1):
            s = z0[path[0]]
            for t in range(L):
                s = s + log_phi[b, t, path[t + 1], path[t]] + log_f[b, t, path[t + 1]]
            logp[path] = s
        vals = torch.stack(list(logp.values()))
        logL = torch.logsumexp(vals, 0)
        zeta_hat = torch.zeros(T, n, dtype=D)
        h = torch.zeros(T, n, n, dtype=D)
        zeta0_hat = torch.zeros(n, dtype=D)
        for path, s in logp.items():
            w = (s - logL).exp()
            zeta0_hat[path[0]] += w
            for t in range(L):
                zeta_hat[t, path[t + 1]] += w
                h[t, path[t + 1], path[t]] += w
        # alpha_it = P(y_1^t, x_t = i), beta_it = P(y_t^L | x_t = i): by marginalising prefixes/suffixes
        alpha = torch.full((T, n), float("-inf"), dtype=D)
        beta = torch.full((T, n), float("-inf"), dtype=D)
        for t in range(L):
            for i in range(n):
                pre = [z0[p[0]] + sum(log_phi[b, s, p[s + 1], p[s]] + log_f[b, s, p[s + 1]] for s in range(t + 1))
                       for p in itertools.product(range(n), repeat=t + 2) if p[-1] == i]
                alpha[t, i] = torch.logsumexp(torch.stack(pre), 0)
                suf = []
                for p in itertools.product(range(n), repeat=L - t - 1):
                    xs = (i,) + p
                    s_ = log_f[b, t, i]
                    for k in range(1, len(xs)):
                        s_ = s_ + log_phi[b, t + k, xs[k], xs[k - 1]] + log_f[b, t + k, xs[k]]
                    suf.append(s_)
                beta[t, i] = torch.logsumexp(torch.stack(suf), 0)
        out.append((logL, zeta_hat, h, zeta0_hat, alpha, beta))
    return [torch.stack(x) for x in zip(*out)]


@pytest.mark.parametrize("constrained", [False, True])
def test_forward_backward_equals_brute_force(constrained):
    B, T, n = 3, 4, 3
    graph = iohmm.left_to_right_graph(n, 1) if constrained else None
    log_phi, log_f, log_zeta0 = random_potentials(B, T, n, graph, seed=1)
    lengths = torch.tensor([4, 2, 1])
    mask = torch.arange(T)[None] < lengths[:, None]
    logL, zeta_hat, h, zeta0_hat, alpha, beta = brute_force(log_phi, log_f, log_zeta0, lengths)
    post = iohmm.posteriors(log_phi, log_f, log_zeta0, mask)
    torch.testing.assert_close(post.log_likelihood, logL)
    torch.testing.assert_close(iohmm.log_likelihood(log_phi, log_f, log_zeta0, mask), logL)
    torch.testing.assert_close(post.zeta_hat, zeta_hat)
    torch.testing.assert_close(post.h, h)
    torch.testing.assert_close(post.zeta0_hat, zeta0_hat)
    m = mask[:, :, None]
    torch.testing.assert_close(post.log_alpha.masked_fill(~m, 0), alpha.masked_fill(~m, 0))
    torch.testing.assert_close(post.log_beta.masked_fill(~m, 0), beta.masked_fill(~m, 0))
    if constrained:
        assert (post.h[..., ~graph] == 0).all()


def test_forward_equals_torch_struct_linear_chain():
    """Independent oracle at sizes brute force cannot reach: a linear-chain CRF over x_0..x_T whose
    edge potentials are log phi + log f (+ log zeta_0 on the first edge)."""
    torch_struct = pytest.importorskip("torch_struct")
    B, T, n = 4, 12, 5
    log_phi, log_f, log_zeta0 = random_potentials(B, T, n, seed=2)
    lengths = torch.tensor([12, 7, 3, 1])
    mask = torch.arange(T)[None] < lengths[:, None]
    edge = log_phi + log_f.unsqueeze(-1)
    edge[:, 0] = edge[:, 0] + log_zeta0[None, None, :]
    crf = torch_struct.LinearChainCRF(edge, lengths=lengths + 1)
    torch.testing.assert_close(iohmm.log_likelihood(log_phi, log_f, log_zeta0, mask), crf.partition)
    post = iohmm.posteriors(log_phi, log_f, log_zeta0, mask)
    torch.testing.assert_close(post.h, crf.marginals * mask[:, :, None, None])


def test_posteriors_are_gradients_of_log_likelihood():
    B, T, n = 3, 6, 4
    graph = torch.rand(n, n, generator=torch.Generator().manual_seed(3)) < 0.6
    graph |= torch.eye(n, dtype=torch.bool)
    log_phi, log_f, log_zeta0 = random_potentials(B, T, n, graph, seed=3)
    mask = torch.arange(T)[None] < torch.tensor([6, 4, 2])[:, None]
    lp, lf, lz = (x.clone().requires_grad_() for x in (log_phi, log_f, log_zeta0.expand(B, n)))
    iohmm.log_likelihood(lp, lf, lz, mask).sum().backward()
    post = iohmm.posteriors(log_phi, log_f, log_zeta0, mask)
    assert torch.isfinite(lp.grad).all() and torch.isfinite(lf.grad).all()
    torch.testing.assert_close(lp.grad, post.h)
    torch.testing.assert_close(lf.grad, post.zeta_hat)
    torch.testing.assert_close(lz.grad, post.zeta0_hat)


class _LogLikelihood(torch.nn.Module):
    """``forward`` = the IOHMM log-likelihood, so torch.func.functional_call can swap the parameters."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        return self.model.log_likelihood(*args)


def test_gradcheck_float64_constrained_network():
    torch.manual_seed(4)
    n, d = 4, 3
    graph = iohmm.left_to_right_graph(n, 2)
    wrapped = _LogLikelihood(iohmm.IOHMM(iohmm.StateNetworks(n, d, hidden_dim=2, graph=graph),
                                     iohmm.MultinomialOutputs(n, 3, input_dim=d), initial="learned")).double()
    u = torch.randn(2, 5, d, dtype=D)
    y = torch.randint(0, 3, (2, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).bool()
    target_mask = torch.tensor([[0, 1, 0, 0, 1], [1, 0, 1, 1, 1]]).bool()
    names = [k for k, _ in wrapped.named_parameters()]
    inputs = [p.detach().clone().requires_grad_() for _, p in wrapped.named_parameters()]

    def fn(*xs):
        return torch.func.functional_call(wrapped, dict(zip(names, xs)), (u, y, target_mask, mask))

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6)
    # and on the raw potentials, with forbidden (-inf) transitions and padding
    log_phi, log_f, log_zeta0 = random_potentials(2, 4, 3, iohmm.left_to_right_graph(3, 1), seed=5)
    m = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]).bool()
    assert torch.autograd.gradcheck(lambda a, b, c: iohmm.log_likelihood(a, b, c, m),
                                    (log_phi.requires_grad_(), log_f.requires_grad_(), log_zeta0.requires_grad_()))


def test_padding_equals_unpadded_and_padding_content_is_ignored():
    B, T, n = 3, 6, 3
    log_phi, log_f, log_zeta0 = random_potentials(B, T, n, seed=6)
    lengths = [6, 3, 1]
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    # garbage (even NaN/inf) on padded steps must not leak into values or gradients
    lp = log_phi.masked_fill(~mask[:, :, None, None], float("nan")).requires_grad_()
    lf = log_f.masked_fill(~mask[:, :, None], float("inf")).requires_grad_()
    ll = iohmm.log_likelihood(lp, lf, log_zeta0, mask)
    ll.sum().backward()
    assert torch.isfinite(lp.grad).all() and torch.isfinite(lf.grad).all()
    assert (lp.grad[~mask] == 0).all() and (lf.grad[~mask] == 0).all()
    post = iohmm.posteriors(lp.detach(), lf.detach(), log_zeta0, mask)
    for b, L in enumerate(lengths):
        alone = iohmm.posteriors(log_phi[b:b + 1, :L], log_f[b:b + 1, :L], log_zeta0)
        torch.testing.assert_close(ll[b:b + 1], alone.log_likelihood)
        torch.testing.assert_close(post.zeta_hat[b:b + 1, :L], alone.zeta_hat)
        torch.testing.assert_close(post.h[b:b + 1, :L], alone.h)
        assert (post.zeta_hat[b, L:] == 0).all() and (post.h[b, L:] == 0).all()


def test_internal_state_eq2_and_output_eq3():
    """zeta_t = sum_j zeta_{j,t-1} phi_j,t as explicit matrix products; eta_t = sum_j zeta_jt eta_jt; and
    with a target only at the end the likelihood is P(y_T) = sum_i zeta_iT f(y_T; eta_iT)."""
    torch.manual_seed(7)
    n, d, C = 4, 3, 3
    model = iohmm.IOHMM(iohmm.StateNetworks(n, d), iohmm.MultinomialOutputs(n, C, input_dim=d), initial="learned").double()
    u = torch.randn(2, 5, d, dtype=D)
    zeta, eta = model.predict(u)
    log_phi = model.state_networks(u)
    z = model.log_zeta0().exp().expand(2, n)
    for t in range(5):
        z = torch.einsum("bij,bj->bi", log_phi[:, t].exp(), z)
        torch.testing.assert_close(zeta[:, t], z)
    eta_j = model.output_networks.log_probs(u, (2, 5)).exp()
    torch.testing.assert_close(eta, (zeta.unsqueeze(-1) * eta_j).sum(2))
    torch.testing.assert_close(eta.sum(-1), torch.ones(2, 5, dtype=D))
    y = torch.randint(0, C, (2, 5))
    last = torch.zeros(2, 5, dtype=torch.bool)
    last[:, -1] = True
    ll = model.log_likelihood(u, y, target_mask=last)
    torch.testing.assert_close(ll, eta[torch.arange(2), -1, y[:, -1]].log())


def test_gaussian_output_density():
    torch.manual_seed(8)
    n, d, r = 3, 2, 2
    out = iohmm.GaussianOutputs(n, r, input_dim=d).double()
    with torch.no_grad():
        out.log_sigma.uniform_(-0.5, 0.5)
    u = torch.randn(2, 4, d, dtype=D)
    y = torch.randn(2, 4, r, dtype=D)
    mu = out.mean(u, (2, 4))
    ref = torch.distributions.Normal(mu, out.log_sigma.exp()).log_prob(y.unsqueeze(2)).sum(-1)
    torch.testing.assert_close(out.log_density(u, y), ref)


def _lookup_model(n, K, C, graph=None, initial="learned", seed=0):
    torch.manual_seed(seed)
    return iohmm.IOHMM(iohmm.LookupStateNetworks(n, K, graph=graph),
                   iohmm.LookupMultinomialOutputs(n, C, K), initial=initial).double()


def _symbol_data(B, T, K, C, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, K, (B, T), generator=g)
    y = torch.randint(0, C, (B, T), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]
    target_mask = (torch.rand(B, T, generator=g) < 0.4) & mask
    target_mask[torch.arange(B), lengths - 1] = True  # at least the final target
    return u, y, mask, target_mask


@pytest.mark.parametrize("graph", [None, "ltr"])
def test_em_never_decreases_likelihood_and_maximises_q(graph):
    n, K, C = 4, 3, 3
    g = iohmm.left_to_right_graph(n, 1) if graph else None
    model = _lookup_model(n, K, C, g, seed=9)
    u, y, mask, target_mask = _symbol_data(12, 7, K, C, seed=9)
    prev = None
    history = []
    for it in range(25):
        post = model.posteriors(u, y, target_mask, mask)
        ll = iohmm.em_step(model, u, y, target_mask, mask).sum()
        torch.testing.assert_close(ll, post.log_likelihood.sum())
        if prev is not None:
            assert ll >= prev - 1e-9, f"EM decreased the likelihood at iteration {it}: {prev} -> {ll}"
        prev = ll
        history.append(float(ll))
        if it == 3:
            # the M-step is the exact maximiser of Q(.; old): no perturbation of the new tables does better
            q_new = model.q_function(u, y, post, target_mask, mask).detach()
            params = dict(model.named_parameters())
            saved = {k: v.detach().clone() for k, v in params.items()}
            for trial in range(20):
                with torch.no_grad():
                    for k, p in params.items():
                        p.add_(torch.randn_like(p).nan_to_num() * 0.05)
                        p.copy_(torch.where(torch.isfinite(saved[k]), p, saved[k]))
                assert model.q_function(u, y, post, target_mask, mask) <= q_new + 1e-9
                with torch.no_grad():
                    for k, p in params.items():
                        p.copy_(saved[k])
    assert history[-1] > history[0] + 1.0  # it also makes real progress
    if g is not None:
        assert (model.state_networks.log_table()[:, ~g] == float("-inf")).all()


def test_em_transition_update_is_eq12():
    """Eq. 12 written out with explicit loops over sequences and steps."""
    n, K, C = 3, 2, 2
    model = _lookup_model(n, K, C, seed=10)
    u, y, mask, target_mask = _symbol_data(5, 6, K, C, seed=10)
    post = model.posteriors(u, y, target_mask, mask)
    num = torch.zeros(K, n, n, dtype=D)
    for b in range(5):
        for t in range(6):
            if mask[b, t]:
                num[u[b, t]] += post.h[b, t]
    expected = num / num.sum(1, keepdim=True)
    iohmm.em_step(model, u, y, target_mask, mask)
    torch.testing.assert_close(model.state_networks.log_table().exp(), expected)


def _mlp_model(n, d, graph=None, gaussian=False, seed=0):
    torch.manual_seed(seed)
    out = iohmm.GaussianOutputs(n, 2, input_dim=d, hidden_dim=3) if gaussian else \
        iohmm.MultinomialOutputs(n, 3, input_dim=d, hidden_dim=3)
    return iohmm.IOHMM(iohmm.StateNetworks(n, d, hidden_dim=4, graph=graph), out, initial="learned").double()


def _real_data(B, T, d, gaussian, seed):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(B, T, d, generator=g, dtype=D)
    y = torch.randn(B, T, 2, generator=g, dtype=D) if gaussian else torch.randint(0, 3, (B, T), generator=g)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]
    target_mask = (torch.rand(B, T, generator=g) < 0.5) & mask
    return u, y, mask, target_mask


@pytest.mark.parametrize("gaussian", [False, True])
def test_autograd_gradient_equals_gem_gradient(gaussian):
    """Fisher's identity: at Theta = Theta_hat, dQ/dTheta (Eq. 13-14) = d log L / dTheta."""
    model = _mlp_model(4, 3, iohmm.left_to_right_graph(4, 2), gaussian, seed=11)
    u, y, mask, target_mask = _real_data(6, 7, 3, gaussian, seed=11)
    params = list(model.parameters())
    g_ll = torch.autograd.grad(model.log_likelihood(u, y, target_mask, mask).sum(), params)
    post = model.posteriors(u, y, target_mask, mask)
    g_q = torch.autograd.grad(model.q_function(u, y, post, target_mask, mask), params)
    for a, b in zip(g_ll, g_q):
        torch.testing.assert_close(a, b)
    assert sum(float(a.abs().sum()) for a in g_ll) > 1e-3


@pytest.mark.parametrize("gaussian", [False, True])
def test_gem_never_decreases_likelihood(gaussian):
    graph = iohmm.left_to_right_graph(4, 2)
    model = _mlp_model(4, 3, graph, gaussian, seed=12)
    u, y, mask, target_mask = _real_data(8, 6, 3, gaussian, seed=12)
    history = [float(iohmm.gem_step(model, u, y, target_mask, mask, lr=0.5, inner_steps=3).sum()) for _ in range(15)]
    history.append(float(model.log_likelihood(u, y, target_mask, mask).sum()))
    for a, b in zip(history, history[1:]):
        assert b >= a - 1e-9, history
    assert history[-1] > history[0] + 0.5
    # forbidden transitions still carry exactly zero mass after training
    assert (model.state_networks(u).exp()[..., ~graph] == 0).all()


def test_gradient_training_respects_constrained_graph():
    graph = iohmm.left_to_right_graph(4, 1)
    model = _mlp_model(4, 3, graph, seed=13).float()
    u, y, mask, target_mask = _real_data(8, 6, 3, False, seed=13)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss = -model.log_likelihood(u.float(), y, target_mask, mask).sum()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
        opt.step()
        first = float(loss) if first is None else first
    assert float(loss) < first
    phi = model.state_networks(u.float()).exp()
    assert (phi[..., ~graph] == 0).all()
    torch.testing.assert_close(phi.sum(-2), torch.ones(8, 6, 4))


def test_long_sequences_do_not_underflow():
    B, T, n = 2, 1000, 3
    log_phi, log_f, log_zeta0 = random_potentials(B, T, n, seed=14)
    log_f = log_f * 10  # densities far from 1: the unscaled alpha would underflow in float32
    ll64 = iohmm.log_likelihood(log_phi, log_f, log_zeta0)
    ll32 = iohmm.log_likelihood(log_phi.float(), log_f.float(), log_zeta0.float())
    assert torch.isfinite(ll32).all() and ll64.abs().min() > 3e3
    # float32 against the float64 oracle over 1000 steps: the scaled recursion's relative error grows ~T * eps32
    # (1000 * 6e-8 = 6e-5), hence rtol 1e-4; an underflow would give -inf or an error of order 1
    torch.testing.assert_close(ll32.double(), ll64, rtol=1e-4, atol=0)
    post = iohmm.posteriors(log_phi.float(), log_f.float(), log_zeta0.float())
    post64 = iohmm.posteriors(log_phi, log_f, log_zeta0)
    torch.testing.assert_close(post64.zeta_hat.sum(-1), torch.ones(B, T, dtype=D))
    torch.testing.assert_close(post.zeta_hat.double(), post64.zeta_hat, atol=1e-3, rtol=0)


def test_bad_inputs_raise_clear_errors():
    log_phi, log_f, log_zeta0 = random_potentials(2, 3, 3)
    with pytest.raises(ValueError, match="log_f must be"):
        iohmm.log_likelihood(log_phi, log_f[:, :2], log_zeta0)
    with pytest.raises(ValueError, match="mask must be"):
        iohmm.log_likelihood(log_phi, log_f, log_zeta0, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="log_zeta0"):
        iohmm.log_likelihood(log_phi, log_f, log_zeta0[:2])
    with pytest.raises(ValueError, match="successor"):
        iohmm.StateNetworks(3, 2, graph=torch.tensor([[1, 0, 0], [1, 0, 0], [0, 0, 0]]).bool())
    with pytest.raises(TypeError, match="lookup"):
        iohmm.em_step(_mlp_model(3, 2), torch.randn(1, 2, 2, dtype=D), torch.zeros(1, 2, dtype=torch.long))
