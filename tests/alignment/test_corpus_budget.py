"""hmm-nmt-align-corpus's defaults that follow the corpus: the training budget (updates, warm-up, second pass)
from the corpus's words, and the subword vocabulary from a number of symbols whatever the script."""
import json
from types import SimpleNamespace

import pytest
from test_corpus_stages import FakeLoader, FakeTrainer, fake_preprocess, flags

from hmm_nmt_align.corpus import CorpusError, budget
from hmm_nmt_align.corpus.cli import build_parser, run


def opts(**kw):
    base = dict(max_update=None, warmup_updates=None, guide_updates=None, max_tokens=100, merges=None,
                vocab_size=None)
    return SimpleNamespace(**{**base, **kw})


def test_the_tokens_of_an_epoch_are_the_longer_side_with_its_end_of_sentence():
    src, tgt = [2, 1, 0, 3], [1, 3, 1, 2]  # words a line
    assert budget.batch_tokens(src, tgt) == 3 + 4 + 4  # the pair with an empty side trains on nothing


@pytest.mark.parametrize("tokens", [0, 1, 10 ** 3, 10 ** 5, 10 ** 6, 10 ** 8])
def test_the_default_updates_are_epochs_of_the_corpus_within_the_bounds(tokens):
    n = budget.default_updates(tokens, 2048)
    exact = budget.EPOCHS * tokens / 2048
    assert budget.MIN_UPDATES <= n <= budget.MAX_UPDATES
    assert n == round(exact) or (n == budget.MIN_UPDATES and exact < n) or (n == budget.MAX_UPDATES and exact > n)


def test_a_larger_corpus_never_trains_fewer_updates():
    counts = [budget.default_updates(t, 2048) for t in range(0, 3 * 10 ** 6, 50_000)]
    assert counts == sorted(counts) and counts[0] == budget.MIN_UPDATES and counts[-1] == budget.MAX_UPDATES


def test_resolve_fills_only_what_was_not_given():
    src = tgt = [9] * 5000  # words a line: 50,000 tokens in batches of 100: 500 per epoch
    o = opts()
    note = budget.resolve(o, src, tgt)
    assert o.max_update == min(budget.MAX_UPDATES, max(budget.MIN_UPDATES, budget.EPOCHS * 500))
    assert o.warmup_updates == min(budget.WARMUP, o.max_update // budget.WARMUP_SHARE)
    assert o.guide_updates == o.max_update // budget.GUIDE_SHARE
    assert f"{o.max_update} updates" in note and "50000 tokens" in note
    given = opts(max_update=30, warmup_updates=7, guide_updates=0)
    assert budget.resolve(given, src, tgt) == "" and (given.max_update, given.warmup_updates, given.guide_updates) \
        == (30, 7, 0)
    short = opts(max_update=30)  # the warm-up never takes more than its share of a short run
    budget.resolve(short, src, tgt)
    assert (short.warmup_updates, short.guide_updates) == (3, 7)


# ----------------------------------------------------------------------------------------------- the command
PAIRS = [("the cat sat on the mat", "le chat est assis sur le tapis"), ("a dog ran", "un chien courait"),
         ("the dog sat", "le chien est assis"), ("a cat ran on the mat", "un chat courait sur le tapis")] * 30


def _run(tmp_path, pairs, *extra):
    for side, k in (("src", 0), ("tgt", 1)):
        (tmp_path / f"c.{side}").write_text("".join(p[k] + "\n" for p in pairs), encoding="utf-8")
    w = str(tmp_path)
    trainer = FakeTrainer()
    o = build_parser().parse_args(["-s", f"{w}/c.src", "-t", f"{w}/c.tgt", "--model-dir", f"{w}/m", "-o",
                                   f"{w}/c.align", "--cpu", "--threads", "1", "--no-progress", "--max-tokens", "64",
                                   *extra])
    assert run(o, launch=trainer, preprocess=fake_preprocess, load=FakeLoader()) == 0
    return trainer, json.loads((tmp_path / "m" / "manifest.json").read_text())


def test_the_command_trains_the_budget_it_computed_and_records_it(tmp_path, capsys):
    trainer, manifest = _run(tmp_path, PAIRS, "--seed", "3")
    train_pairs = manifest["done"]["bin"]["train_pairs"]
    src = [len(p[0].split()) for p in PAIRS][:train_pairs]
    tgt = [len(p[1].split()) for p in PAIRS][:train_pairs]
    want = budget.default_updates(budget.batch_tokens(src, tgt), 64)
    # the budget counts the pairs the command trains on (held-out pairs excluded)
    first, second = [flags(c) for c in trainer.cmds[:2]], [flags(c) for c in trainer.cmds[2:]]
    assert [f["--max-update"] for f in first] == [str(want)] * 2
    assert [f["--warmup-updates"] for f in first] == [str(min(200, want // 10))] * 2
    assert [f["--max-update"] for f in second] == [str(want // 4)] * 2
    config = manifest["config"]
    assert (config["max_update"], config["warmup_updates"], config["guide_updates"]) == \
        (want, min(200, want // 10), want // 4)
    assert f"training budget from the corpus: {want} updates per direction" in capsys.readouterr().err


def test_the_same_command_again_finds_its_settings(tmp_path):
    _run(tmp_path, PAIRS)
    trainer, _ = _run(tmp_path, PAIRS)  # the budget resolves to the same numbers: nothing trains again
    assert trainer.cmds == []


def _merges(tmp_path):
    return len((tmp_path / "m" / "codes").read_text(encoding="utf-8").splitlines()) - 1


def _symbols(pairs):
    """subword-nmt's characters: each one inside a word and at its end counted apart."""
    inside, final = set(), set()
    for p in pairs:
        for w in " ".join(p).split():
            inside.update(w[:-1])
            final.add(w[-1])
    return len(inside) + len(final)


def test_vocab_size_counts_the_characters_so_the_merges_follow_the_script(tmp_path):
    size = _symbols(PAIRS) + 5
    (tmp_path / "latin").mkdir()
    _run(tmp_path / "latin", PAIRS, "--vocab-size", str(size))
    assert _merges(tmp_path / "latin") == 5
    # a script with more characters than --vocab-size: no merge at all, the characters are the vocabulary
    big = [(" ".join(chr(0x4E00 + (7 * k + i) % 300) * 2 for i in range(4)),
            " ".join(chr(0x4E00 + (7 * k + i + 1) % 300) for i in range(5))) for k in range(120)]
    (tmp_path / "cjk").mkdir()
    _run(tmp_path / "cjk", big, "--vocab-size", str(_symbols(big) - 1))
    assert _merges(tmp_path / "cjk") == 0
    # --merges instead: that many merges whatever the characters
    (tmp_path / "merges").mkdir()
    _, manifest = _run(tmp_path / "merges", big, "--merges", "5")
    assert _merges(tmp_path / "merges") == 5 == manifest["done"]["codes"]["merges"]
    assert (manifest["config"]["merges"], manifest["config"]["vocab_size"]) == (5, None)


def test_vocab_size_and_merges_do_not_go_together(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["-s", "a", "-t", "b", "--model-dir", "m", "--vocab-size", "9", "--merges", "3"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_without_patience_the_held_out_pairs_train_too(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, kept = _run(tmp_path / "a", PAIRS, "--valid-lines", "7", "--guide-updates", "0")
    trainer, held = _run(tmp_path / "b", PAIRS, "--valid-lines", "7", "--guide-updates", "0", "--patience", "2")
    assert (kept["done"]["bin"]["train_pairs"], kept["done"]["bin"]["valid_pairs"]) == (len(PAIRS), 7)
    assert (held["done"]["bin"]["train_pairs"], held["done"]["bin"]["valid_pairs"]) == (len(PAIRS) - 7, 7)
    assert flags(trainer.cmds[0])["--patience"] == "2"
    text = (tmp_path / "a" / "m" / "text" / "train.src").read_text(encoding="utf-8").splitlines()
    assert text == [p[0] for p in PAIRS]


def test_a_trained_directory_keeps_its_own_budget_when_the_defaults_change(tmp_path, monkeypatch):
    _, first = _run(tmp_path, PAIRS)
    monkeypatch.setattr(budget, "EPOCHS", budget.EPOCHS * 3)  # a later version's defaults
    monkeypatch.setattr(budget, "VOCAB_SIZE", budget.VOCAB_SIZE + 1)
    trainer, again = _run(tmp_path, PAIRS)
    assert trainer.cmds == [] and again["config"] == first["config"]
    # ... and one made before --vocab-size existed (its manifest names the merges alone)
    path = tmp_path / "m" / "manifest.json"
    old = json.loads(path.read_text())
    del old["config"]["vocab_size"]
    old["config"]["merges"] = 4000
    path.write_text(json.dumps(old))
    trainer, _ = _run(tmp_path, PAIRS)
    assert trainer.cmds == []
    # what the command line does say still counts: another second pass is the one growth allowed
    trainer, grown = _run(tmp_path, PAIRS, "--guide-updates", "3")
    assert grown["config"]["guide_updates"] == 3 and [flags(c)["--max-update"] for c in trainer.cmds] == ["3"] * 2
    with pytest.raises(CorpusError, match="max_update"):
        _run(tmp_path, PAIRS, "--max-update", str(first["config"]["max_update"] + 1))


def test_resolve_takes_a_saved_setting_only_where_nothing_was_given():
    src = tgt = [9] * 50
    saved = {"merges": 4000, "vocab_size": None, "max_update": 77, "warmup_updates": 5, "guide_updates": 9}
    o = opts(max_update=12)
    assert budget.resolve(o, src, tgt, saved) == ""
    assert (o.merges, o.vocab_size, o.max_update, o.warmup_updates, o.guide_updates) == (4000, None, 12, 5, 9)
    o = opts(vocab_size=300)  # a vocabulary given: the saved merges do not come with it
    budget.resolve(o, src, tgt, saved)
    assert (o.merges, o.vocab_size) == (None, 300)
