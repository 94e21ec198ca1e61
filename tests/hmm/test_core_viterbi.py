"""Viterbi of every HMM core over the shared chain module, against brute force over all state paths of the
core's own potentials (float64): IOHMM, VL-HMM, HNMC / HNMC-CN / HNMC2 layers, the taggers."""
import itertools

import pytest
import torch

from hmm_nmt.hmm import iohmm
from hmm_nmt.hmm.hnmc import HNMC2Layer, HNMCCNLayer, HNMCLayer, make_architecture
from hmm_nmt.hmm.vlhmm import VLHMM, Constraints

D = torch.float64


def _best(scores):
    top = max(scores, key=lambda p: scores[p])
    return top, scores[top]


def test_iohmm_viterbi_is_the_best_path_given_targets():
    torch.manual_seed(0)
    n, d, C, T = 3, 2, 4, 4
    model = iohmm.IOHMM(iohmm.StateNetworks(n, d, graph=iohmm.left_to_right_graph(n, 1)),
                        iohmm.MultinomialOutputs(n, C, input_dim=d), initial="learned").double()
    with torch.no_grad():
        model.zeta0_logits.normal_()
    u = torch.randn(2, T, d, dtype=D)
    y = torch.randint(0, C, (2, T))
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    score, path = model.viterbi(u, y, mask=mask)
    log_phi, log_f, log_zeta0, _ = model.potentials(u, y, mask=mask)
    for b, L in enumerate([4, 2]):
        scores = {}
        for p in itertools.product(range(n), repeat=L + 1):  # p[0] = x_0, the non-emitting initial state
            s = log_zeta0[p[0]] + sum(log_phi[b, t, p[t + 1], p[t]] + log_f[b, t, p[t + 1]] for t in range(L))
            scores[p] = s.item()
        top, value = _best(scores)
        assert score[b].item() == pytest.approx(value, abs=1e-10)
        assert tuple(path[b, :L].tolist()) == top[1:] and (path[b, L:] == -1).all()
    # a forbidden transition (left-to-right graph) is never on the path
    real = path[0]
    assert ((real[1:] - real[:-1]) >= 0).all()


def test_vlhmm_viterbi_equals_dense_brute_force():
    torch.manual_seed(1)
    V, m, k = 9, 3, 2
    wc = torch.arange(V) % m
    wc[0] = -1
    model = VLHMM(Constraints.brown(wc, m, k), V, dim=8).double()
    x = torch.tensor([[1, 4, 2, 5], [3, 6, 0, 0]])
    mask = x.ne(0)
    r = model.restrict()
    score, path = model.viterbi(x, mask, r)
    log_start, log_trans, log_emit = model.dense(r)
    N = log_start.numel()
    for b, L in enumerate([4, 2]):
        scores = {}
        for z in itertools.product(range(N), repeat=L):
            s = log_start[z[0]] + log_emit[x[b, 0], z[0]]
            for t in range(1, L):
                s = s + log_trans[z[t - 1], z[t]] + log_emit[x[b, t], z[t]]
            scores[z] = s.item()
        top, value = _best(scores)
        assert score[b].item() == pytest.approx(value, abs=1e-9)
        g = model.constraints.word_group[x[b, :L]]
        states = r.local[g, path[b, :L]]
        assert tuple(states.tolist()) == top


@pytest.mark.parametrize("cls", [HNMCLayer, HNMCCNLayer, HNMC2Layer])
def test_hnmc_viterbi_maximises_the_product_of_potentials(cls):
    torch.manual_seed(2)
    N, T = 3, 4
    layer = cls(5, N).double()
    y = torch.randn(1, T, 5, dtype=D)
    score, path = layer.viterbi(y)
    G = layer.log_potentials(y)[0]
    scores = {}
    if cls is HNMC2Layer:  # pairs: G[t, k, j, i], the virtual pair uniform
        init = -torch.log(torch.tensor(float(N * N), dtype=D))
        for p in itertools.product(range(N), repeat=T + 2):
            scores[p[2:]] = max(scores.get(p[2:], -1e300),
                                (init + sum(G[t, p[t], p[t + 1], p[t + 2]] for t in range(T))).item())
    else:
        init = -torch.log(torch.tensor(float(N), dtype=D))
        for p in itertools.product(range(N), repeat=T + 1):
            scores[p[1:]] = max(scores.get(p[1:], -1e300),
                                (init + sum(G[t, p[t], p[t + 1]] for t in range(T))).item())
    top, value = _best(scores)
    assert score[0].item() == pytest.approx(value, abs=1e-10)
    assert tuple(path[0].tolist()) == top


def test_architecture_three_viterbi_runs_on_the_last_chain_and_two_refuses():
    torch.manual_seed(3)
    arch = make_architecture("hnmc", 3, 4, 3, hidden_size=2).double()
    y = torch.randn(2, 5, 4, dtype=D)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    score, path = arch.viterbi(y, mask)
    lower = arch.stack.layers[0](y, mask).exp()
    ref_score, ref_path = arch.stack.layers[1].viterbi(lower, mask)
    assert torch.equal(path, ref_path) and torch.allclose(score, ref_score)
    assert (path[1, 3:] == -1).all() and (path[mask] >= 0).all()
    with pytest.raises(ValueError, match="architecture 2"):
        make_architecture("hnmc", 2, 4, 3, hidden_size=2).viterbi(y.float(), mask)
