"""``--singleton-unk P`` (Lample et al. 2016): at training time a word seen once in training is looked up as
``<unk>`` with probability P; the characters stay the word's own, and evaluation never replaces."""
import pytest
import torch
from test_char_features import CHARS, TRAIN, batch, make_task, random_model

# TRAIN's counts: Peter 3, Anna 2, met 2; the, EU, said, in, Paris, and: once each


def _model(tmp_path, p, extra=CHARS):
    args, task = make_task(tmp_path, TRAIN, extra=list(extra) + ["--singleton-unk", str(p)])
    return task, random_model(task, args)


def _singletons(task):
    d = task.source_dictionary
    return {d[i] for i in range(d.nspecial, len(d)) if d.count[i] == 1}


def test_singletons_come_from_the_training_counts(tmp_path):
    task, model = _model(tmp_path, 0.5)
    d = task.source_dictionary
    assert _singletons(task) == {"the", "EU", "said", "in", "Paris", "and"}
    assert {d[i] for i in model.singletons.nonzero().flatten().tolist()} == _singletons(task)
    assert "singletons" not in model.state_dict()  # rebuilt from the dictionary, checkpoints unchanged


def test_p1_replaces_every_singleton_and_nothing_else_in_training_only(tmp_path):
    task, model = _model(tmp_path, 1.0)
    d = task.source_dictionary
    tokens = batch(task, "train")["net_input"]["src_tokens"]
    single = torch.tensor([[d[t] in _singletons(task) for t in row] for row in tokens.tolist()])
    assert single.any() and (~single & tokens.ne(d.pad())).any()
    model.train()
    out = model._replace_singletons(tokens)
    assert out[single].eq(d.unk()).all() and torch.equal(out[~single], tokens[~single])
    model.eval()
    assert torch.equal(model._replace_singletons(tokens), tokens)


def test_training_features_use_unk_rows_but_the_words_own_characters(tmp_path):
    task, model = _model(tmp_path, 1.0)
    d = task.source_dictionary
    net = batch(task, "train")["net_input"]
    tokens, chars = net["src_tokens"], net["src_chars"]
    model.train()
    model.dropout.p = 0.0  # compare features exactly
    with torch.no_grad():
        got = model.features(tokens, chars)
        unk_tokens = tokens.masked_fill(model.singletons[tokens], d.unk())
        want = torch.cat([model.embed(unk_tokens), model.chars(tokens, chars)], dim=-1)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    model.eval()
    with torch.no_grad():
        assert not torch.allclose(model.features(tokens, chars), got)


def test_p0_and_probability_half_rate(tmp_path):
    task, model = _model(tmp_path / "p0", 0.0)
    assert not hasattr(model, "singletons")
    model.train()
    tokens = batch(task, "train")["net_input"]["src_tokens"]
    assert torch.equal(model._replace_singletons(tokens), tokens)
    task, model = _model(tmp_path / "half", 0.5)
    model.train()
    tokens = batch(task, "train")["net_input"]["src_tokens"].repeat(4000, 1)
    torch.manual_seed(0)
    out = model._replace_singletons(tokens)
    single = model.singletons[tokens]
    rate = out[single].eq(task.source_dictionary.unk()).double().mean().item()
    assert abs(rate - 0.5) < 0.03  # seeded; 24,000 draws: the bound is about 9 standard errors
    assert torch.equal(out[~single], tokens[~single])


def test_out_of_range_probability_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="--singleton-unk"):
        _model(tmp_path, 1.5)
