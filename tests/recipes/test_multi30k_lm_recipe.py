"""examples/multi30k_lm/prepare.sh: the English side of Multi30k as language-model data through the stages of
examples/wsj_lm (PTB-style text, Brown clusters, fairseq-preprocess), on a tiny generated corpus in the
official layout: from a local directory (real Brown clustering) and by --download (a file:// URL, no
clustering), and its errors."""
import gzip
import os
import random
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREPARE = os.path.join(ROOT, "examples", "multi30k_lm", "prepare.sh")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           PYTHON=sys.executable)
SPLITS = {"train": 120, "val": 12, "test_2016_flickr": 10}


def write_multi30k(directory, gz=()):
    """Captions in the official lc.norm.tok form: lowercased, Moses-tokenised, XML-escaped."""
    rng = random.Random(0)
    subj, verb = ["a man", "two dogs", "the girl", "a woman &apos;s friend"], ["is riding", "are playing", "sees"]
    obj = ["a bike", "in the park", "a &quot; big &quot; ball", "rock &amp; roll", "3 red cars"]
    os.makedirs(os.path.join(directory, "tok"), exist_ok=True)
    for split, n in SPLITS.items():
        lines = [f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)} {rng.choice(['.', '!', ', too .'])}\n"
                 for _ in range(n)]
        path = os.path.join(directory, "tok", f"{split}.lc.norm.tok.en")
        if split in gz:
            with gzip.open(path + ".gz", "wt", encoding="utf-8") as f:
                f.writelines(lines)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(lines)


def prepare(*args):
    return subprocess.run(["bash", PREPARE, *map(str, args)], env=ENV, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_local_corpus_ptb_text_brown_clusters_and_binarised(tmp_path):
    src = tmp_path / "task1"
    write_multi30k(src, gz=("train",))
    proc = prepare(tmp_path / "out", "--local", src, "--brown-clusters", "4", "--brown-min-count", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    raw = tmp_path / "out" / "raw"
    lines = {s: (raw / f"{s}.txt").read_text().splitlines() for s in ("train", "valid", "test")}
    assert [len(v) for v in lines.values()] == list(SPLITS.values())  # the official splits, kept
    words = {w for line in lines["train"] for w in line.split()}
    # Moses escapes undone, then the PTB conventions: clitic kept, & kept, numbers -> N, punctuation gone
    assert {"'s", "&", "N", "rock", "roll"} <= words
    assert not words & {".", ",", "!", '"', "&apos;s", "&quot;", "&amp;", "3"}
    assert "a woman 's friend" in "\n".join(lines["train"])
    clusters = dict(line.split() for line in (raw / "brown4.txt").read_text().splitlines())
    assert words <= set(clusters) and len(set(clusters.values())) == 4
    assert {"train.bin", "valid.bin", "test.bin", "dict.txt"} <= set(os.listdir(tmp_path / "out" / "bin"))

    from fairseq.data import Dictionary

    from hmm_nmt.hmm.vlhmm import read_word_clusters
    d = Dictionary.load(str(tmp_path / "out" / "bin" / "dict.txt"))
    wc, m = read_word_clusters(str(raw / "brown4.txt"), d.symbols, [d.pad(), d.bos()])
    assert m == 4 and all(wc[d.index(w)] >= 0 for w in words)


@pytest.mark.slow
def test_download_form_and_errors(tmp_path):
    src = tmp_path / "server"
    write_multi30k(src)
    dl = tmp_path / "dl"
    proc = prepare(tmp_path / "out", "--download", "--url", f"file://{src}", "--download-dir", dl,
                   "--brown-clusters")  # no cluster count: skip the clustering here
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(dl / "tok")) == sorted(f"{s}.lc.norm.tok.en" for s in SPLITS)
    assert (tmp_path / "out" / "raw" / "valid.txt").read_text() \
        == prepare_text(src / "tok" / "val.lc.norm.tok.en")
    assert (tmp_path / "out" / "bin" / "dict.txt").is_file()

    bad = prepare(tmp_path / "x", "--download", "--url", f"file://{tmp_path}/nowhere")
    assert bad.returncode != 0 and "download failed" in bad.stderr and "nowhere" in bad.stderr
    bad = prepare(tmp_path / "x", "--local", src, "--download")
    assert bad.returncode != 0 and "either --local or --download" in bad.stderr
    bad = prepare(tmp_path / "x", "--local", tmp_path / "missing")
    assert bad.returncode != 0 and "is not a directory" in bad.stderr
    os.remove(src / "tok" / "test_2016_flickr.lc.norm.tok.en")
    bad = prepare(tmp_path / "x", "--local", src)
    assert bad.returncode != 0 and "test_2016_flickr.lc.norm.tok.en" in bad.stderr
    # nothing half-written (a failed download may leave its cache directory x/orig, no data)
    assert not (tmp_path / "x" / "raw").exists() and not (tmp_path / "x" / "bin").exists()


def prepare_text(path):
    sys.path.insert(0, os.path.join(ROOT, "examples", "wsj_lm"))
    import prepare as wsj_prepare
    sents = [wsj_prepare.ptb_normalize(s) for s in wsj_prepare.read_tokenized(str(path))]
    return "".join(" ".join(s) + "\n" for s in sents if s)
