"""hmm-nmt-tags as a real subprocess on tiny generated CoNLL-2003-style files."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
Smith NNP I-NP B-PER
. . O O

-DOCSTART- -X- -X- O

Ann NNP B-NP I-PER
"""


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hmm_nmt.data.tags_cli", *args], capture_output=True, text=True,
                          env=env)


@pytest.mark.slow
def test_convert_iob1_to_bioes_and_back(tmp_path):
    src = tmp_path / "eng.train"
    src.write_text(CONLL)
    assert run("detect", str(src)).stdout.strip() == "iob1"
    r = run("convert", "--to", "bioes", str(src), str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    assert "iob1 -> bioes" in r.stderr and "0 adjacent" in r.stderr
    out = (tmp_path / "b").read_text().splitlines()
    assert out[0] == "-DOCSTART- -X- -X- O" and out[1] == ""
    assert [ln.split()[-1] for ln in out[2:10]] == ["S-ORG", "O", "S-MISC", "O", "B-PER", "E-PER", "S-PER", "O"]
    assert out[2].split()[:3] == ["EU", "NNP", "B-NP"]  # other columns untouched
    r = run("convert", "--from", "bioes", "--to", "iob1", str(tmp_path / "b"), str(tmp_path / "back"))
    assert r.returncode == 0 and (tmp_path / "back").read_text() == CONLL
    r = run("convert", "--to", "io", str(src), str(tmp_path / "io"))
    assert "1 adjacent same-type entity pairs merged" in r.stderr


@pytest.mark.slow
def test_score_and_bad_input(tmp_path):
    gold = tmp_path / "gold"
    gold.write_text(CONLL)
    pred = tmp_path / "pred"
    pred.write_text(CONLL.replace("Smith NNP I-NP B-PER", "Smith NNP I-NP O"))
    r = run("score", "--scheme", "iob1", str(gold), str(pred))
    # gold: ORG, MISC, PER, PER, PER (5); pred loses Smith: 4 of 4 right, 4 of 5 found
    assert r.returncode == 0 and "precision 100.00 recall 80.00 F1 88.89" in r.stdout, r.stdout + r.stderr
    bad = tmp_path / "bad"
    bad.write_text(CONLL.replace("call NN I-NP O", "call NN I-NP PER"))
    r = run("convert", "--to", "bioes", str(bad), str(tmp_path / "never"))
    assert r.returncode == 1 and f"{bad}:6: not an entity tag: 'PER'" in r.stderr
    assert not (tmp_path / "never").exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]
