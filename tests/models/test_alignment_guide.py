"""--alignment-guide-weight: the direct HMM trained toward given piece links through their posterior."""
import argparse

import pytest
import torch
from dhmm_testlib import batch, build, zipf_dict
from fairseq.data import LanguagePairDataset

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import (
    DHMMLabelSmoothedCrossEntropyCriterion,
    dhmm_loss,
    link_mask,
)

ORDERS = ["transformer_dhmm", "transformer_dhmm_first_order"]


def tiny(arch, kind="separable"):
    m, d = build(arch, dictionary=zipf_dict(), extra=["--lexicon", kind])
    m.double().eval()
    return m, d


def test_link_mask_reads_fairseqs_collated_layout():
    """Links (j, i) of each sentence, collated by LanguagePairDataset (left-padded source, sorted by length),
    land at (b, i, j + the row's left padding)."""
    d = zipf_dict()
    w = [d.index(f"w{k}") for k in range(9)]
    eos = d.eos()
    src = [torch.tensor([w[0], w[1], eos]), torch.tensor([w[2], w[3], w[4], w[5], eos])]
    tgt = [torch.tensor([w[6], w[7], w[8], eos]), torch.tensor([w[1], eos])]
    links = [[(0, 0), (1, 0), (1, 2)], [(3, 0)]]  # (source piece, target piece)
    align = [torch.tensor([x for jk in ln for x in jk], dtype=torch.int64) for ln in links]
    ds = LanguagePairDataset(src, torch.tensor([3, 5]), d, tgt, torch.tensor([4, 2]), d, align_dataset=align)
    sample = ds.collater([ds[0], ds[1]])
    target = sample["target"]
    allowed = link_mask(sample["alignments"], target.size(0), target.size(1), sample["net_input"]["src_tokens"].size(1))
    want = torch.zeros_like(allowed)
    for b, k in enumerate(sample["id"].tolist()):
        pad = int(sample["net_input"]["src_tokens"][b].eq(d.pad()).sum())
        for j, i in links[k]:
            want[b, i, j + pad] = True
    assert want.sum() == 4 and torch.equal(allowed, want)


@pytest.mark.parametrize("arch", ORDERS)
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_guide_is_minus_log_posterior_of_the_links(arch, eps):
    """One link per constrained row: the added term is -sum log p(b_i = j | E, F) read off the model's posterior
    matrix (alignment_matrices, an independent path), times the weight; the loss and NLL are otherwise unchanged."""
    m, d = tiny(arch)
    src, lens, prev, target = batch(d)
    out = m(src, lens, prev, features_only=True)
    base, base_nll, _ = dhmm_loss(m, out, target, eps)
    allowed = torch.zeros(2, target.size(1), src.size(1), dtype=torch.bool)
    picks = [(0, 0, 1), (0, 2, 3), (1, 1, 3)]  # (b, i, j) on real positions (sentence 1's source is left-padded)
    for b, i, j in picks:
        allowed[b, i, j] = True
    stats = {}
    loss, nll, _ = dhmm_loss(m, out, target, eps, links=allowed, guide_weight=0.7, stats=stats)
    post = m.alignment_matrices(src, lens, prev, target=target, methods=("posterior",))["posterior"].double()
    # sentence 0 has two constrained rows: p(b_0 = 1, b_2 = 3 | E, F) is not the product of the marginals, so
    # compare sentence by sentence with one row each
    one = allowed.clone()
    one[0, 2] = False
    stats1 = {}
    dhmm_loss(m, out, target, eps, links=one, guide_weight=0.7, stats=stats1)
    want = -(post[0, 0, 1].log() + post[1, 1, 3].log())
    torch.testing.assert_close(stats1["guide"], want, rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(nll, base_nll)
    torch.testing.assert_close(loss, base + 0.7 * stats["guide"])
    assert stats["guide"] > stats1["guide"] > 0


@pytest.mark.parametrize("arch", ORDERS)
def test_guide_gradient_raises_the_links_posterior(arch):
    """Gradient steps on the guide term alone (the weighted loss minus the plain one) raise the links' posterior."""
    m, d = tiny(arch)
    src, lens, prev, target = batch(d)
    allowed = torch.zeros(2, target.size(1), src.size(1), dtype=torch.bool)
    allowed[0, 1, 0] = allowed[1, 0, 4] = True
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    seen = []
    for _ in range(6):
        out = m(src, lens, prev, features_only=True)
        stats = {}
        guided, _, _ = dhmm_loss(m, out, target, 0.0, links=allowed, guide_weight=1.0, stats=stats)
        plain, _, _ = dhmm_loss(m, out, target, 0.0)
        seen.append(stats["guide"].item())
        opt.zero_grad()
        (guided - plain).backward()
        opt.step()
    assert all(b < a for a, b in zip(seen, seen[1:])), seen


class _Task:
    def __init__(self, d, load_alignments, links=None):
        self.cfg = argparse.Namespace(load_alignments=load_alignments, train_subset="train")
        self.target_dictionary = d
        self.datasets = {} if links is None else {"train": argparse.Namespace(align_dataset=[] if links else None)}


def test_criterion_refuses_a_weight_without_links():
    d = zipf_dict()
    with pytest.raises(ValueError, match="--load-alignments"):
        DHMMLabelSmoothedCrossEntropyCriterion(_Task(d, False), False, 0.1, alignment_guide_weight=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        DHMMLabelSmoothedCrossEntropyCriterion(_Task(d, True), False, 0.1, alignment_guide_weight=-1.0)
    crit = DHMMLabelSmoothedCrossEntropyCriterion(_Task(d, True), False, 0.1, alignment_guide_weight=1.0)
    m, d = tiny("transformer_dhmm_first_order")
    src, lens, prev, target = batch(d)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lens, "prev_output_tokens": prev},
              "target": target, "ntokens": int(target.ne(d.pad()).sum())}
    m.eval()  # a validation batch without links: the plain loss
    plain = DHMMLabelSmoothedCrossEntropyCriterion(_Task(d, False), False, 0.1)
    torch.testing.assert_close(crit(m, sample)[0], plain(m, sample)[0])
    m.train()
    crit.task = _Task(d, True, links=False)  # the training set was loaded without DATA/train.align.SRC-TGT
    with pytest.raises(ValueError, match="has no links"):
        crit(m, sample)
    crit.task = _Task(d, True, links=True)  # a batch whose sentences have no links: the plain loss
    torch.testing.assert_close(crit(m, sample)[0], plain(m, sample)[0])
    # with fairseq's layout: (source position in the padded row, b * I + i)
    sample["alignments"] = torch.tensor([[1, 0 * target.size(1) + 0], [3, 1 * target.size(1) + 1]])
    loss, _, log = crit(m, sample)
    assert log["guide"] > 0


@pytest.mark.parametrize("arch", ORDERS)
def test_guide_refuses_topk_and_mixture(arch):
    m, d = build(arch, dictionary=zipf_dict(), extra=["--lexicon-topk", "2"])
    src, lens, prev, target = batch(d)
    allowed = torch.zeros(2, target.size(1), src.size(1), dtype=torch.bool)
    allowed[0, 0, 0] = True
    with pytest.raises(ValueError, match="exact sum"):
        dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0, links=allowed, guide_weight=1.0)


@pytest.mark.parametrize("arch", ORDERS)
def test_a_link_on_padding_is_ignored(arch):
    """Links at padded positions (a padded target row, a left-padded source column of a real row) constrain
    nothing: the guided loss equals the loss without them (float64)."""
    m, d = tiny(arch)
    src, lens, prev, target = batch(d)
    assert target[1, 3] == d.pad() and src[1, 0] == d.pad()  # sentence 1: 2 target words, 2 source padding columns
    out = m(src, lens, prev, features_only=True)
    real = torch.zeros(2, target.size(1), src.size(1), dtype=torch.bool)
    real[0, 0, 1] = real[1, 0, 3] = True
    want, want_nll, _ = dhmm_loss(m, out, target, 0.1, links=real, guide_weight=0.7)
    for b, i, j in [(1, 3, 2), (1, 4, 4), (1, 1, 0)]:  # padded target rows 3 and 4; padded source column 0
        padded = real.clone()
        padded[b, i, j] = True
        loss, nll, _ = dhmm_loss(m, out, target, 0.1, links=padded, guide_weight=0.7)
        assert loss.dtype == torch.float64
        torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(nll, want_nll, rtol=1e-12, atol=1e-12)
