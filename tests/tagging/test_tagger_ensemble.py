"""Ensembles of taggers (``hmm_nmt.models.tagger_ensemble``, ``hmm-nmt-tag --path a:b``): the CRF ensemble's
Viterbi path is the best valid path of the summed CRF scores (brute force), one member is the model itself,
and the script tags with several checkpoints and refuses ones trained on other data."""
import os

import pytest
import torch
from conftest import load_tag_script, save_tagger_checkpoint
from test_tagging_schemes_decoding import IOB1, make_task, valid_paths, write

from hmm_nmt.criterions.tagging_cross_entropy import decode_tags
from hmm_nmt.data import tag_schemes as ts
from hmm_nmt.data.conll import read_conll
from hmm_nmt.models.tagger_ensemble import TaggerEnsemble

torch.set_num_threads(1)


def random_model(task, args, seed):
    torch.manual_seed(seed)
    model = task.build_model(args).eval()
    with torch.no_grad():  # random weights: the members disagree and argmax is free to be invalid
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    return model


def batch(task):
    words = task.source_dictionary
    sents = [("Peter", "met", "Anna"), ("Erna", "said")]
    src = torch.tensor([[words.index(w) for w in sents[0]], [words.index("Erna"), words.index("said"), words.pad()]])
    return {"src_tokens": src, "src_lengths": torch.tensor([3, 2]),
            "src_chars": task.batch_chars([list(s) for s in sents], 3)}


def test_crf_ensemble_viterbi_is_the_best_valid_path_of_the_summed_scores(tmp_path):
    args, task = make_task(tmp_path, "bilstm_crf_tagger", ["--tag-scheme", "iob2", "--char-embed-dim", "3",
                                                           "--char-hidden", "2"], n_copies=1)
    members = [random_model(task, args, s) for s in (1, 2, 3)]
    ens = TaggerEnsemble(members).eval()
    net = batch(task)
    found_disagreement = False
    with torch.no_grad():
        pred = decode_tags(ens, net, ens(**net), task, "viterbi")
        singles = [decode_tags(m, net, m.get_normalized_probs(m(**net), log_probs=True), task, "viterbi")
                   for m in members]
        for b, n in enumerate([3, 2]):
            assert ts.is_valid([task.tag_dict[i] for i in pred[b, :n].tolist()], "iob2")
            emissions = [m._scores(net["src_tokens"][b:b + 1, :n], None, net["src_chars"][b:b + 1, :n])[0]
                         for m in members]

            def score(path):
                return sum(m.crf.score(e, torch.tensor([path]))[0].item() for m, e in zip(members, emissions))
            best = max(valid_paths(task, n), key=score)
            assert pred[b, :n].tolist() == list(best)
            found_disagreement |= len({tuple(s[b, :n].tolist()) for s in singles}) > 1
    assert found_disagreement  # otherwise the test would not tell an ensemble from any one member


def test_one_member_is_the_model_and_scores_are_mean_probabilities(tmp_path):
    args, task = make_task(tmp_path, "bilstm_crf_tagger", ["--tag-scheme", "bioes"], n_copies=1)
    a, b = random_model(task, args, 5), random_model(task, args, 6)
    net = batch(task)
    with torch.no_grad():
        la = a.get_normalized_probs(a(**net), log_probs=True)
        lb = b.get_normalized_probs(b(**net), log_probs=True)
        one = TaggerEnsemble([a])
        torch.testing.assert_close(one(**net), la)
        assert torch.equal(one.constrained_viterbi(net["src_tokens"], net["src_lengths"], task.tag_constraints()),
                           a.constrained_viterbi(net["src_tokens"], net["src_lengths"], task.tag_constraints()))
        two = TaggerEnsemble([a, b])(**net)
        torch.testing.assert_close(two.exp(), (la.exp() + lb.exp()) / 2)


def test_ensemble_without_crf_decodes_its_mean_probabilities_under_the_scheme(tmp_path):
    args, task = make_task(tmp_path, "bilstm_tagger", ["--tag-scheme", "iob2"], n_copies=1)
    ens = TaggerEnsemble([random_model(task, args, s) for s in (7, 8)]).eval()
    net = batch(task)
    with torch.no_grad():
        lprobs = ens(**net)
        assert ens.constrained_viterbi(net["src_tokens"], net["src_lengths"], task.tag_constraints()) is None
        pred = decode_tags(ens, net, lprobs, task, "viterbi")
    for b, n in enumerate([3, 2]):
        best = max(valid_paths(task, n), key=lambda p: sum(lprobs[b, t, k].item() for t, k in enumerate(p)))
        assert pred[b, :n].tolist() == list(best)


@pytest.mark.slow
def test_tag_script_ensemble_and_its_errors(tmp_path, capsys):
    args, task = make_task(tmp_path, "bilstm_crf_tagger", ["--tag-scheme", "bioes", "--char-embed-dim", "3",
                                                           "--char-hidden", "2"])
    cks = [save_tagger_checkpoint(random_model(task, args, s), args, str(tmp_path / f"m{s}.pt")) for s in (1, 2)]
    mod = load_tag_script()
    dev, out = str(tmp_path / "dev.txt"), str(tmp_path / "ens.txt")
    assert mod.main(["--path", ":".join(cks), "--input", dev, "--output", out, "--gold-column", "2",
                     "--decoding", "viterbi", "--cpu"]) == 0
    text = capsys.readouterr().out
    assert "invalid sequences 0 written" in text and "entity precision" in text
    assert [len(s) for s in read_conll(out)] == [len(s) for s in IOB1]

    # a tagger trained on other data: other dictionaries, refused with the checkpoint's name, nothing written
    from fairseq import tasks

    from benchmarks.tagging import make_args

    train2 = write(tmp_path / "train2.txt", IOB1 * 8 + [[("Zorro", "NNP", "I-PER")]])
    args2 = make_args("bilstm_crf_tagger", str(tmp_path), ["--train-file", train2, "--valid-file", dev,
                                                           "--embed-dim", "8", "--hidden-size", "6",
                                                           "--tag-scheme", "bioes"])
    task2 = tasks.setup_task(args2)
    other = tmp_path / "other"
    other.mkdir()
    bad = save_tagger_checkpoint(random_model(task2, args2, 3), args2, str(other / "bad.pt"))
    out2 = str(tmp_path / "bad.txt")
    assert mod.main(["--path", f"{cks[0]}:{bad}", "--input", dev, "--output", out2, "--cpu"]) == 2  # bad input: exit 2
    assert "bad.pt" in capsys.readouterr().err and not os.path.exists(out2)
    assert mod.main(["--path", f"{cks[0]}:{tmp_path}/missing.pt", "--input", dev, "--output", out2, "--cpu"]) == 2
    assert "missing.pt" in capsys.readouterr().err and not os.path.exists(out2)
