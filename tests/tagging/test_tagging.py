"""sequence_tagging task, tagging criterion, the seven taggers, hmm-nmt-tag and the fairseq CLI."""
import collections
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, load_tag_script, needs_shared
from conll_testlib import conll_sample
from fairseq import metrics, tasks

from benchmarks.tagging import evaluate, make_args, train_and_evaluate
from hmm_nmt.data.conll import CoNLLFormatError, read_conll, split_dev

torch.set_num_threads(1)
ARCHS = ["hnmc_tagger", "hnmc2_tagger", "hnmc_cn_tagger", "rnn_tagger", "birnn_tagger", "bilstm_tagger", "bigru_tagger"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
# the generated CoNLL-2000-format corpus (tests/conll_testlib.py) on every clone, the real one where present
CORPORA = [pytest.param("conll2000", marks=needs_shared("conll2000")), "generated"]


def task_for(tmp_path, train_file, arch="hnmc_tagger", extra=()):
    args = make_args(arch, str(tmp_path), ["--train-file", str(train_file)] + list(extra))
    task = tasks.setup_task(args)
    task.load_dataset("train")
    task.load_dataset("valid")
    return args, task


# ------------------------------------------------------------------------------------------------ reader
def test_malformed_conll_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("The DT B-NP\ncat NN I-NP\n\nsat VBD\n")
    with pytest.raises(CoNLLFormatError, match=r"bad\.txt:4: expected 3 columns, found 2"):
        read_conll(str(bad))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(CoNLLFormatError, match=r"empty\.txt:1: empty file"):
        read_conll(str(empty))
    # the task checks the chosen columns too
    good = tmp_path / "good.txt"
    good.write_text("The DT B-NP\ncat NN I-NP\n\nsat VBD B-VP\n")
    with pytest.raises(CoNLLFormatError, match=r"good\.txt:1: tag column 5 out of range, the file has 3 columns"):
        task_for(tmp_path, good, extra=["--tag-column", "5"])


def test_reader_gzip_docstart_and_dev_carve(tmp_path):
    p = conll_sample(str(tmp_path / "s.txt.gz"), 50, gz=True)
    sents = read_conll(p)
    assert len(sents) == 50 and all(len(r) == 3 for s in sents for r in s.rows)
    doc = tmp_path / "doc.txt"
    doc.write_text("-DOCSTART- -X- O\n\nEU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n")
    s2 = read_conll(str(doc))
    assert [x.column(0) for x in s2] == [["EU", "rejects"], ["Peter"]]
    assert s2[1].lines == [6]
    tr1, dev1 = split_dev(sents, 0.2, seed=7)
    tr2, dev2 = split_dev(sents, 0.2, seed=7)
    _, dev3 = split_dev(sents, 0.2, seed=8)
    assert len(dev1) == 10 and len(tr1) == 40
    assert [s.lines for s in dev1] == [s.lines for s in dev2] != [s.lines for s in dev3]
    assert {s.lines[0] for s in tr1}.isdisjoint({s.lines[0] for s in dev1})


# ------------------------------------------------------------------------------------------------ task
def test_task_batches_follow_the_contract(tmp_path):
    train = conll_sample(str(tmp_path / "train.txt"), 60)
    args, task = task_for(tmp_path, train, extra=["--dev-fraction", "0.25", "--tag-column", "1"])
    wd, td = task.source_dictionary, task.target_dictionary
    assert not task.bio  # POS tags
    assert len(task.dataset("valid")) == 15 and len(task.dataset("train")) == 45
    # dictionaries come from the training part only
    train_sents, dev_sents = split_dev(read_conll(train), 0.25, 1)
    assert set(wd.symbols[wd.nspecial:]) == {w for s in train_sents for w in s.column(0)}
    itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=8).next_epoch_itr(shuffle=False)
    by_first_words = {tuple(s.column(0)): s.column(1) for s in dev_sents}
    seen = 0
    for sample in itr:
        src, tgt = sample["net_input"]["src_tokens"], sample["target"]
        lengths = sample["net_input"]["src_lengths"]
        assert src.shape == tgt.shape
        for r in range(src.size(0)):
            n = int(lengths[r])
            assert src[r, n:].eq(wd.pad()).all() and tgt[r, n:].eq(td.pad()).all()  # right padding
            assert src[r, :n].ne(wd.pad()).all() and not src[r, :n].eq(wd.eos()).any()  # no EOS
            words = tuple(wd[i] if i != wd.unk() else None for i in src[r, :n].tolist())
            match = [k for k in by_first_words if len(k) == n and all(w is None or w == x for w, x in zip(words, k))]
            assert match and [td[i] for i in tgt[r, :n].tolist()] == by_first_words[match[0]]
            seen += 1
    assert seen == 15


def test_dev_file_and_dictionary_files(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    conll_sample(str(data / "train.txt.gz"), 40, gz=True)
    conll_sample(str(data / "valid.txt"), 10)
    args = make_args("bilstm_tagger", str(data))
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == 10  # a separate file, nothing carved
    task.load_dataset("train")
    assert len(task.dataset("train")) == 40
    assert task.bio


@pytest.mark.parametrize("arch", ARCHS)
def test_all_taggers_follow_the_contract(tmp_path, arch):
    train = conll_sample(str(tmp_path / "train.txt"), 30)
    for architecture in (1, 2, 3):
        args, task = task_for(tmp_path, train, arch, ["--tagger-architecture", str(architecture),
                                                      "--embed-dim", "8", "--hidden-size", "5"])
        # float64: batched vs alone below are different computation paths (padding changes the shapes the
        # kernels see), equal only up to the CPU's float32 rounding; in float64 the defaults hold anywhere
        model = task.build_model(args).double()
        sample = next(iter(task.get_batch_iterator(task.dataset("train"), max_sentences=4).next_epoch_itr(shuffle=False)))
        out = model(**sample["net_input"])
        assert out.shape == sample["target"].shape + (len(task.target_dictionary),)
        lp = model.get_normalized_probs(out, log_probs=True)
        torch.testing.assert_close(lp.exp().sum(-1), torch.ones(lp.shape[:2], dtype=lp.dtype))
        torch.testing.assert_close(lp, out.to(lp.dtype))  # the taggers output log-probabilities already
        # outputs at real positions do not depend on the padding (sentence alone == in the batch)
        src, n = sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"]
        model.eval()
        full = model(src, n)
        alone = model(src[-1:, : n[-1]], n[-1:])
        torch.testing.assert_close(full[-1, : n[-1]], alone[0])


def test_pretrained_embeddings(tmp_path):
    train = conll_sample(str(tmp_path / "train.txt"), 20)
    vec = tmp_path / "vec.txt"
    vec.write_text("2 3\nthe 1 2 3\nconfidence 4 5 6\n")  # word2vec header; "Confidence" found lowercased
    args, task = task_for(tmp_path, train, "hnmc_tagger", ["--embed-dim", "3", "--embed-path", str(vec), "--freeze-embed"])
    model = task.build_model(args)
    wd = task.source_dictionary
    assert model.embed.weight[wd.index("the")].tolist() == [1, 2, 3]
    assert model.embed.weight[wd.index("Confidence")].tolist() == [4, 5, 6]
    assert not model.embed.weight.requires_grad
    bad = tmp_path / "bad_vec.txt"
    bad.write_text("the 1 2 3\nof 1 2\n")
    args, task = task_for(tmp_path, train, "hnmc_tagger", ["--embed-dim", "3", "--embed-path", str(bad)])
    with pytest.raises(ValueError, match=r"bad_vec\.txt:2: vector of size 2"):
        task.build_model(args)


# ------------------------------------------------------------------------------------------------ learning
@pytest.mark.slow
@pytest.mark.parametrize("corpus", CORPORA)
def test_hnmc_taggers_beat_majority_baselines(tmp_path, corpus):
    train = conll_sample(str(tmp_path / "train.txt"), 500, corpus=corpus)
    args, task = task_for(tmp_path, train, "hnmc_cn_tagger",
                          ["--dev-fraction", "0.2", "--embed-dim", "50", "--hidden-size", "16"])
    tr, dev = split_dev(read_conll(train), 0.2, 1)
    tags = collections.Counter(t for s in tr for t in s.column(2))
    per_word = collections.defaultdict(collections.Counter)
    for s in tr:
        for w, t in zip(s.column(0), s.column(2)):
            per_word[w][t] += 1
    majority = tags.most_common(1)[0][0]
    n = sum(len(s) for s in dev)
    global_acc = 100.0 * sum(t == majority for s in dev for t in s.column(2)) / n
    word_acc = 100.0 * sum((per_word[w].most_common(1)[0][0] if w in per_word else majority) == t
                           for s in dev for w, t in zip(s.column(0), s.column(2))) / n
    res = train_and_evaluate(args, seed=1, epochs=5, lr=0.05, task=task)
    # the per-word majority tag is the strong baseline (about 76 % here); the global one about 31 %
    assert res["accuracy"] > word_acc + 3, (res, word_acc)
    assert res["accuracy"] > global_acc + 40
    assert res["chunk_f1"] > 60
    args1 = make_args("hnmc_tagger", str(tmp_path), ["--train-file", train, "--dev-fraction", "0.2",
                                                     "--embed-dim", "50", "--hidden-size", "16"])
    res1 = train_and_evaluate(args1, seed=1, epochs=5, lr=0.05, task=task)
    assert res1["accuracy"] > global_acc + 40 and res1["accuracy"] > word_acc


def test_validation_metrics_equal_seqeval(tmp_path):
    """The criterion's summed chunk counts give exactly seqeval's corpus F1 over the valid split."""
    train = conll_sample(str(tmp_path / "train.txt"), 120)
    args, task = task_for(tmp_path, train, "bilstm_tagger", ["--embed-dim", "16", "--hidden-size", "8"])
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(3):
        for sample in task.get_batch_iterator(task.dataset("train"), max_sentences=16).next_epoch_itr(shuffle=False):
            loss, n, _ = criterion(model, sample)
            opt.zero_grad()
            (loss / n).backward()
            opt.step()
    model.eval()
    logs = []
    with torch.no_grad():
        for sample in task.get_batch_iterator(task.dataset("valid"), max_sentences=5).next_epoch_itr(shuffle=False):
            logs.append(criterion(model, sample)[2])
    with metrics.aggregate(new_root=True) as agg:
        criterion.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    acc, f1, _ = evaluate(model, task)
    assert 0 < f1 < 100
    assert values["chunk_f1"] == pytest.approx(f1, abs=1e-3)
    assert values["accuracy"] == pytest.approx(acc, abs=1e-3)


# ------------------------------------------------------------------------------------------------ CLI
def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("corpus", CORPORA)
def test_cli_trains_a_tagger_and_tags_a_file(tmp_path, capsys, corpus):
    train = conll_sample(str(tmp_path / "train.txt"), 120, corpus=corpus)
    r = run([sys.executable, "-m", "fairseq_cli.train", str(tmp_path), "--train-file", train,
             "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--task", "sequence_tagging", "--arch", "hnmc_cn_tagger",
             "--hnmc-architecture", "2", "--embed-dim", "32", "--hidden-size", "16",
             "--criterion", "tagging_cross_entropy", "--optimizer", "adam", "--lr", "0.05", "--batch-size", "8",
             "--max-epoch", "3", "--save-dir", str(tmp_path / "ck"), "--no-epoch-checkpoints",
             "--best-checkpoint-metric", "chunk_f1", "--maximize-best-checkpoint-metric",
             "--num-workers", "0", "--log-format", "simple", "--seed", "3"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    log = r.stdout + r.stderr
    assert "valid on 'valid' subset" in log and "chunk_f1" in log and "accuracy" in log
    ckpt = tmp_path / "ck" / "checkpoint_best.pt"
    assert ckpt.exists()
    # tag held-out sentences (the last 20 of the sample file, words only and with gold)
    sents = read_conll(train)[-20:]
    inp = tmp_path / "in.txt"
    inp.write_text("".join("".join(" ".join(row) + "\n" for row in s.rows) + "\n" for s in sents))
    out = tmp_path / "out.txt"
    r = run([sys.executable, os.path.join(ROOT, "scripts", "tag.py"), "--path", str(ckpt), "--input", str(inp),
             "--output", str(out), "--gold-column", "2"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    tagged = read_conll(str(out))
    assert len(tagged) == 20
    tag_set = {t for s in read_conll(train) for t in s.column(2)}
    for s, t in zip(sents, tagged):
        assert [row[:3] for row in t.rows] == s.rows and len(t.rows[0]) == 4
        assert all(row[3] in tag_set for row in t.rows)
    acc = float(r.stdout.split("accuracy")[1].split()[0])
    assert acc > 60  # the majority tag (I-NP) has about 31 %
    # malformed input: clear error with the line, exit 2, no output written
    bad = tmp_path / "bad.txt"
    bad.write_text("The DT B-NP\nbig JJ\n")
    tag_main = load_tag_script().main
    assert tag_main(["--path", str(ckpt), "--input", str(bad), "--output", str(tmp_path / "bad.out")]) == 2
    assert "bad.txt:2: expected 3 columns, found 2" in capsys.readouterr().err
    assert not (tmp_path / "bad.out").exists()


def test_cli_rejects_malformed_training_file(tmp_path, monkeypatch):
    """fairseq-train's own entry point (in-process, to save an interpreter start) stops with the file and line."""
    from fairseq_cli import train as fairseq_train

    bad = tmp_path / "train.txt"
    bad.write_text("The DT B-NP\ncat NN I-NP\n\nsat VBD B-VP\non IN\n")
    monkeypatch.setattr(sys, "argv", [
        "fairseq-train", str(tmp_path), "--train-file", str(bad), "--user-dir", os.path.join(ROOT, "hmm_nmt"),
        "--task", "sequence_tagging", "--arch", "hnmc_tagger", "--criterion", "tagging_cross_entropy",
        "--optimizer", "adam", "--max-epoch", "1", "--batch-size", "8", "--save-dir", str(tmp_path / "ck"),
        "--cpu"])
    with pytest.raises(CoNLLFormatError, match=r"train\.txt:5: expected 3 columns, found 2"):
        fairseq_train.cli_main()
    assert not (tmp_path / "ck" / "checkpoint_last.pt").exists()


def test_early_stopping_on_a_flat_dev_curve_keeps_the_best_epoch(tmp_path):
    """lr 0: the dev score never improves after epoch 1, so patience 2 stops at epoch 3 and keeps epoch 1."""
    train = conll_sample(str(tmp_path / "train.txt"), 60)
    args, task = task_for(tmp_path, train, "bilstm_tagger", ["--embed-dim", "8", "--hidden-size", "4"])
    res = train_and_evaluate(args, seed=1, epochs=10, lr=0.0, task=task, patience=2, metric="accuracy")
    assert res["epochs_run"] == 3 and res["best_epoch"] == 1
    full = train_and_evaluate(args, seed=1, epochs=2, lr=0.0, task=task)
    assert full["epochs_run"] == 2 and full["best_epoch"] == 2 and full["accuracy"] == res["accuracy"]
