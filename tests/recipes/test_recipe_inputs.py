"""The recipes check their input files and their extras before their first stage: a missing one is one line on
stderr naming the file and the option that points elsewhere (or the ``pip install`` to run), exit 2, and nothing
made (no output folder, no download). Fast: every run stops before any training or preprocessing."""
import gzip
import os
import subprocess
import sys

import pytest
from conftest import ROOT

EXAMPLES = os.path.join(ROOT, "examples")


def run(script, *args, cwd, extra_env=None):
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    env.update(extra_env or {})
    return subprocess.run([os.path.join(EXAMPLES, script), *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def one_line(p):
    """The single stderr line of a run that stopped with exit 2."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    return lines[0]


@pytest.fixture
def no_brown_clustering(tmp_path):
    """An environment whose ``import brown_clustering`` fails as it does without the [lm] extra."""
    shadow = tmp_path / "shadow" / "brown_clustering"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'brown_clustering'\")\n")
    return {"PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}


def write_multi30k_en(folder, splits=("train", "val", "test_2016_flickr")):
    folder.mkdir(parents=True, exist_ok=True)
    for split in splits:
        (folder / f"{split}.lc.norm.tok.en").write_text("a man rides a horse .\ntwo dogs play .\n")
    return folder


def test_wsj_lm_missing_conll_file(tmp_path):
    line = one_line(run("wsj_lm/prepare.sh", tmp_path / "out", "--conll", tmp_path / "nowhere" / "train.txt",
                        cwd=tmp_path))
    assert line.startswith("wsj_lm/prepare.py: error: --conll ") and str(tmp_path / "nowhere" / "train.txt") in line
    assert "nltk.downloader conll2000" in line
    assert not (tmp_path / "out").exists()


def test_wsj_lm_missing_lm_extra(tmp_path, no_brown_clustering):
    conll = tmp_path / "train.txt"
    conll.write_text("Confidence NN B-NP\nin IN B-PP\n\n")
    line = one_line(run("wsj_lm/prepare.sh", tmp_path / "out", "--conll", conll, cwd=tmp_path,
                        extra_env=no_brown_clustering))
    assert "brown-clustering" in line and "pip install '.[lm]'" in line and "pip install -e '.[lm]'" in line
    assert not (tmp_path / "out").exists()
    # prepare.py alone checks it too, before it writes anything
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "wsj_lm", "prepare.py"), "--conll", str(conll),
                        "--out", str(tmp_path / "raw"), "--brown-clusters", "4"], capture_output=True, text=True,
                       env=dict(os.environ, **no_brown_clustering))
    assert "pip install '.[lm]'" in one_line(p) and not (tmp_path / "raw").exists()


def test_wsj_lm_usage(tmp_path):
    assert "usage: examples/wsj_lm/prepare.sh OUT" in one_line(run("wsj_lm/prepare.sh", cwd=tmp_path))


def test_multi30k_lm_missing_file_and_extra(tmp_path, no_brown_clustering):
    src = write_multi30k_en(tmp_path / "m30k", splits=("train", "val"))
    line = one_line(run("multi30k_lm/prepare.sh", tmp_path / "out", "--local", src, cwd=tmp_path))
    assert "--multi30k" in line and "no test file" in line and "test_2016_flickr.lc.norm.tok.en" in line
    assert not (tmp_path / "out").exists()
    # the extra is checked before anything is fetched
    mirror = write_multi30k_en(tmp_path / "mirror" / "tok")
    line = one_line(run("multi30k_lm/prepare.sh", tmp_path / "out", "--download", "--url",
                        (tmp_path / "mirror").as_uri(), cwd=tmp_path, extra_env=no_brown_clustering))
    assert "pip install '.[lm]'" in line and mirror.exists() and not (tmp_path / "out").exists()


def test_multi30k_prepare_missing_file_makes_nothing(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            if (split, lang) != ("val", "en"):
                (src / f"{split}.lc.norm.tok.{lang}").write_text("ein hund .\n" if lang == "de" else "a dog .\n")
    line = one_line(run("multi30k/prepare.sh", "--local", src, "--dest", tmp_path / "d", cwd=tmp_path))
    assert "no val file for 'en' in " + str(src) in line and "--local DIR" in line
    assert not (tmp_path / "d").exists() and not (tmp_path / "d.partial").exists()


@pytest.mark.parametrize("recipe, missing", [
    ("conll2000", "train.txt"), ("conll2003", "eng.testa"), ("ud_pos", "en_ewt-ud-test.conllu")])
def test_tagging_recipes_missing_file(tmp_path, recipe, missing):
    local = tmp_path / "local"
    local.mkdir()
    names = {"conll2000": ["test.txt"], "conll2003": ["eng.train", "eng.testb"],
             "ud_pos": ["en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu"]}[recipe]
    for name in names:
        with gzip.open(local / f"{name}.gz", "wt") as f:
            f.write("x\n")
    line = one_line(run(f"{recipe}/run.sh", "--local", local, "--out", tmp_path / "out", cwd=tmp_path))
    assert line.startswith(f"{recipe}/run.sh: error: --local {local}: no {missing}") and "docs/tagging.md" in line
    assert not (tmp_path / "out").exists()


def test_hansards_missing_file_and_eflomal(tmp_path):
    from test_hansards_recipe import _write_local

    local = tmp_path / "local"
    _write_local(local)
    (local / "train" / "isi_train.f.gz").unlink()
    for script in ("run.sh", "corpus.sh"):
        line = one_line(run(f"hansards/{script}", "--local", local, "--work", tmp_path / "w", cwd=tmp_path))
        assert line == f"{script}: error: --local {local}: no train/isi_train.f.gz (not the hansards_enfr folder's layout)"
    _write_local(tmp_path / "local2")
    # eflomal (the [baselines] extra) missing: an interpreter in a folder without eflomal-align, a PATH without it
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    p = run("hansards/corpus.sh", "--local", tmp_path / "local2", "--work", tmp_path / "w", cwd=tmp_path,
            extra_env={"PYTHON": str(bare / "python"), "PATH": "/usr/bin:/bin"})
    assert "eflomal-align not found (pip install -e '.[baselines]')" in one_line(p)
    assert not (tmp_path / "w").exists()


def test_bench_tagging_missing_data(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_tagging.py"), "--data",
                        str(tmp_path / "train.txt"), "--tasks", "chunk", "--models", "hnmc", "--epochs", "1",
                        "--out", str(tmp_path / "b.json")], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    line = one_line(p)
    assert line.startswith(f"bench_tagging.py: error: --data {tmp_path / 'train.txt'}: no such file")
    assert not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("script,needs", [("alignment/europarl_deen.sh", "gold/deen.de"),
                                          ("alignment/hansards.sh", "gold/enfr.src-tgt")])
def test_alignment_benchmark_recipes_name_the_missing_file(tmp_path, script, needs):
    line = one_line(run(script, "--data", tmp_path / "nowhere", "--work", tmp_path / "w", cwd=tmp_path))
    assert f"{tmp_path / 'nowhere'}/{needs} not found (--data DIR" in line
    assert not (tmp_path / "w").exists()
    line = one_line(run(script, "--eflomal-runs", "x", cwd=tmp_path))
    assert "--eflomal-runs must be an integer >= 0" in line
