"""Linear-chain CRF and constrained Viterbi (hmm_nmt.hmm.crf) against brute force over all tag sequences,
torch-struct, and the tag schemes' validity; float64."""
import itertools

import pytest
import torch

from hmm_nmt.data import tag_schemes as ts
from hmm_nmt.hmm.crf import LinearChainCRF, constrained_viterbi

D = torch.float64
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _crf(K, seed=0, **kw):
    torch.manual_seed(seed)
    crf = LinearChainCRF(K, **kw).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_()
    return crf


def _brute(crf, emissions, b, L):
    K = crf.num_tags
    trans, start, emit = crf.potentials(emissions[b:b + 1, :L], None)
    out = {}
    for y in itertools.product(range(K), repeat=L):
        s = start[0, y[0]] + sum(emit[0, t, y[t]] for t in range(L)) + sum(trans[y[t - 1], y[t]] for t in range(1, L))
        out[y] = s
    return out


def test_partition_score_decode_marginals_equal_brute_force_with_padding():
    K = 3
    crf = _crf(K)
    emissions = torch.randn(3, 4, K, dtype=D)
    lengths = [4, 2, 1]
    mask = torch.arange(4)[None] < torch.tensor(lengths)[:, None]
    log_z = crf.log_partition(emissions, mask)
    best, path = crf.decode(emissions, mask)
    marg = crf.marginals(emissions, mask).exp()
    tags = torch.randint(0, K, (3, 4))
    for b, L in enumerate(lengths):
        paths = _brute(crf, emissions, b, L)
        values = torch.stack(list(paths.values()))
        assert torch.allclose(log_z[b], torch.logsumexp(values, 0))
        top = max(paths, key=lambda y: paths[y].item())
        assert tuple(path[b, :L].tolist()) == top and torch.allclose(best[b], values.max())
        assert torch.allclose(crf.score(emissions, tags, mask)[b], paths[tuple(tags[b, :L].tolist())])
        for t in range(L):
            for k in range(K):
                ref = sum(torch.exp(v - log_z[b]) for y, v in paths.items() if y[t] == k)
                assert torch.allclose(marg[b, t, k], ref)


def test_partition_equals_torch_struct_and_nll_gradients():
    torch_struct = pytest.importorskip("torch_struct")
    K, T = 4, 6
    crf = _crf(K, seed=1)
    emissions = torch.randn(2, T, K, dtype=D, requires_grad=True)
    lengths = torch.tensor([6, 3])
    mask = torch.arange(T)[None] < lengths[:, None]
    trans, start, emit = crf.potentials(emissions, mask)
    edge = (trans[None, None] + emit[:, 1:, None, :]).transpose(-1, -2).clone()  # [b, n, y_{n+1}, y_n]
    edge[:, 0] += (start + emit[:, 0]).unsqueeze(1)
    dist = torch_struct.LinearChainCRF(edge, lengths=lengths)
    assert torch.allclose(crf.log_partition(emissions, mask), dist.partition)
    tags = torch.randint(0, K, (2, T))
    nll = crf.nll(emissions, tags, mask)
    assert (nll > 0).all()
    nll.sum().backward()
    assert torch.isfinite(emissions.grad).all() and (emissions.grad[1, 3:] == 0).all()
    assert torch.autograd.gradcheck(lambda e: crf.nll(e, tags, mask), (emissions.detach().requires_grad_(),))


@pytest.mark.parametrize("scheme", ["iob2", "bioes", "iob1"])
def test_constrained_viterbi_is_the_best_valid_sequence(scheme):
    names = {"iob2": TAGS, "iob1": TAGS,
             "bioes": ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC", "S-LOC"]}[scheme]
    allowed, start, end = ts.transitions(names, scheme)
    torch.manual_seed(2)
    K, T = len(names), 4
    log_probs = torch.log_softmax(torch.randn(3, T, K, dtype=D) * 2, -1)
    lengths = [4, 3, 1]
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    score, path = constrained_viterbi(log_probs, allowed, start, end, mask)
    for b, L in enumerate(lengths):
        best, arg = -float("inf"), None
        for y in itertools.product(range(K), repeat=L):
            tags = [names[k] for k in y]
            if ts.is_valid(tags, scheme):
                s = sum(log_probs[b, t, y[t]].item() for t in range(L))
                if s > best:
                    best, arg = s, y
        assert tuple(path[b, :L].tolist()) == arg and score[b].item() == pytest.approx(best)
        assert ts.is_valid([names[k] for k in path[b, :L].tolist()], scheme)
        argmax = log_probs[b, :L].argmax(-1).tolist()
        if ts.is_valid([names[k] for k in argmax], scheme):  # a valid argmax is left alone
            assert path[b, :L].tolist() == argmax


def test_crf_with_constraints_never_decodes_an_invalid_sequence():
    allowed, start, end = ts.transitions(TAGS, "iob2")
    crf = _crf(len(TAGS), seed=3, allowed=allowed, start=start, end=end)
    emissions = torch.randn(20, 7, len(TAGS), dtype=D) * 3
    _, path = crf.decode(emissions)
    assert all(ts.is_valid([TAGS[k] for k in row], "iob2") for row in path.tolist())
