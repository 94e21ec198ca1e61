"""VL-HMM core (hmm_nmt.hmm.vlhmm): blocked inference against the paper's dense model, brute force,
state dropout, posteriors, the next-token distribution, memory shapes, bad input. Float64 throughout:
the blocked and dense paths sum the same terms in a different order, so they agree to rounding."""
import itertools

import pytest
import torch

from hmm_nmt.hmm.vlhmm import (
    VLHMM,
    Constraints,
    autograd_posteriors,
    dense_log_likelihood,
    read_word_clusters,
    row_logsumexp,
)

NEVER = 0  # symbol 0 plays padding: never emitted


def make_model(m=3, k=4, V=12, constraint="brown", param="neural", dim=8, seed=0):
    torch.manual_seed(seed)
    if constraint == "brown":
        wc = torch.arange(V) % m
        wc[NEVER] = -1
        c = Constraints.brown(wc, m, k)
    else:
        emittable = torch.ones(V, dtype=torch.bool)
        emittable[NEVER] = False
        c = Constraints.uniform(emittable, m * k, k, seed=seed)
    model = VLHMM(c, V, dim=dim, parameterization=param, chunk=5).double()
    if param == "scalar":  # larger scores than the init, so the test sees real differences
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
    return model


def paper_dense(model, kept):
    """Eq. 2, 3, 8, 10 written out over all |Z| states: full psi / phi from the networks (or the scalar
    tables), the support and dropout masks applied, normalised; independent of the blocked code."""
    c, p = model.constraints, model.params
    Z, V = c.num_states, c.word_group.numel()
    support = torch.zeros(V, Z, dtype=torch.bool)
    for v in range(V):
        if c.word_group[v] >= 0:
            support[v, c.support[c.word_group[v]]] = True
    if hasattr(p, "f_psi"):
        e = torch.cat([p.partition_embed[c.state_partition()], p.state_embed], -1)
        inn = p.f_psi(p.f_in(e))
        psi, start = p.f_out(e) @ inn.t() * p.scale, inn @ p.start_embed
        phi = p.word_embed @ p.f_phi(p.f_emit(e)).t()
    else:
        psi, start = p.trans, p.start
        phi = torch.full((V, Z), float("-inf"), dtype=psi.dtype)
        for v in range(V):
            if c.word_group[v] >= 0:
                phi[v, c.support[c.word_group[v]]] = p.emit[v]
    b = torch.zeros(Z, dtype=torch.bool)
    b[kept] = True
    ninf = float("-inf")
    log_trans = torch.log_softmax(psi.masked_fill(~b[None, :], ninf), -1)
    log_start = torch.log_softmax(start.masked_fill(~b, ninf), -1)
    allowed = support & b[None, :]
    log_emit = torch.log_softmax(phi.masked_fill(~allowed, ninf), 0).masked_fill(~allowed, ninf)
    return log_start[b], log_trans[b][:, b], log_emit[:, b]


def sentences(V=12, lengths=(5, 3, 1, 4), seed=1):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    x = torch.zeros(len(lengths), T, dtype=torch.long)
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for i, n in enumerate(lengths):
        x[i, :n] = torch.randint(1, V, (n,), generator=g)
        mask[i, :n] = True
    return x, mask


CASES = [("brown", "neural"), ("brown", "scalar"), ("uniform", "neural"), ("uniform", "scalar")]


@pytest.mark.parametrize("constraint,param", CASES)
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_blocked_forward_equals_dense_masked_model(constraint, param, dropout):
    model = make_model(constraint=constraint, param=param)
    x, mask = sentences()
    r = model.restrict(dropout, torch.Generator().manual_seed(3))
    if dropout:
        assert r.kept.numel() == 6  # half of the 12 states; Brown: exactly 2 of 4 in each of the 3 clusters
        if constraint == "brown":
            assert torch.equal(torch.bincount(r.kept // 4, minlength=3), torch.tensor([2, 2, 2]))
    ll = model.log_likelihood(x, mask, r)
    dense = paper_dense(model, r.kept)
    for i in range(x.size(0)):
        ref = dense_log_likelihood(*dense, x[i, mask[i]])
        torch.testing.assert_close(ll[i], ref, rtol=0, atol=1e-10)
    assert torch.isfinite(ll).all()


def test_dropout_changes_the_model_and_evaluation_uses_all_states():
    model = make_model()
    x, mask = sentences()
    full = model.log_likelihood(x, mask)
    r = model.restrict(0.5, torch.Generator().manual_seed(0))
    assert not torch.allclose(full, model.log_likelihood(x, mask, r))
    assert torch.equal(model.restrict().kept, torch.arange(12))


@pytest.mark.parametrize("constraint", ["brown", "uniform"])
def test_forward_equals_brute_force_enumeration(constraint):
    model = make_model(m=2, k=2, V=6, constraint=constraint)
    log_start, log_trans, log_emit = paper_dense(model, torch.arange(4))
    x, mask = sentences(V=6, lengths=(4, 2))
    ll = model.log_likelihood(x, mask)
    for i in range(2):
        xs = x[i, mask[i]].tolist()
        terms = []
        for path in itertools.product(range(4), repeat=len(xs)):
            s = log_start[path[0]] + log_emit[xs[0], path[0]]
            for t in range(1, len(xs)):
                s = s + log_trans[path[t - 1], path[t]] + log_emit[xs[t], path[t]]
            terms.append(s)
        torch.testing.assert_close(ll[i], torch.logsumexp(torch.stack(terms), 0), rtol=0, atol=1e-10)
    # and the joint sums to one over all sequences of length 2
    words = [v for v in range(6) if v != NEVER]
    seqs = torch.tensor(list(itertools.product(words, repeat=2)))
    total = torch.logsumexp(model.log_likelihood(seqs, torch.ones_like(seqs, dtype=torch.bool)), 0)
    torch.testing.assert_close(total, torch.zeros((), dtype=total.dtype), rtol=0, atol=1e-10)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_autograd_posteriors_equal_explicit_forward_backward(dropout):
    model = make_model(constraint="uniform" if dropout else "brown")
    x, mask = sentences()
    r = model.restrict(dropout, torch.Generator().manual_seed(5))
    log_post, log_z = model.posteriors(x, mask, r)
    auto = autograd_posteriors(model, x, mask, r)
    torch.testing.assert_close(auto, log_post.exp() * mask[..., None], rtol=0, atol=1e-10)
    torch.testing.assert_close(auto.sum(-1), mask.double(), rtol=0, atol=1e-10)
    torch.testing.assert_close(log_z, model.log_likelihood(x, mask, r), rtol=0, atol=1e-10)


@pytest.mark.parametrize("constraint,param", CASES[:3])
def test_next_token_distribution_is_normalised_and_matches_the_forward(constraint, param):
    model = make_model(constraint=constraint, param=param)
    x, mask = sentences()
    lp = model.predictive(x, mask)
    assert lp.shape == (4, 5, 12)
    torch.testing.assert_close(lp.exp().sum(-1)[mask], torch.ones(int(mask.sum()), dtype=lp.dtype),
                               rtol=0, atol=1e-10)
    assert (lp[..., NEVER] < -600).all()  # the padding symbol gets no mass
    gold = lp.gather(2, x[..., None]).squeeze(-1).masked_fill(~mask, 0).sum(1)
    torch.testing.assert_close(gold, model.log_likelihood(x, mask), rtol=0, atol=1e-10)


@pytest.mark.parametrize("constraint,param", CASES[:3])
def test_per_token_conditionals_sum_to_the_likelihood_and_match_prefix_differences(constraint, param):
    """Stream mode's quantity: log p(x_t | x_<t) from the filter (padded batch) == the gold entries of the
    next-token distribution == log p(x_<=t) - log p(x_<t) of the dense model on every prefix (independent
    of the blocked code), and the sum over t == log p(x)."""
    model = make_model(constraint=constraint, param=param)
    x, mask = sentences(lengths=(7, 3, 1, 5))
    cond = model.conditionals(x, mask)
    assert cond.shape == x.shape and (cond[~mask] == 0).all() and (cond[mask] < 0).all()
    torch.testing.assert_close(cond.sum(1), model.log_likelihood(x, mask), rtol=0, atol=1e-10)
    gold = model.predictive(x, mask).gather(2, x[..., None]).squeeze(-1).masked_fill(~mask, 0)
    torch.testing.assert_close(cond, gold, rtol=0, atol=1e-10)
    log_start, log_trans, log_emit = paper_dense(model, torch.arange(model.constraints.num_states))
    for b in range(x.size(0)):
        prefix = [0.0] + [dense_log_likelihood(log_start, log_trans, log_emit, x[b, :t]).item()
                          for t in range(1, int(mask[b].sum()) + 1)]
        diffs = torch.tensor(prefix[1:], dtype=cond.dtype) - torch.tensor(prefix[:-1], dtype=cond.dtype)
        torch.testing.assert_close(cond[b, mask[b]], diffs, rtol=0, atol=1e-10)


def test_potentials_grow_with_k_squared_not_with_the_state_count():
    x, mask = sentences(V=40)
    shapes = []
    for m in (2, 8, 32):
        model = make_model(m=m, k=4, V=40, dim=8)
        log_G, emit = model.potentials(x, mask, model.restrict())
        shapes.append(tuple(log_G.shape))
        bp = model.params(model.restrict())
        assert bp.log_emit.shape == (40, 4)  # |X| x k, not |X| x |Z|
    assert shapes == [(4, 5, 4, 4)] * 3
    model = make_model(m=8, k=8, V=40)
    r = model.restrict(0.5, torch.Generator().manual_seed(0))
    assert tuple(model.potentials(x, mask, r)[0].shape) == (4, 5, 4, 4)  # n = 4 kept of k = 8


def test_row_logsumexp_values_and_gradients():
    torch.manual_seed(0)
    q = torch.randn(7, 3, dtype=torch.double, requires_grad=True)
    k = torch.randn(9, 3, dtype=torch.double, requires_grad=True)
    torch.testing.assert_close(row_logsumexp(q, k, 2), torch.logsumexp(q @ k.t(), -1))
    assert torch.autograd.gradcheck(lambda a, b: row_logsumexp(a, b, 3), (q, k))


@pytest.mark.parametrize("constraint,param", CASES)
def test_training_with_state_dropout_lowers_the_loss(constraint, param):
    model = make_model(m=3, k=4, V=12, dim=16, constraint=constraint, param=param).float()
    x, mask = sentences()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for step in range(30):
        r = model.restrict(0.5, torch.Generator().manual_seed(step))
        loss = -model.log_likelihood(x, mask, r).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(-model.log_likelihood(x, mask).sum().item())
    assert losses[-1] < losses[0] - 1.0


def test_word_cluster_file_and_bad_input(tmp_path):
    f = tmp_path / "clusters"
    f.write_text("the 0110\ncat 10\ndog 10\n")
    wc, m = read_word_clusters(str(f), ["<pad>", "the", "cat", "dog", "</s>", "new"], never=[0])
    assert m == 2 and wc[0] == -1 and wc[2] == wc[3] != wc[1]
    assert wc[4] >= 0 and wc[5] >= 0
    f.write_text("the 0110\ncat 10 extra\n")
    with pytest.raises(ValueError, match=r"clusters:2"):
        read_word_clusters(str(f), ["the"])
    model = make_model()
    x = torch.tensor([[1, NEVER, 2]])
    with pytest.raises(ValueError, match="cannot be emitted"):
        model.log_likelihood(x, torch.ones_like(x, dtype=torch.bool))


def test_tagger_joint_and_tag_marginals_against_enumeration():
    """vlhmm_tagger: sum over all tag sequences of p(w, y) is p(w), and the model's p(y_t | w) (posterior
    states then tag emission) equals the marginal of the enumerated joint."""
    from argparse import Namespace

    pytest.importorskip("fairseq")
    from fairseq.data import Dictionary

    from hmm_nmt.models.vlhmm_tagger import VLHMMTagger

    words, tags = Dictionary(), Dictionary()
    for w in "abcdef":
        words.add_symbol(w)
    for t in ("X", "Y", "Z"):
        tags.add_symbol(t)
    task = Namespace(source_dictionary=words, target_dictionary=tags)
    args = Namespace(constraint="uniform", num_clusters=2, states_per_cluster=3, hmm_embed_dim=8, state_dropout=0.0)
    torch.manual_seed(0)
    model = VLHMMTagger.build_model(args, task).double().eval()
    x = torch.tensor([[words.index(w) for w in "cae"]])
    mask = torch.ones_like(x, dtype=torch.bool)
    ys = list(itertools.product(range(len(tags)), repeat=3))
    joint = torch.stack([model.joint_log_likelihood(x, torch.tensor([y]), mask)[0] for y in ys])
    torch.testing.assert_close(torch.logsumexp(joint, 0), model.hmm.log_likelihood(x, mask)[0], rtol=0, atol=1e-10)
    out = model(x)
    assert out.shape == (1, 3, len(tags))
    for t in range(3):
        for tag in range(len(tags)):
            sel = torch.tensor([y[t] == tag for y in ys])
            ref = torch.logsumexp(joint[sel], 0) - torch.logsumexp(joint, 0)
            torch.testing.assert_close(out[0, t, tag], ref, rtol=0, atol=1e-10)
