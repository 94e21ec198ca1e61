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


def _results(path, **models):
    import json

    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps(models))


@pytest.mark.slow
def test_collect_merges_parallel_outputs_and_seeds(tmp_path, capsys):
    """Models trained in parallel processes (one --out each) and a second seed: one row per model, each run's
    dev / test perplexity and their mean; the plot is written; a directory without results is an error."""
    import os
    import subprocess
    import sys

    run = {"params": 10, "dev_ppl": 200.0, "test_ppl": 150.0, "valid_loss_per_epoch": [8.0, 7.7],
           "stopped_at_epoch": 2, "stopped_at_update": 20, "stop_reason": "patience", "best_dev_epoch": 2,
           "train_ppl_last_epoch": 120.0, "train_wall_s": 60.0}
    _results(tmp_path / "s1" / "hmm", hmm=run)
    _results(tmp_path / "s2" / "hmm", hmm=dict(run, dev_ppl=210.0, test_ppl=160.0))
    _results(tmp_path / "kn", kn5={"params": 5, "dev_ppl": 250.0, "test_ppl": 140.0})
    dirs = [str(tmp_path / d) for d in ("s1/hmm", "s2/hmm", "kn")]
    merged = bench_lm.collect(dirs)
    assert [r["out"] for r in merged["hmm"]] == dirs[:2] and len(merged["kn5"]) == 1
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "bench_lm.py")
    png = tmp_path / "curves.png"
    out = subprocess.run([sys.executable, script, "--collect", *dirs, "--plot", str(png)], capture_output=True,
                         text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| hmm |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2" and cells[3] == "200.0 / 210.0" and cells[4] == "150.0 / 160.0"
    assert cells[5] == "205.0" and cells[6] == "155.0"
    assert "| kn5 | 1 | 5 | 250.0 | 140.0 |" in out
    assert png.stat().st_size > 1000
    bad = subprocess.run([sys.executable, script, "--collect", str(tmp_path / "nothing")], capture_output=True,
                         text=True)
    assert bad.returncode == 1 and "nothing/results.json: no such file" in bad.stderr
