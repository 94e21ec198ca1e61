"""The class-factored lexicon kernels (hmm_nmt.hmm.class_lexicon) against materialised references."""
import pytest
import torch

from hmm_nmt.hmm.class_lexicon import (
    ClassLayout,
    class_lexicon_scores,
    class_log_mixture,
    class_log_probs,
    default_num_classes,
    frequency_classes,
    reference_class_scores,
)

F64 = torch.float64


def problem(vocab=23, dim=5, classes=4, groups=6, rows=3, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    counts = (1000.0 / torch.arange(1, vocab + 1, dtype=F64)).tolist()  # Zipf: classes of unequal size
    layout = ClassLayout(frequency_classes(counts, classes))
    c = layout.num_classes
    args = [torch.randn(groups, rows, dim, generator=g, dtype=F64), torch.randint(0, vocab, (groups,), generator=g),
            torch.randn(c, dim, generator=g, dtype=F64), torch.randn(c, generator=g, dtype=F64) if bias else None,
            torch.randn(vocab, dim, generator=g, dtype=F64), torch.randn(vocab, generator=g, dtype=F64) if bias else None]
    return args, layout


@pytest.mark.parametrize("vocab, classes", [(23, 4), (1000, 32), (5, 9), (300, 1)])
def test_frequency_classes_partition_by_frequency_with_bounded_sizes(vocab, classes):
    counts = (1000.0 / torch.arange(1, vocab + 1, dtype=F64) ** 1.2).tolist()
    class_of = frequency_classes(counts, classes)
    sizes = torch.bincount(class_of)
    assert class_of.shape == (vocab,) and len(sizes) <= min(classes, vocab) and (sizes > 0).all()
    assert (class_of[1:] >= class_of[:-1]).all()  # counts decrease with the index: classes never go back
    c = min(classes, vocab)
    assert sizes.max() <= -(-2 * vocab // c)  # at most 2V/C words: the gathered table stays small
    assert sizes[0] <= sizes[-1]  # frequent words in the small classes


def test_frequency_classes_ties_and_default():
    assert frequency_classes([5, 5, 5, 5], 2).tolist() == [0, 0, 1, 1]
    assert default_num_classes(32000) == 179 and default_num_classes(1) == 1


def test_layout_members_round_trip():
    class_of = torch.tensor([2, 0, 1, 0, 2, 2, 1])
    layout = ClassLayout(class_of)
    assert layout.members[class_of, layout.position].tolist() == list(range(7))
    assert layout.sizes.tolist() == [2, 2, 3] and layout.valid.sum() == 7


@pytest.mark.parametrize("bias", [True, False])
def test_log_probs_are_a_distribution(bias):
    (hidden, _, cw, cb, w, b), layout = problem(bias=bias)
    lp = class_log_probs(hidden, cw, cb, w, b, layout)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(hidden.shape[:2], dtype=F64))
    # p(e | j) = p(c(e) | j) p(e | c(e), j) written out with softmaxes
    lc = torch.log_softmax(hidden @ cw.t() + (cb if bias else 0), -1)
    z = hidden @ w.t() + (b if bias else 0)
    for v in range(w.size(0)):
        members = (layout.class_of == layout.class_of[v]).nonzero().squeeze(1)
        expect = lc[..., layout.class_of[v]] + z[..., v] - torch.logsumexp(z[..., members], -1)
        torch.testing.assert_close(lp[..., v], expect)


@pytest.mark.parametrize("chunk", [1, 2, 10 ** 6])
def test_chunked_equals_materialised_values_and_gradients(chunk):
    args, layout = problem()
    leaves = [a.requires_grad_() if a.is_floating_point() else a for a in args]
    g_out = torch.randn(2, 6, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
    results = []
    for fn in (lambda *a: class_lexicon_scores(*a, layout, chunk), lambda *a: reference_class_scores(*a, layout)):
        gold, mean = fn(*leaves)
        grads = torch.autograd.grad((gold * g_out[0]).sum() + (mean * g_out[1]).sum(),
                                    [a for a in leaves if a.is_floating_point()])
        results.append((gold, mean, grads))
    for a, b in zip(results[0][:2], results[1][:2]):
        torch.testing.assert_close(a, b)
    for a, b in zip(results[0][2], results[1][2]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("bias", [True, False])
def test_gradcheck_float64(bias):
    args, layout = problem(vocab=11, dim=3, classes=3, groups=3, rows=2, bias=bias)
    target = args[1]
    floats = [a.requires_grad_() for a in args if a is not None and a.is_floating_point()]

    def f(*xs):
        it = iter(xs)
        hidden, cw = next(it), None
        cw = next(it)
        cb = next(it) if bias else None
        w = next(it)
        b = next(it) if bias else None
        return class_lexicon_scores(hidden, target, cw, cb, w, b, layout, 1)

    assert torch.autograd.gradcheck(f, floats)


@pytest.mark.parametrize("topk", [False, True])
def test_log_mixture_equals_materialised(topk):
    g = torch.Generator().manual_seed(1)
    (_, _, cw, cb, w, b), layout = problem()
    src_feat, tgt_feat = torch.randn(2, 4, 5, generator=g, dtype=F64), torch.randn(2, 3, 5, generator=g, dtype=F64)
    log_align = torch.randn(2, 3, 4, generator=g, dtype=F64).log_softmax(-1)
    keep = None
    if topk:
        keep = log_align.topk(2, -1).indices
        log_align = torch.full_like(log_align, float("-inf")).scatter(-1, keep, log_align.gather(-1, keep)
                                                                      .log_softmax(-1))
    lp = class_log_probs(torch.relu(src_feat[:, None] + tgt_feat[:, :, None]), cw, cb, w, b, layout)
    expect = torch.logsumexp(lp + log_align[..., None], dim=2)
    for chunk in (1, 5, 1024):
        got = class_log_mixture(src_feat, tgt_feat, log_align, cw, cb, w, b, layout, chunk, keep_idx=keep)
        torch.testing.assert_close(got, expect)
    torch.testing.assert_close(expect.exp().sum(-1), torch.ones(2, 3, dtype=F64))
