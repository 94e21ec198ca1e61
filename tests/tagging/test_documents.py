"""Document units (``--tagging-unit document``): packing, join/split round trips, the task's datasets, and a
real fairseq-train + hmm-nmt-tag run of the CoNLL-2003 recipe in document units."""
import random

import pytest
from fairseq import tasks
from test_tagging_recipes import recipe
from test_tagging_schemes_decoding import IOB1

from benchmarks.tagging import make_args
from hmm_nmt.data import documents
from hmm_nmt.data.conll import read_conll
from hmm_nmt.data.tag_schemes import is_valid


def test_units_pack_consecutive_sentences_of_one_document_within_the_budget():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 30)
        docs = sorted(rng.randint(0, 4) for _ in range(n))
        lengths = [rng.randint(1, 9) for _ in range(n)]
        budget = rng.randint(1, 25)
        groups = documents.units(docs, lengths, budget)
        assert [i for g in groups for i in g] == list(range(n))
        for g in groups:
            assert len({docs[i] for i in g}) == 1
            size = sum(lengths[i] for i in g) + len(g) - 1
            assert size <= budget or len(g) == 1
        # greedy: the next sentence of the same document would not have fitted
        for g, h in zip(groups, groups[1:]):
            if docs[g[-1]] == docs[h[0]]:
                assert sum(lengths[i] for i in g) + len(g) + lengths[h[0]] > budget
        seqs = [[f"w{i}.{k}" for k in range(lengths[i])] for i in range(n)]
        for g in groups:
            joined = documents.join(seqs, g, documents.SEPARATOR)
            assert joined.count(documents.SEPARATOR) == len(g) - 1
            assert documents.split(joined, g, lengths) == {i: seqs[i] for i in g}
    with pytest.raises(ValueError, match="positions"):
        documents.split(["a", "b"], [0, 1], [1, 1])
    with pytest.raises(ValueError):
        documents.units([0], [1], 0)


def task_of(tmp_path, extra):
    train = tmp_path / "train.txt"
    with open(train, "w") as f:  # two documents of two sentences each
        for doc in (IOB1[:2], IOB1[2:]):
            f.write("-DOCSTART- -X- O\n\n")
            for s in doc:
                f.writelines(" ".join(r) + "\n" for r in s)
                f.write("\n")
    args = make_args("bilstm_crf_tagger", str(tmp_path), ["--train-file", str(train), "--valid-file", str(train),
                                                          "--embed-dim", "8", "--hidden-size", "6"] + extra)
    return tasks.setup_task(args)


def test_task_builds_document_units_with_o_tagged_separators(tmp_path):
    task = task_of(tmp_path, ["--tagging-unit", "document", "--tag-scheme", "bioes", "--char-embed-dim", "3"])
    task.load_dataset("train")
    ds = task.dataset("train")
    assert len(ds) == 2  # 4 sentences, 2 documents
    wd, td = task.source_dictionary, task.target_dictionary
    sep = wd.index(documents.SEPARATOR)
    assert sep != wd.unk()
    first = ds[0]
    words = [wd[i] for i in first["source"].tolist()]
    assert words == [r[0] for r in IOB1[0]] + [documents.SEPARATOR] + [r[0] for r in IOB1[1]]
    tags = [td[i] for i in first["target"].tolist()]
    assert tags[len(IOB1[0])] == "O" and is_valid(tags, "bioes")
    assert first["chars"].shape[0] == len(words)
    # a budget smaller than two sentences: every sentence is its own unit again
    small = task_of(tmp_path, ["--tagging-unit", "document", "--max-source-positions", "5"])
    small.load_dataset("train")
    assert len(small.dataset("train")) == 4
    # tags without O (POS): refused
    with pytest.raises(ValueError, match="entity tags"):
        task_of(tmp_path, ["--tagging-unit", "document", "--tag-column", "1"])


@pytest.mark.slow
def test_conll2003_recipe_in_document_units(tmp_path):
    r = recipe("conll2003", tmp_path, "--epochs", "6", "--units", "document", "--", "--batch-size", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "300 sentences in 30 document units" in r.stdout  # ten sentences per -DOCSTART- in the tiny data
    assert r.stdout.count("invalid sequences 0 written (iob1)") == 2
    f1 = [float(x.split("F1 ")[1].split()[0]) for x in r.stdout.splitlines() if x.startswith("entity precision")]
    assert len(f1) == 2 and all(f > 80 for f in f1)  # predictions aligned with their words
    for split in ("dev", "test"):
        tagged = read_conll(str(tmp_path / "run" / f"{split}.tagged"))
        source = read_conll(str(tmp_path / "run" / "data" / ("eng.testa" if split == "dev" else "eng.testb")))
        assert [s.column(0) for s in tagged] == [s.column(0) for s in source]
        assert all(len(s.rows[0]) == 5 and is_valid(s.column(4), "iob1") for s in tagged)
        assert not any(documents.SEPARATOR in s.column(0) for s in tagged)
