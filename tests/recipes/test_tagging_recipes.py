"""The tagging recipes (examples/{conll2003,ud_pos,conll2000}/run.sh) run for real on their tiny generated data:
fairseq-train, then hmm-nmt-tag on dev and test."""
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from hmm_nmt.data.conll import read_conll, read_conllu
from hmm_nmt.data.tag_schemes import is_valid

ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHON=sys.executable,
           PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def recipe(name, tmp_path, *extra):
    cmd = ["bash", os.path.join(ROOT, "examples", name, "run.sh"), "--out", str(tmp_path / "run"), *extra]
    return subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["conll2003", "ud_pos", "conll2000"])
def test_recipe_help(name, tmp_path):
    r = recipe(name, tmp_path, "--help")
    assert r.returncode == 0 and "--local" in r.stdout and "Options" in r.stdout
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_conll2003_recipe(tmp_path):
    r = recipe("conll2003", tmp_path, "--epochs", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("invalid sequences 0 written (iob1), 0 as decoded (bioes)") == 2
    f1 = [float(x.split("F1 ")[1].split()[0]) for x in r.stdout.splitlines() if x.startswith("entity precision")]
    assert len(f1) == 2 and all(f > 30 for f in f1)
    tagged = read_conll(str(tmp_path / "run" / "test.tagged"))
    assert all(len(s.rows[0]) == 5 and is_valid(s.column(4), "iob1") for s in tagged)


@pytest.mark.slow
def test_conll2003_recipe_several_seeds_and_their_ensemble(tmp_path):
    r = recipe("conll2003", tmp_path, "--epochs", "2", "--seeds", "1 2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "== dev" in r.stdout and "(ensemble of seeds 1 2)" in r.stdout
    f1 = [float(x.split("F1 ")[1].split()[0]) for x in r.stdout.splitlines() if x.startswith("entity precision")]
    assert len(f1) == 6 and all(f > 30 for f in f1)  # dev and test of seed 1, seed 2, the ensemble
    for name in ("dev.s1", "test.s2", "dev.ensemble", "test.ensemble"):
        tagged = read_conll(str(tmp_path / "run" / f"{name}.tagged"))
        assert all(len(s.rows[0]) == 5 and is_valid(s.column(4), "iob1") for s in tagged)
    assert (tmp_path / "run" / "checkpoints.s2" / "checkpoint_best.pt").exists()
    bad = recipe("conll2003", tmp_path, "--units", "paragraph")
    assert bad.returncode == 2 and "--units" in bad.stderr


@pytest.mark.slow
def test_ud_pos_recipe(tmp_path):
    r = recipe("ud_pos", tmp_path, "--epochs", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    acc = [float(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("accuracy")]
    assert len(acc) == 2 and all(a > 50 for a in acc)
    gold = read_conllu(str(tmp_path / "run" / "data" / "en_ewt-ud-dev.conllu"))
    out = (tmp_path / "run" / "dev.tagged").read_text().strip().split("\n\n")
    assert len(out) == len(gold) and all(len(line.split("\t")) == 11 for line in out[0].split("\n"))


@pytest.mark.slow
def test_conll2000_recipe(tmp_path):
    r = recipe("conll2000", tmp_path, "--epochs", "2", "--arch", "bilstm_tagger")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("invalid sequences 0 written (iob2)") == 2
    assert (tmp_path / "run" / "dev.txt.tagged").exists() and (tmp_path / "run" / "test.txt.tagged").exists()
