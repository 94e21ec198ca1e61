"""Character features see the real characters of every word: the task's batches carry ``src_chars`` (the raw
words' character ids over the word dictionary's alphabet), so a word unseen in training (``<unk>``) still gets
its own character representation; without ``src_chars`` the model reads the dictionary strings as before."""
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from fairseq import tasks

from benchmarks.tagging import make_args
from hmm_nmt.data.chars import PAD, UNK, CharAlphabet, collate_chars

torch.set_num_threads(1)

TRAIN = [  # word POS NER (IOB2)
    [("Peter", "NNP", "B-PER"), ("met", "VBD", "O"), ("Anna", "NNP", "B-PER"), ("in", "IN", "O"),
     ("Paris", "NNP", "B-LOC")],
    [("the", "DT", "O"), ("EU", "NNP", "B-ORG"), ("said", "VBD", "O"), ("Peter", "NNP", "B-PER")],
    [("Anna", "NNP", "B-PER"), ("and", "CC", "O"), ("Peter", "NNP", "B-PER"), ("met", "VBD", "O")],
]
# "Petra", "Pierre", "Ania": unseen in TRAIN, made of characters of its words (the alphabet stays the same)
EXTRA = [[("Petra", "NNP", "B-PER"), ("met", "VBD", "O"), ("Ania", "NNP", "B-PER"), ("in", "IN", "O"),
          ("Pierre", "NNP", "B-PER")]]
DEV = [TRAIN[1], EXTRA[0], TRAIN[0]]  # ids and the collater's (length-sorted) order differ
CHARS = ["--char-embed-dim", "4", "--char-hidden", "3"]


def write(path, sents):
    with open(path, "w") as f:
        for s in sents:
            f.writelines(" ".join(r) + "\n" for r in s)
            f.write("\n")
    return str(path)


def make_task(tmp_path, train, arch="bilstm_tagger", extra=CHARS, dev=DEV):
    tmp_path.mkdir(parents=True, exist_ok=True)
    size = ["--context-hidden", "4", "--iohmm-states", "3"] if arch == "iohmm_tagger" else ["--hidden-size", "4"]
    args = make_args(arch, str(tmp_path), ["--train-file", write(tmp_path / "train.txt", train),
                                           "--valid-file", write(tmp_path / "dev.txt", dev),
                                           "--embed-dim", "5"] + size + list(extra))
    task = tasks.setup_task(args)
    task.load_dataset("train")
    task.load_dataset("valid")
    return args, task


def batch(task, split="valid", n=16):
    return next(iter(task.get_batch_iterator(task.dataset(split), max_sentences=n).next_epoch_itr(shuffle=False)))


def random_model(task, args, seed=0):
    torch.manual_seed(seed)
    model = task.build_model(args).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    return model


# ------------------------------------------------------------------------------------------ the alphabet
def test_alphabet_is_deterministic_with_padding_and_unknown():
    class D:
        nspecial = 4
        symbols = ["<s>", "<pad>", "</s>", "<unk>", "peter", "anna", "é"]

    a = CharAlphabet.from_dictionary(D)
    assert a.chars == tuple(sorted(set("peterannaé")))
    assert a.encode("ant") == [a.index["a"], a.index["n"], a.index["t"]] and min(a.index.values()) == 2
    assert a.encode("aX") == [a.index["a"], UNK] and a.encode("") == [UNK] and len(a.encode("a" * 99)) == 40
    assert len(a) == len(a.chars) + 2 == a.base_size
    cased = CharAlphabet.from_dictionary(D, case_variants=True)
    assert cased.chars == a.chars and all(cased.index[c] == a.index[c] for c in a.chars)  # ids do not move
    assert cased.variants == tuple(sorted("PETRANÉ")) and cased.decode(cased.encode("Peter")) == "Peter"
    rows = [a.words_to_tensor(["ant", "a"]), a.words_to_tensor(["nnnnn"])]
    out = collate_chars(rows, max_chars=4)
    assert out.shape == (2, 2, 4) and out[1, 1].eq(PAD).all() and out[0, 1, 1:].eq(PAD).all()
    assert a.decode(out[0, 0].tolist()) == "ant" and a.decode(out[1, 0].tolist()) == "nnnn"


# ------------------------------------------------------------------------------------------ (b) the batches
@pytest.mark.parametrize("lowercase", [False, True])
def test_batch_src_chars_decode_to_the_raw_words(tmp_path, lowercase):
    args, task = make_task(tmp_path, TRAIN, extra=CHARS + (["--lowercase"] if lowercase else []))
    wd = task.source_dictionary
    assert ("peter" in wd.indices) == lowercase and ("Peter" in wd.indices) != lowercase
    alphabet = task.char_alphabet()
    sample = batch(task)
    net = sample["net_input"]
    src, chars = net["src_tokens"], net["src_chars"]
    assert chars.dtype == torch.long and chars.shape[:2] == src.shape
    assert chars.size(2) == max(len(w) for s in DEV for w, _, _ in s)
    for row, sid in enumerate(sample["id"].tolist()):  # the collater's order (sorted by length)
        words = [w for w, _, _ in DEV[sid]]
        for t, w in enumerate(words):
            assert alphabet.decode(chars[row, t].tolist()) == w  # original casing, unseen words included
            assert chars[row, t, len(w):].eq(PAD).all()
            assert src[row, t] == wd.index(w.lower() if lowercase else w)
        assert chars[row, len(words):].eq(PAD).all()
    assert (src == wd.unk()).any()  # the unseen words are <unk> for the word embedding...
    # ...and the word tensors, lengths and targets are those of a batch without characters
    _, plain = make_task(tmp_path / "plain", TRAIN, extra=["--lowercase"] if lowercase else [])
    ref = batch(plain)
    assert "src_chars" not in ref["net_input"]
    for key in ("src_tokens", "src_lengths"):
        assert torch.equal(ref["net_input"][key], net[key])
    assert torch.equal(ref["target"], sample["target"]) and torch.equal(ref["id"], sample["id"])


def test_inference_dataset_carries_chars_when_given_the_words(tmp_path):
    args, task = make_task(tmp_path, TRAIN)
    words = [["Petra", "met"], ["Anna"]]
    src = [torch.tensor([task.source_dictionary.index(w) for w in ws]) for ws in words]
    ds = task.build_dataset_for_inference(src, [len(s) for s in src], src_words=words)
    net = ds.collater([ds[i] for i in range(len(ds))])["net_input"]
    assert net["src_chars"].shape == (2, 2, 5) and task.char_alphabet().decode(net["src_chars"][0, 0].tolist()) == "Petra"
    ds = task.build_dataset_for_inference(src, [len(s) for s in src])
    assert "src_chars" not in ds.collater([ds[i] for i in range(len(ds))])["net_input"]


# ------------------------------------------------------------------------------------------ (a) unseen words
@pytest.mark.parametrize("arch", ["bilstm_tagger", "hnmc_tagger", "iohmm_tagger"])
def test_unseen_word_gets_its_characters_as_if_it_were_in_the_dictionary(tmp_path, arch):
    args, task = make_task(tmp_path / "without", TRAIN, arch)  # Petra, Pierre, Ania unseen
    args2, task2 = make_task(tmp_path / "with", TRAIN + EXTRA, arch)  # ... and in this dictionary
    assert task.char_alphabet().index == task2.char_alphabet().index  # same characters, other words
    wd, wd2 = task.source_dictionary, task2.source_dictionary
    assert wd.index("Petra") == wd.unk() and wd2.index("Petra") != wd2.unk()
    model = random_model(task, args)
    model2 = random_model(task2, args2)
    model2.chars.load_state_dict(model.chars.state_dict())
    sample = batch(task)
    src, chars = sample["net_input"]["src_tokens"], sample["net_input"]["src_chars"]
    with torch.no_grad():
        new = model.chars(src, chars)
        old = model.chars(src)  # the dictionary strings: <unk>'s single unknown character
        unk_rep = model.chars(torch.tensor([[wd.unk()]]))[0, 0]
        row = sample["id"].tolist().index(DEV.index(EXTRA[0]))
        for t, w in enumerate(w for w, _, _ in EXTRA[0]):
            in_dict = model2.chars(torch.tensor([[wd2.index(w)]]))[0, 0]  # dictionary string, other dictionary
            assert torch.allclose(new[row, t], in_dict, rtol=0, atol=1e-12), w
            if src[row, t] == wd.unk():
                assert torch.allclose(old[row, t], unk_rep, rtol=0, atol=1e-12)
                assert (new[row, t] - unk_rep).abs().max() > 1e-3, w
    assert (src == wd.unk()).sum() == 3
    # the unseen words' characters change the tagger's output there, and nowhere else in their sentence
    with torch.no_grad():
        out_new = model(**sample["net_input"])
        out_old = model(src, sample["net_input"]["src_lengths"])
    changed = (out_new - out_old).abs().amax(-1) > 1e-9
    assert changed[row].any() and not changed[[r for r in range(len(src)) if r != row]].any()


# ------------------------------------------------------------------------------------------ (c) seen words
@pytest.mark.parametrize("arch", ["bilstm_tagger", "hnmc_tagger", "bilstm_crf_tagger"])
def test_seen_words_score_exactly_as_with_the_dictionary_strings(tmp_path, arch):
    args, task = make_task(tmp_path, TRAIN, arch, dev=TRAIN)
    model = random_model(task, args)
    sample = batch(task)
    net = sample["net_input"]
    assert not (net["src_tokens"] == task.source_dictionary.unk()).any()
    plain = {k: v for k, v in net.items() if k != "src_chars"}
    with torch.no_grad():
        feats = model.chars(net["src_tokens"], net["src_chars"])
        assert torch.allclose(feats, model.chars(net["src_tokens"]), rtol=0, atol=1e-13)  # padding included
        assert torch.allclose(model(**net), model(**plain), rtol=0, atol=1e-12)
        if arch == "bilstm_crf_tagger":
            nll = model.sequence_nll(net["src_tokens"], net["src_lengths"], sample["target"], src_chars=net["src_chars"])
            assert torch.allclose(nll, model.sequence_nll(net["src_tokens"], net["src_lengths"], sample["target"]),
                                  rtol=0, atol=1e-10)
        constraints = task.tag_constraints()
        a = model.constrained_viterbi(net["src_tokens"], net["src_lengths"], constraints, src_chars=net["src_chars"])
        b = model.constrained_viterbi(net["src_tokens"], net["src_lengths"], constraints)
        assert (a is None and b is None) or torch.equal(a, b)
    # the criterion passes src_chars on (loss as without it, for seen words)
    crit = task.build_criterion(args)
    loss, _, log = crit(model, sample)
    loss0, _, log0 = crit(model, {**sample, "net_input": plain})
    assert loss.item() == pytest.approx(loss0.item(), rel=1e-10) and log["n_correct"] == log0["n_correct"]


def test_lowercase_model_of_older_checkpoints_reads_original_case_as_lowercase(tmp_path):
    """A checkpoint trained with --lowercase before the alphabet had case variants (character embedding of the
    dictionary's characters only) still loads: each variant starts as its lowercase character."""
    args, task = make_task(tmp_path, TRAIN, extra=CHARS + ["--lowercase"], dev=TRAIN)
    model = random_model(task, args)
    alphabet = task.char_alphabet()
    assert len(alphabet) > alphabet.base_size  # P, A, E, U
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["chars.embed.weight"] = state["chars.embed.weight"][: alphabet.base_size]  # the older checkpoint
    fresh = random_model(task, args, seed=1)
    fresh.upgrade_state_dict_named(state, "")
    fresh.load_state_dict(state)
    sample = batch(task)
    net = sample["net_input"]
    assert alphabet.decode(net["src_chars"][net["src_tokens"] == task.source_dictionary.index("peter")][0].tolist()) \
        == "Peter"
    with torch.no_grad():
        old = fresh.chars(net["src_tokens"])  # lowercased dictionary strings, as the older model read them
        assert torch.allclose(fresh.chars(net["src_tokens"], net["src_chars"]), old, rtol=0, atol=1e-13)


# ------------------------------------------------------------------------------------------ (d) CLI
@pytest.mark.slow
def test_fairseq_train_and_tag_script_with_char_features(tmp_path):
    train = write(tmp_path / "train.txt", TRAIN * 4)
    dev = write(tmp_path / "dev.txt", TRAIN)
    test = write(tmp_path / "test.txt", EXTRA + TRAIN[:1])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ckpt = tmp_path / "ckpt"
    r = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", str(tmp_path), "--user-dir", os.path.join(ROOT, "hmm_nmt"),
         "--task", "sequence_tagging", "--train-file", train, "--valid-file", dev, "--lowercase",
         "--arch", "bilstm_crf_tagger", "--embed-dim", "8", "--hidden-size", "8",
         "--char-embed-dim", "8", "--char-hidden", "8", "--criterion", "tagging_cross_entropy",
         "--optimizer", "adam", "--lr", "0.01", "--batch-size", "4", "--required-batch-size-multiple", "1", "--max-epoch", "2", "--cpu",
         "--save-dir", str(ckpt), "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1",
         "--num-workers", "0"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "test.tagged"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tag.py"), "--path", str(ckpt / "checkpoint_best.pt"),
                        "--input", test, "--output", str(out), "--gold-column", "-1", "--cpu"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "accuracy" in r.stdout
    lines = [x.split() for x in out.read_text().splitlines() if x.strip()]
    assert [x[0] for x in lines] == [w for s in EXTRA + TRAIN[:1] for w, _, _ in s] and all(len(x) == 4 for x in lines)
    # hmm-nmt-tag gives the model the raw words' characters (original case, unseen words included)
    from hmm_nmt.cli import tag
    model, task = tag.load(str(ckpt / "checkpoint_best.pt"), {})
    assert tag.uses_chars(model)
    words = [[w for w, _, _ in EXTRA[0]], ["Anna", "met"]]
    net = tag.make_net_input(task, words, with_chars=True)
    alphabet = task.char_alphabet()
    assert [alphabet.decode(net["src_chars"][0, t].tolist()) for t in range(5)] == words[0]
    assert net["src_tokens"][0, 0] == task.source_dictionary.unk() and net["src_chars"][1, 2].eq(PAD).all()
    model.eval()
    with torch.no_grad():
        with_chars = model(**net)
        without = model(net["src_tokens"], net["src_lengths"])
    assert not torch.allclose(with_chars[0, 0], without[0, 0])


def test_iohmm_tagger_sequence_likelihood_and_criterion_take_the_characters(tmp_path):
    """The IOHMM tagger's u_t joins the character features: its exact sequence likelihood (Eq. 6) and the
    ``iohmm_tagging`` criterion see the words' own characters, which matter only where a word is <unk>."""
    args, task = make_task(tmp_path, TRAIN, "iohmm_tagger", extra=CHARS + ["--criterion", "iohmm_tagging"])
    model = random_model(task, args)
    assert model.chars.output_dim == 6 and model.context.input_size == 5 + 6
    sample = batch(task)
    net = sample["net_input"]
    unk = net["src_tokens"].eq(task.source_dictionary.unk())
    rows_with_unk = unk.any(1)
    assert rows_with_unk.any() and (~rows_with_unk).any()
    with torch.no_grad():
        ll = model.sequence_log_likelihood(net["src_tokens"], net["src_lengths"], sample["target"],
                                           src_chars=net["src_chars"])
        ll0 = model.sequence_log_likelihood(net["src_tokens"], net["src_lengths"], sample["target"])
    assert torch.allclose(ll[~rows_with_unk], ll0[~rows_with_unk], rtol=0, atol=1e-10)
    assert ((ll - ll0)[rows_with_unk].abs() > 1e-6).all()
    crit = task.build_criterion(args)
    loss, _, _ = crit(model, sample)
    assert loss.item() == pytest.approx(-ll.sum().item(), rel=1e-10)
