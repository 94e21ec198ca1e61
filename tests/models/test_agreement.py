"""Alignment by agreement: the joint model, the dhmm_agreement criterion, the split tool, a real CLI run.

The loss with λ = 0 is the two directions' dhmm criteria; the reversed batch is what fairseq's
LanguagePairDataset collates for the swapped pair; the agreement term vanishes on agreeing posteriors and its
gradient through the forward-backward matches finite differences (both orders, both terms); --init-fwd/--init-rev
load the given weights; the exported directions give the joint model's posteriors; fairseq-train, the split tool
and hmm-nmt-align run end to end.
"""
import os
import subprocess
import sys

import pytest
import torch
from dhmm_testlib import build, make_dict
from fairseq.data import LanguagePairDataset

from hmm_nmt.criterions.dhmm_agreement import DHMMAgreementCriterion, agreement_term, reverse_sample
from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import DHMMLabelSmoothedCrossEntropyCriterion
from hmm_nmt.hmm import direct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
F64 = torch.float64
ARCHS = {0: "transformer_dhmm_agreement", 1: "transformer_dhmm_first_order_agreement"}


class _Task:
    def __init__(self, d):
        self.source_dictionary = self.target_dictionary = d


def _pairs(d, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    words = [d.index(f"w{k}") for k in range(9)]

    def sent():
        n_words = int(torch.randint(1, 6, (1,), generator=g))
        return torch.tensor([words[int(k)] for k in torch.randint(0, 9, (n_words,), generator=g)] + [d.eos()])

    return [sent() for _ in range(n)], [sent() for _ in range(n)]


def _collate(src, tgt, d):
    ds = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)
    return ds.collater([ds[i] for i in range(len(src))])


def _by_id(sample):
    order = sample["id"].argsort()
    net = sample["net_input"]
    return [net["src_tokens"][order], net["src_lengths"][order], net["prev_output_tokens"][order],
            sample["target"][order]]


def test_reverse_sample_is_the_collate_of_the_swapped_pair():
    d = make_dict()
    src, tgt = _pairs(d)
    sample = _collate(src, tgt, d)
    rev = reverse_sample(sample, d.pad(), d.eos())
    swapped = _collate(tgt, src, d)
    rev["id"] = sample["id"]
    for a, b in zip(_by_id(rev), _by_id(swapped)):
        assert torch.equal(a, b)
    assert rev["ntokens"] == swapped["ntokens"] and rev["nsentences"] == swapped["nsentences"]


@pytest.mark.parametrize("order", [0, 1])
def test_weight_zero_is_the_two_directions_dhmm_losses(order):
    model, d = build(ARCHS[order])
    model.double().eval()
    src, tgt = _pairs(d, seed=order)
    sample = _collate(src, tgt, d)
    crit = DHMMAgreementCriterion(_Task(d), False, 0.1, agreement_weight=0.0)
    loss, size, log = crit(model, sample)
    plain = DHMMLabelSmoothedCrossEntropyCriterion(_Task(d), False, 0.1)
    loss_f, _, log_f = plain(model.fwd, sample)
    loss_r, _, log_r = plain(model.rev, _collate(tgt, src, d))  # the real reversed sample, its own order
    assert torch.allclose(loss, loss_f + loss_r, rtol=1e-12, atol=1e-10)
    assert torch.allclose(log["nll_loss"], log_f["nll_loss"]) and torch.allclose(log["rev_nll_loss"], log_r["nll_loss"])
    assert size == sample["ntokens"] and log["agreement"] > 0
    # the same update: gradients of the joint loss = those of the two separate losses
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    sep = torch.autograd.grad(loss_f + loss_r, list(model.parameters()), allow_unused=True)
    for a, b in zip(grads, sep):
        assert (a is None and b is None) or torch.allclose(a, b, rtol=1e-9, atol=1e-12)
    # with λ > 0 the term is added (and differentiated)
    crit1 = DHMMAgreementCriterion(_Task(d), False, 0.1, agreement_weight=2.0)
    loss1, _, log1 = crit1(model, sample)
    assert torch.allclose(loss1, loss + 2.0 * log1["agreement"], rtol=1e-12)


def _toy_batch(pad=1, eos=2):
    # left-padded sources, right-padded targets, EOS last; word ids >= 4
    src = torch.tensor([[5, 6, 7, eos], [pad, pad, 8, eos]])
    tgt = torch.tensor([[9, 10, eos, pad], [11, 12, 13, eos]])
    return src, tgt


def _place(words, src, tgt, pad, eos, gen):
    """P_f (B, T, S) and P_r (B, S_rev, T_rev) in their own layouts holding ``words[b]`` (I_b x J_b) and its
    transpose on the real-word block, independent random values on EOS rows/columns, 0 on padding."""
    rsample = reverse_sample({"net_input": {"src_tokens": src}, "target": tgt}, pad, eos)
    rsrc, rtgt = rsample["net_input"]["src_tokens"], rsample["target"]
    pf = torch.rand(tgt.shape + src.shape[1:], generator=gen, dtype=F64)
    pr = torch.rand(rtgt.shape + rsrc.shape[1:], generator=gen, dtype=F64)
    pf = pf * tgt.ne(pad)[:, :, None] * src.ne(pad)[:, None, :]
    pr = pr * rtgt.ne(pad)[:, :, None] * rsrc.ne(pad)[:, None, :]
    for b, m in enumerate(words):
        si = src[b].ne(pad).nonzero().flatten()[:-1]  # real source columns of the forward layout
        ti = tgt[b].ne(pad).nonzero().flatten()[:-1]
        ri = rsrc[b].ne(pad).nonzero().flatten()[:-1]  # the target words, as reverse source columns
        rj = rtgt[b].ne(pad).nonzero().flatten()[:-1]
        pf[b, ti[:, None], si[None, :]] = m
        pr[b, rj[:, None], ri[None, :]] = m.t()
    return pf, pr


def test_agreement_vanishes_when_the_posteriors_agree():
    pad, eos = 1, 2
    src, tgt = _toy_batch(pad, eos)
    gen = torch.Generator().manual_seed(0)
    words = [torch.rand(2, 3, generator=gen, dtype=F64), torch.rand(3, 1, generator=gen, dtype=F64)]
    pf, pr = _place(words, src, tgt, pad, eos, gen)
    assert agreement_term(pf, pr, src, tgt, pad, eos, "sos").item() == pytest.approx(0.0, abs=1e-15)
    expected = -sum(torch.log((m * m).sum(1) + 1e-6).sum() + torch.log((m * m).sum(0) + 1e-6).sum() for m in words)
    assert agreement_term(pf, pr, src, tgt, pad, eos, "mul").item() == pytest.approx(expected.item(), rel=1e-12)
    # a reverse model that puts nothing on the words: the sum of squares of the forward block
    _, pr0 = _place([torch.zeros_like(m) for m in words], src, tgt, pad, eos, gen)
    assert agreement_term(pf, pr0, src, tgt, pad, eos, "sos").item() == \
        pytest.approx(sum((m * m).sum() for m in words).item(), rel=1e-12)
    with pytest.raises(ValueError, match="--agreement"):
        agreement_term(pf, pr, src, tgt, pad, eos, "kl")


def _potentials(lengths_mask, order, gen, n_rows):
    """Random normalised alignment potentials over the real source columns (MASKED on padding)."""
    b, j = lengths_mask.shape
    valid = lengths_mask[:, None, :]
    if order == 0:
        logits = torch.randn(b, n_rows, j, generator=gen, dtype=F64, requires_grad=True)
        return [logits], lambda lg: {"log_align": lg.masked_fill(~valid, direct.MASKED).log_softmax(-1)}
    init = torch.randn(b, 1, j, generator=gen, dtype=F64, requires_grad=True)
    trans = torch.randn(b, n_rows, j, j, generator=gen, dtype=F64, requires_grad=True)

    def make(li, lt):
        return {"log_init": li.masked_fill(~valid, direct.MASKED).log_softmax(-1)[:, 0],
                "log_trans": lt.masked_fill(~valid[:, :, None, :], direct.MASKED).log_softmax(-1)}
    return [init, trans], make


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sos", "mul"])
@pytest.mark.parametrize("order", [0, 1])
def test_agreement_gradient_through_forward_backward(order, kind):
    pad, eos = 1, 2
    src, tgt = _toy_batch(pad, eos)
    rsample = reverse_sample({"net_input": {"src_tokens": src}, "target": tgt}, pad, eos)
    rsrc, rtgt = rsample["net_input"]["src_tokens"], rsample["target"]
    gen = torch.Generator().manual_seed(order)
    lex_f = torch.randn(tgt.shape + src.shape[1:], generator=gen, dtype=F64, requires_grad=True)
    lex_r = torch.randn(rtgt.shape + rsrc.shape[1:], generator=gen, dtype=F64, requires_grad=True)
    pot_f, make_f = _potentials(src.ne(pad), order, gen, tgt.size(1))
    pot_r, make_r = _potentials(rsrc.ne(pad), order, gen, rtgt.size(1))
    nf = len(pot_f)

    def term(lf, lr, *pots):
        post_f = direct.forward_backward(lf, tgt.ne(pad), **make_f(*pots[:nf]))
        post_r = direct.forward_backward(lr, rtgt.ne(pad), **make_r(*pots[nf:]))
        return agreement_term(post_f, post_r, src, tgt, pad, eos, kind)

    assert term(lex_f, lex_r, *pot_f, *pot_r).item() > 0
    assert torch.autograd.gradcheck(term, (lex_f, lex_r, *pot_f, *pot_r), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_model_refuses_separate_dictionaries_and_topk():
    from fairseq import options
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    d1, d2 = make_dict(9), make_dict(10)
    args = options.parse_args_and_arch(options.get_training_parser(),
                                       ["/nonexistent", "--arch", ARCHS[1], "--encoder-embed-dim", "16"])
    with pytest.raises(ValueError, match="joined-dictionary"):
        ARCH_MODEL_REGISTRY[ARCHS[1]].build_model(args, TranslationTask(args, d1, d2))
    with pytest.raises(ValueError, match="--lexicon-topk"):
        build(ARCHS[1], extra=["--lexicon-topk", "2"])


# --------------------------------------------------------------------------------------------- the real CLI
SMALL = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--share-all-embeddings"]


def _run(*cmd):
    proc = subprocess.run([sys.executable, *cmd], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def joint(scale_toy):
    """A few updates of the first-order agreement model on the toy corpus, split into its two directions."""
    save = scale_toy / "agree1"
    proc = _run("-m", "fairseq_cli.train", str(scale_toy / "bin"), "--user-dir", os.path.join(ROOT, "hmm_nmt"),
                "--arch", ARCHS[1], *SMALL, "--criterion", "dhmm_agreement", "--agreement-weight", "1.0",
                "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "500",
                "--max-update", "3", "--save-dir", str(save), "--no-epoch-checkpoints", "--seed", "1",
                "--num-workers", "0", "--no-progress-bar", "--log-format", "simple", "--log-interval", "1", "--cpu")
    log = proc.stderr + proc.stdout
    assert "rev_nll_loss" in log and "agreement" in log
    split = scale_toy / "agree1_split"
    out = _run("-m", "hmm_nmt_align.split_agreement", str(save / "checkpoint_last.pt"), "--out-dir", str(split))
    assert out.stdout.split() == [str(split / "fwd.pt"), str(split / "rev.pt")]
    return scale_toy, save / "checkpoint_last.pt", split


def _posteriors(model, sample):
    net = sample["net_input"]
    return model.alignment_posteriors(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"],
                                      sample["target"])


@pytest.mark.slow
def test_split_directions_give_the_joint_posteriors(joint):
    from hmm_nmt_align.loading import load_model, load_subset

    toy, ckpt, split = joint
    both, task = load_model(str(ckpt), str(toy / "bin"), cpu=True)
    fwd, ftask = load_model(str(split / "fwd.pt"), str(toy / "bin"), cpu=True)
    rev, rtask = load_model(str(split / "rev.pt"), str(toy / "bin"), cpu=True)
    assert type(fwd).__name__ == type(rev).__name__ == "TransformerDHMMModel"
    assert fwd.alignment_model_type() == rev.alignment_model_type() == "dhmm1"
    assert (ftask.cfg.source_lang, ftask.cfg.target_lang) == ("src", "tgt")
    assert (rtask.cfg.source_lang, rtask.cfg.target_lang) == ("tgt", "src")
    ds = load_subset(task, "valid")
    sample = ds.collater([ds[i] for i in range(6)])
    d = task.source_dictionary
    rsample = reverse_sample(sample, d.pad(), d.eos())
    with torch.no_grad():
        assert torch.allclose(_posteriors(fwd, sample), _posteriors(both.fwd, sample), atol=1e-6)
        assert torch.allclose(_posteriors(rev, rsample), _posteriors(both.rev, rsample), atol=1e-6)
        assert torch.allclose(_posteriors(both, sample), _posteriors(fwd, sample), atol=1e-6)  # joint = fwd


@pytest.mark.slow
def test_init_fwd_rev_load_the_given_weights(joint):
    from fairseq import checkpoint_utils
    from fairseq.data import Dictionary

    toy, ckpt, split = joint
    d = Dictionary.load(str(toy / "bin" / "dict.src.txt"))
    init = ["--init-fwd", str(split / "rev.pt"), "--init-rev", str(split / "fwd.pt")]  # swapped on purpose
    model, _ = build(ARCHS[1], dictionary=d, dim=16, layers=1, extra=["--share-all-embeddings", *init])
    saved = checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))["model"]
    for name, other in (("fwd", "rev"), ("rev", "fwd")):
        for k, v in getattr(model, name).state_dict().items():
            assert torch.equal(v, saved[f"{other}.{k}"]), (name, k)
    # the architecture must match: a first-order checkpoint cannot start a zero-order direction
    with pytest.raises(ValueError, match="fwd.pt"):
        build(ARCHS[0], dictionary=d, dim=16, layers=1, extra=["--share-all-embeddings", "--init-fwd", str(split / "fwd.pt")])
    with pytest.raises(ValueError, match="fwd.pt"):  # nor one of other sizes
        build(ARCHS[1], dictionary=d, dim=8, layers=1, extra=["--share-all-embeddings", "--init-fwd", str(split / "fwd.pt")])


@pytest.mark.slow
def test_split_refuses_a_plain_checkpoint(joint, tmp_path):
    toy, _, split = joint
    proc = subprocess.run([sys.executable, "-m", "hmm_nmt_align.split_agreement", str(split / "fwd.pt"), "--out-dir",
                           str(tmp_path)], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not an agreement checkpoint" in proc.stderr


@pytest.mark.slow
def test_align_with_the_exported_directions(joint, tmp_path):
    toy, _, split = joint
    out = tmp_path / "both.align"
    proc = _run("-m", "hmm_nmt_align.extract", "--path", str(split / "fwd.pt"), "--rev-path", str(split / "rev.pt"),
                "--data", str(toy / "bin"), "--subset", "valid", "--method", "posterior", "--symmetrize",
                "grow-diag-final-and", "--cpu", "--no-progress", "-o", str(out))
    lines = out.read_text().splitlines()
    assert len(lines) == 20 and any(lines) and "both directions merged" in proc.stderr
