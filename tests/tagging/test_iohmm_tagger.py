"""--arch iohmm_tagger on the sequence_tagging task: contract, exact marginals, likelihood criterion, CLI."""
import itertools
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, needs_shared
from conll_testlib import conll_sample
from fairseq import options
from fairseq.data import Dictionary

from hmm_nmt.criterions.iohmm_tagging import IOHMMTaggingCriterion
from hmm_nmt.models.iohmm_tagger import IOHMMTagger

torch.set_num_threads(1)
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


class FakeTask:
    """Only what build_model(args, task) may read: the two dictionaries."""

    def __init__(self, n_words, tags):
        self.source_dictionary, self.target_dictionary = Dictionary(), Dictionary()
        for i in range(n_words):
            self.source_dictionary.add_symbol(f"w{i}")
        for t in tags:
            self.target_dictionary.add_symbol(t)


def tagger_args(extra=()):
    parser = options.get_training_parser(default_task="sequence_tagging")
    argv = ["unused", "--task", "sequence_tagging", "--arch", "iohmm_tagger", "--user-dir",
            os.path.join(ROOT, "hmm_nmt")] + list(extra)
    return options.parse_args_and_arch(parser, input_args=argv)


def fake_model(context="bilstm", states=3, tags=("A", "B", "C")):
    args = tagger_args(["--embed-dim", "8", "--context-hidden", "4", "--iohmm-states", str(states),
                        "--iohmm-context", context, "--dropout", "0"])
    torch.manual_seed(0)
    task = FakeTask(10, tags)
    return IOHMMTagger.build_model(args, task).double().eval(), task


def fake_batch(task, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    wd, td = task.source_dictionary, task.target_dictionary
    B, T = len(lengths), max(lengths)
    src = torch.randint(wd.nspecial, len(wd), (B, T), generator=g)
    tgt = torch.randint(td.nspecial, len(td), (B, T), generator=g)
    pad = torch.arange(T)[None] >= torch.tensor(lengths)[:, None]
    return src.masked_fill(pad, wd.pad()), torch.tensor(lengths), tgt.masked_fill(pad, td.pad())


@pytest.mark.parametrize("context", ["none", "bilstm"])
def test_contract_with_fake_dictionaries_and_padding(context):
    model, task = fake_model(context)
    src, lengths, _ = fake_batch(task, [5, 3, 1])
    out = model(src, lengths)
    n_tags = len(task.target_dictionary)
    assert out.shape == (3, 5, n_tags)
    lp = model.get_normalized_probs(out, log_probs=True)
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(3, 5, dtype=torch.float64))
    torch.testing.assert_close(model.get_normalized_probs(out, log_probs=False), lp.exp())
    for b, L in enumerate([5, 3, 1]):  # padding never changes a sentence's outputs
        alone = model(src[b:b + 1, :L], lengths[b:b + 1])
        torch.testing.assert_close(out[b:b + 1, :L], alone)


def test_outputs_are_the_exact_marginals_of_the_sequence_likelihood():
    """exp(model output)[t, c] == sum over all tag sequences with y_t = c of P(y | u) (Eq. 6), by enumeration."""
    model, task = fake_model("bilstm", states=3, tags=("A", "B"))
    src, lengths, _ = fake_batch(task, [3])
    n_tags = len(task.target_dictionary)  # specials included: the model scores every index
    seqs = torch.tensor(list(itertools.product(range(n_tags), repeat=3)))
    ll = model.sequence_log_likelihood(src.expand(len(seqs), 3), lengths.expand(len(seqs)), seqs)
    torch.testing.assert_close(ll.logsumexp(0), torch.zeros((), dtype=torch.float64))  # a distribution over y
    marg = model(src, lengths)[0].exp()
    for t in range(3):
        ref = torch.zeros(n_tags, dtype=torch.float64).index_add_(0, seqs[:, t], ll.exp())
        torch.testing.assert_close(marg[t], ref)


def test_iohmm_tagging_criterion_is_the_negative_sequence_log_likelihood():
    model, task = fake_model("none")
    model.train()
    src, lengths, tgt = fake_batch(task, [4, 2])
    task.bio = False
    crit = IOHMMTaggingCriterion(task)
    crit.padding_idx = task.target_dictionary.pad()
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}, "target": tgt}
    loss, sample_size, log = crit(model, sample)
    assert sample_size == 6
    ref = -model.sequence_log_likelihood(src, lengths, tgt).sum()
    torch.testing.assert_close(loss, ref)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    # per-position marginal NLL is logged beside it, and is the tagging_cross_entropy loss
    marg = -model(src, lengths).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)[tgt.ne(1)].sum()
    torch.testing.assert_close(torch.as_tensor(log["marginal_loss"]), marg.float())


@pytest.mark.slow
@pytest.mark.parametrize("corpus", [pytest.param("conll2000", marks=needs_shared("conll2000")), "generated"])
def test_cli_trains_iohmm_tagger_and_tags_a_file(tmp_path, corpus):
    """fairseq-train --task sequence_tagging --arch iohmm_tagger --criterion iohmm_tagging, then hmm-nmt-tag; on
    CoNLL-2000 where present, and on the generated corpus of its format (tests/conll_testlib.py)."""
    train = conll_sample(str(tmp_path / "train.txt"), 150, corpus=corpus)
    test = conll_sample(str(tmp_path / "test.txt"), 30, skip=150, corpus=corpus)
    r = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", str(tmp_path), "--train-file", train,
         "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--task", "sequence_tagging", "--tag-column", "1",
         "--arch", "iohmm_tagger", "--iohmm-states", "8", "--embed-dim", "32", "--context-hidden", "32",
         "--criterion", "iohmm_tagging", "--optimizer", "adam", "--lr", "0.02", "--batch-size", "16",
         "--max-epoch", "4", "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints",
         "--num-workers", "0", "--log-format", "simple", "--log-interval", "1", "--seed", "1"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    log = r.stdout + r.stderr
    assert "valid on 'valid' subset" in log and "accuracy" in log and "marginal_loss" in log
    losses = [float(x.split("loss=")[1].split(",")[0]) for x in log.splitlines() if " loss=" in x]
    assert len(losses) > 20 and losses[-1] < losses[0] - 1.0, losses
    out = tmp_path / "out.txt"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tag.py"), "--path",
                        str(tmp_path / "ck" / "checkpoint_best.pt"), "--input", test, "--output", str(out),
                        "--gold-column", "1", "--cpu"], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(out.read_text().strip().split("\n\n")) == 30
    acc = float(r.stdout.split("accuracy")[1].split()[0])
    assert acc > 50, r.stdout  # POS on held-out sentences; the majority tag (NN) has about 14 %
