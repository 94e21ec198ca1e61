"""scripts/bench_lm.py's Kneser-Ney baseline: the indexed continuation counts equal NLTK's own scan, and
the perplexity is that of NLTK's model over the words and one </s> per sentence (needs nltk, the `lm` extra)."""
import math

import pytest

nltk_lm = pytest.importorskip("nltk.lm")
from benchmarks import lm as bench_lm  # noqa: E402

TRAIN = ["the cat sees the dog", "a dog sees the cat", "the old man buys a car", "a cat likes the old car",
         "the dog likes a man", "<unk> sees the car"]


def test_indexed_continuations_equal_nltk_and_perplexity(tmp_path):
    from nltk.lm.preprocessing import pad_both_ends, padded_everygram_pipeline
    from nltk.util import ngrams

    sents = [s.split() for s in TRAIN]
    grams, vocab = padded_everygram_pipeline(3, sents)
    lm = nltk_lm.KneserNeyInterpolated(3, discount=0.75)
    lm.fit(grams, vocab)
    reference = {}
    for s in sents:
        for g in ngrams(list(pad_both_ends(s, n=3)), 3):
            reference[g] = lm.score(g[-1], list(g[:-1]))
    slow, fast = bench_lm.index_continuations(lm)
    for w in list(lm.vocab) + ["nope"]:
        for ctx in [(), ("the",), ("a",), ("<s>",), ("sees",)]:
            assert fast(w, ctx) == slow(w, ctx)
    for g, p in reference.items():
        assert lm.score(g[-1], list(g[:-1])) == pytest.approx(p, rel=1e-12)
    for name, text in (("train", TRAIN), ("valid", TRAIN[:2]), ("test", TRAIN[2:4])):
        (tmp_path / f"{name}.txt").write_text("\n".join(text) + "\n")
    dev, test, entries, _ = bench_lm.kn5(str(tmp_path), order=3)
    nll = -sum(math.log(reference[g]) for s in TRAIN[:2]
               for g in list(ngrams(list(pad_both_ends(s.split(), n=3)), 3))[:len(s.split()) + 1])
    n = sum(len(s.split()) + 1 for s in TRAIN[:2])
    assert dev == pytest.approx(math.exp(nll / n), rel=1e-9) and entries > 0 and test > 1
    (tmp_path / "valid.txt").write_text("the zebra\n")
    with pytest.raises(ValueError, match="zebra"):
        bench_lm.kn5(str(tmp_path), order=3)
