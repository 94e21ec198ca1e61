"""Issue 25: scheme-aware tagging task, valid-sequence (Viterbi) decoding, BiLSTM-CRF, char features, readers."""
import itertools

import pytest
import torch
from fairseq import metrics, tasks

from benchmarks.tagging import make_args
from hmm_nmt.criterions.tagging_cross_entropy import decode_tags
from hmm_nmt.data import tag_schemes as ts
from hmm_nmt.data.conll import CoNLLFormatError, read_conll, read_conllu
from hmm_nmt.data.entity_eval import entity_scores, span_counts

torch.set_num_threads(1)

IOB1 = [  # word POS NER; IOB1 with B- between adjacent same-type entities
    [("EU", "NNP", "I-ORG"), ("rejects", "VBZ", "O"), ("German", "JJ", "I-MISC"), ("call", "NN", "O")],
    [("Peter", "NNP", "I-PER"), ("Blackburn", "NNP", "I-PER"), ("met", "VBD", "O"), ("Anna", "NNP", "I-PER")],
    [("Paris", "NNP", "I-LOC"), ("Bonn", "NNP", "B-LOC"), ("and", "CC", "O"), ("Texas", "NNP", "I-LOC")],
    [("the", "DT", "O"), ("UN", "NNP", "I-ORG"), ("said", "VBD", "O")],
]


def write(path, sents, docstart=False):
    with open(path, "w") as f:
        if docstart:
            f.write("-DOCSTART- -X- O\n\n")
        for s in sents:
            f.writelines(" ".join(r) + "\n" for r in s)
            f.write("\n")
    return str(path)


def make_task(tmp_path, arch="bilstm_tagger", extra=(), n_copies=8):
    train = write(tmp_path / "train.txt", IOB1 * n_copies)
    dev = write(tmp_path / "dev.txt", IOB1)
    args = make_args(arch, str(tmp_path), ["--train-file", train, "--valid-file", dev, "--embed-dim", "8",
                                           "--hidden-size", "6"] + list(extra))
    task = tasks.setup_task(args)
    task.load_dataset("train")
    task.load_dataset("valid")
    return args, task


def one_batch(task, split="valid", n=16):
    return next(iter(task.get_batch_iterator(task.dataset(split), max_sentences=n).next_epoch_itr(shuffle=False)))


# ------------------------------------------------------------------------------------------ schemes in the task
def test_task_trains_in_bioes_from_iob1_and_scores_in_iob1(tmp_path):
    args, task = make_task(tmp_path, extra=["--tag-scheme", "bioes"])
    assert (task.data_scheme, task.train_scheme) == ("iob1", "bioes")  # detected, and recorded in args
    assert (args.data_tag_scheme, args.tag_scheme) == ("iob1", "bioes")
    tags = set(task.tag_dict.symbols[task.tag_dict.nspecial:])
    assert {"S-ORG", "B-PER", "E-PER", "S-LOC"} <= tags and not any(t.startswith("I-") and t != "I-PER" for t in tags)
    sample = one_batch(task)
    td = task.tag_dict
    gold_file = [[r[2] for r in s] for s in IOB1]
    got = {}
    for sid, row, n in zip(sample["id"].tolist(), sample["target"].tolist(), sample["net_input"]["src_lengths"].tolist()):
        got[sid] = [td[i] for i in row[:n]]
    for sid, bioes in got.items():
        assert ts.is_valid(bioes, "bioes")
        assert task.to_file_scheme(bioes) == gold_file[sid]  # lossless round trip back to the file's scheme
    # scoring in the file's scheme equals seqeval strict IOB1 on the original files
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB1 as SEQ_IOB1

    pred_bioes = [list(got[i]) for i in range(len(IOB1))]
    pred_bioes[1][3] = "O"  # drop Anna
    pred_bioes[2][1] = "E-LOC"  # merge Paris Bonn: B-LOC E-LOC
    pred_bioes[2][0] = "B-LOC"
    pred_file = [task.to_file_scheme(p) for p in pred_bioes]
    ours = entity_scores(gold_file, pred_file, "iob1")
    ref = 100 * f1_score(gold_file, pred_file, mode="strict", scheme=SEQ_IOB1)
    assert ours["f1"] == pytest.approx(ref) and 0 < ref < 100
    # the criterion's counts (in the training scheme) give the same number
    tp, n_pred, n_gold = span_counts(gold_file, pred_file, "iob1")
    assert (tp, n_pred, n_gold) == span_counts([got[i] for i in range(len(IOB1))], pred_bioes, "bioes")


def test_strict_and_lenient_span_counts_agree_on_valid_sequences():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "B-ORG"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]]
    assert span_counts(gold, pred, "iob2") == span_counts(gold, pred, "iob2", strict=False) == (1, 3, 4)
    bad = [["O", "I-PER", "I-PER", "O"]]  # invalid in IOB2: conlleval reads an entity, seqeval strict none
    assert span_counts([["O", "B-PER", "I-PER", "O"]], bad, "iob2", strict=False) == (1, 1, 1)
    assert span_counts([["O", "B-PER", "I-PER", "O"]], bad, "iob2") == (0, 0, 1)


# ------------------------------------------------------------------------------------------ Viterbi decoding
def valid_paths(task, T):
    allowed, start, end = task.tag_constraints()
    K = len(task.tag_dict)
    for path in itertools.product(range(K), repeat=T):
        if start[path[0]] and end[path[-1]] and all(allowed[a][b] for a, b in zip(path, path[1:])):
            yield path


@pytest.mark.parametrize("chars", [False, True], ids=["words", "chars"])
@pytest.mark.parametrize("arch", ["bilstm_tagger", "hnmc_tagger_arch1", "bilstm_crf_tagger"])
def test_viterbi_is_valid_and_equals_brute_force(tmp_path, arch, chars):
    torch.manual_seed(0)
    extra = ["--tag-scheme", "iob2"] + (["--char-embed-dim", "3", "--char-hidden", "2"] if chars else [])
    name = arch
    if arch == "hnmc_tagger_arch1":
        name, extra = "hnmc_tagger", extra + ["--tagger-architecture", "1"]
    args, task = make_task(tmp_path, name, extra, n_copies=1)
    model = task.build_model(args).eval()
    with torch.no_grad():  # random weights: argmax is free to be invalid, Viterbi must not be
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    words = task.source_dictionary
    sents = [("Peter", "met", "Anna"), ("Erna", "said")]  # "Erna": unseen, <unk> with its own characters
    src = torch.tensor([[words.index(w) for w in sents[0]], [words.index("Erna"), words.index("said"), words.pad()]])
    assert src[1, 0] == words.unk()
    net = {"src_tokens": src, "src_lengths": torch.tensor([3, 2])}
    sc = {}
    if chars:
        net["src_chars"] = task.batch_chars([list(s) for s in sents], 3)
        sc = {"src_chars": net["src_chars"]}
        with torch.no_grad():  # the unseen word's characters reach the features (not <unk>'s single character)
            assert not torch.allclose(model.features(src, net["src_chars"])[1, 0], model.features(src)[1, 0])
            assert torch.allclose(model.features(src, net["src_chars"])[0], model.features(src)[0], rtol=0, atol=1e-6)
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**net), log_probs=True)
        pred = decode_tags(model, net, lprobs, task, "viterbi")
        for b, n in enumerate([3, 2]):
            tags = [task.tag_dict[i] for i in pred[b, :n].tolist()]
            assert ts.is_valid(tags, "iob2"), tags
            # brute force over all valid tag sequences of the model's own sequence score
            if arch == "bilstm_tagger":
                def score(path):
                    return sum(lprobs[b, t, k].item() for t, k in enumerate(path))
            elif arch == "bilstm_crf_tagger":
                emissions, mask = model._scores(src[b:b + 1, :n], None, *[c[b:b + 1, :n] for c in sc.values()])
                crf = model.crf

                def score(path):
                    return crf.score(emissions, torch.tensor([path]))[0].item()
            else:
                x = model.features(src[b:b + 1, :n], *[c[b:b + 1, :n] for c in sc.values()])
                G = model.core.stack.layers[-1].log_potentials(x)[0]  # (T, N, N) [t, j, i]
                N = G.size(-1)
                init = torch.full((N,), -torch.log(torch.tensor(float(N))).item())

                def score(path):
                    s = (init + G[0, :, path[0]]).max().item()
                    return s + sum(G[t, path[t - 1], path[t]].item() for t in range(1, len(path)))
            best = max(valid_paths(task, n), key=score)
            assert pred[b, :n].tolist() == list(best)
        argmax = decode_tags(model, net, lprobs, task, "argmax")
        assert argmax.shape == pred.shape


def test_criterion_viterbi_validation_reports_no_invalid_sequence(tmp_path):
    torch.manual_seed(1)
    args, task = make_task(tmp_path, "bilstm_tagger", ["--tag-scheme", "bioes", "--decoding", "viterbi"])
    model = task.build_model(args).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    crit = task.build_criterion(args)
    assert crit.decoding == "viterbi"
    logs = [crit(model, one_batch(task))[2]]
    with metrics.aggregate(new_root=True) as agg:
        crit.reduce_metrics(logs)
        values = agg.get_smoothed_values()
    assert values["invalid_sequences"] == 0 and "chunk_f1" in values
    args.decoding = "argmax"
    crit2 = task.build_criterion(args)
    assert crit2.decoding == "argmax"


# ------------------------------------------------------------------------------------------ BiLSTM-CRF, char features
def test_bilstm_crf_loss_is_the_crf_nll_and_decodes_with_crf_viterbi(tmp_path):
    torch.manual_seed(2)
    args, task = make_task(tmp_path, "bilstm_crf_tagger", ["--tag-scheme", "bioes", "--num-layers", "2"])
    model = task.build_model(args)
    assert sum(isinstance(m, torch.nn.LSTM) for m in model.modules()) == 2
    crit = task.build_criterion(args)
    sample = one_batch(task, "train", 8)
    model.eval()
    loss, n, _ = crit(model, sample)
    net, target = sample["net_input"], sample["target"]
    emissions, mask = model._scores(net["src_tokens"], net["src_lengths"])
    nll = model.crf.nll(emissions, target.masked_fill(~mask, 0), mask)
    assert loss.item() == pytest.approx(nll.sum().item(), rel=1e-5)
    # CRF NLL == brute-force log-sum-exp over all tag sequences, for one short sentence
    K = len(task.tag_dict)
    e1 = emissions[:1, :2]
    scores = torch.stack([model.crf.score(e1, torch.tensor([p])) for p in itertools.product(range(K), repeat=2)])
    t1 = target[:1, :2]
    assert model.crf.nll(e1, t1).item() == pytest.approx((scores.logsumexp(0) - model.crf.score(e1, t1)).item(),
                                                         rel=1e-4, abs=1e-3)
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**net), log_probs=True)
        pred = decode_tags(model, net, lprobs, task, "viterbi")
        own = model.crf.decode(emissions, mask)[1]
    assert torch.equal(pred[mask], own[mask])
    # training lowers the loss
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    model.train()
    first = None
    for _ in range(15):
        loss, n, _ = crit(model, sample)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        (loss / n).backward()
        opt.step()
    assert loss.item() < 0.5 * first


@pytest.mark.parametrize("arch", ["lstm_tagger", "hnmc_cn_tagger"])
def test_char_features_change_the_output_and_train(tmp_path, arch):
    torch.manual_seed(3)
    args, task = make_task(tmp_path, arch, ["--char-embed-dim", "4", "--char-hidden", "3", "--num-layers", "2"])
    model = task.build_model(args)
    assert model.chars.output_dim == 6
    sample = one_batch(task, "train", 8)
    model.eval()
    with torch.no_grad():
        out = model(**sample["net_input"])
        model.chars.embed.weight.mul_(0.0)
        out0 = model(**sample["net_input"])
    assert not torch.allclose(out, out0)
    torch.manual_seed(3)
    model = task.build_model(args)
    crit = task.build_criterion(args)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    before = model.chars.embed.weight.detach().clone()
    losses = []
    for _ in range(10):
        loss, n, _ = crit(model, sample)
        losses.append(loss.item() / n)
        opt.zero_grad()
        (loss / n).backward()
        assert model.chars.rnn.weight_ih_l0.grad.abs().sum() > 0
        opt.step()
    assert losses[-1] < losses[0] and not torch.equal(before, model.chars.embed.weight)


def test_unidirectional_and_stacked_recurrent_taggers(tmp_path):
    for arch, cls, layers in (("lstm_tagger", torch.nn.LSTM, 3), ("gru_tagger", torch.nn.GRU, 2)):
        args, task = make_task(tmp_path, arch, ["--num-layers", str(layers)], n_copies=1)
        model = task.build_model(args)
        rnns = [m for m in model.modules() if isinstance(m, cls)]
        assert len(rnns) == layers and not any(r.bidirectional for r in rnns)
        out = model(**one_batch(task)["net_input"])
        assert torch.allclose(out.exp().sum(-1), torch.ones(out.shape[:2]), atol=1e-5)


# ------------------------------------------------------------------------------------------ readers
CONLLU = """# sent_id = 1
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
3.1\tknow\tknow\tVERB\tVB\t_\t_\t_\t0:root\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = 2
1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_
"""


def test_conllu_reader_skips_multiword_tokens_and_empty_nodes(tmp_path):
    p = tmp_path / "a.conllu"
    p.write_text(CONLLU)
    sents = read_conllu(str(p))
    assert [s.column(1) for s in sents] == [["I", "do", "n't", "know", "."], ["Hi"]]
    assert sents[0].column(3) == ["PRON", "AUX", "PART", "VERB", "PUNCT"]
    assert sents[0].lines == [3, 5, 6, 8, 9] and sents[1].lines == [12]
    bad = tmp_path / "bad.conllu"
    bad.write_text(CONLLU.replace("4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_", "4\tknow\tVERB"))
    with pytest.raises(CoNLLFormatError, match=r"bad\.conllu:8: expected 10 tab-separated"):
        read_conllu(str(bad))
    # the task reads it with --data-format conllu and --tag-column xpos
    args = make_args("bilstm_tagger", str(tmp_path), ["--data-format", "conllu", "--train-file", str(p),
                                                      "--valid-file", str(p), "--tag-column", "xpos"])
    task = tasks.setup_task(args)
    task.load_dataset("valid")
    assert task.train_scheme is None and not task.bio
    assert set(task.tag_dict.symbols[4:]) == {"PRP", "VBP", "RB", "VB", ".", "UH"}
    assert task.source_dictionary.index("don't") == task.source_dictionary.unk()


def test_docstart_is_a_document_boundary_and_tab_lines_break_sentences(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("-DOCSTART- -X- O\n\nEU NNP I-ORG\nrejects VBZ O\n-DOCSTART- -X- O\nPeter NNP I-PER\n\n"
                 "-DOCSTART- -X- O\n\nHi UH O\n")
    sents = read_conll(str(p))
    assert [s.column(0) for s in sents] == [["EU", "rejects"], ["Peter"], ["Hi"]]
    assert [s.doc for s in sents] == [0, 1, 2]
    w = tmp_path / "w.conll"
    w.write_text("@paul\tO\nhi\tO\n\t\nBob\tB-person\n")
    assert [s.column(0) for s in read_conll(str(w))] == [["@paul", "hi"], ["Bob"]]


def test_tag_script_viterbi_writes_no_invalid_sequence(tmp_path, capsys):
    from conftest import load_tag_script, save_tagger_checkpoint

    args, task = make_task(tmp_path, "bilstm_tagger", ["--tag-scheme", "iob2", "--save-dir", str(tmp_path / "ck")])
    torch.manual_seed(4)
    model = task.build_model(args)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    ck = save_tagger_checkpoint(model, args, str(tmp_path / "m.pt"))
    mod = load_tag_script()
    dev = str(tmp_path / "dev.txt")
    counts = {}
    for decoding in ("argmax", "viterbi"):
        out = str(tmp_path / f"{decoding}.txt")
        assert mod.main(["--path", ck, "--input", dev, "--output", out, "--gold-column", "2", "--decoding", decoding,
                         "--cpu"]) == 0
        text = capsys.readouterr().out
        counts[decoding] = int(text.split("invalid sequences ")[1].split()[0])
        assert "entity precision" in text
        written = [s.column(3) for s in read_conll(out)]
        assert counts[decoding] == sum(not ts.is_valid(s, "iob1") for s in written)
    assert counts["viterbi"] == 0
