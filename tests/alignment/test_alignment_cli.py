"""hmm-nmt-aer / hmm-nmt-symmetrize / statistical_baselines.sh as real subprocesses."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(*args, cwd=None):
    """`python -m hmm_nmt_align CMD ARGS` = the console script CMD (hmm-nmt-aer, ...) without installing."""
    return subprocess.run([sys.executable, "-m", "hmm_nmt_align", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd or ROOT, timeout=120)


def w(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


@pytest.fixture
def files(tmp_path):
    # the two sentences of test_alignment_aer: AER 2/7, P 3/4, R 2/3, F 12/17 (see the derivation there)
    return dict(
        gold=w(tmp_path, "gold.txt", "0-0 1-1 2?2\n0-1 1p0\n"),
        hyp=w(tmp_path, "hyp.txt", "0-0 2-2 2-1\n0-1\n"),
        src=w(tmp_path, "src.txt", "a b c\nd e\n"),
        tgt=w(tmp_path, "tgt.txt", "A B C\nD E\n"),
    )


def test_aer_summary_line(files):
    r = run("aer", files["gold"], files["hyp"], "--src", files["src"], "--tgt", files["tgt"])
    assert r.returncode == 0, r.stderr
    # 2/7 = 28.571..%, 3/4 = 75%, 2/3 = 66.666..%, 12/17 = 70.588..%
    assert r.stdout == "AER=28.57 P=75.00 R=66.67 F=70.59 sentences=2\n"


def test_aer_json(files):
    r = run("aer", files["gold"], files["hyp"], "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["AER"] == pytest.approx(100 * 2 / 7, abs=1e-4) and obj["sentences"] == 2
    assert set(obj) == {"AER", "P", "R", "F", "sentences", "per_sentence"}
    s1, s2 = obj["per_sentence"]
    assert s1["AER"] == pytest.approx(40.0) and s1["F"] == pytest.approx(100 * 4 / 7, abs=1e-4)
    assert (s1["A"], s1["S"], s1["A&S"], s1["A&P"]) == (3, 2, 1, 2)
    assert s2["AER"] == 0.0


def test_aer_other_formats_and_one_based(tmp_path, files):
    # the same gold as NAACL (1-based, WPT style) and the same hypothesis as GIZA A3 and 1-based Pharaoh
    naacl = w(tmp_path, "gold.naacl", "1 1 1 S\n1 2 2 S\n1 3 3 P\n2 1 2 S\n2 2 1 P\n")
    giza = w(tmp_path, "hyp.A3", "# Sentence pair (1) source length 3 target length 3 alignment score : 0\n"
                                 "A B C\nNULL ({ }) a ({ 1 }) b ({ }) c ({ 2 3 })\n"
                                 "# Sentence pair (2) source length 2 target length 2 alignment score : 0\n"
                                 "D E\nNULL ({ 1 }) d ({ 2 }) e ({ })\n")
    hyp1 = w(tmp_path, "hyp1.txt", "1-1 3-3 3-2\n1-2\n")
    expected = "AER=28.57 P=75.00 R=66.67 F=70.59 sentences=2\n"
    r = run("aer", naacl, giza, "--gold-format", "naacl", "--hyp-format", "giza", "--one-based")
    assert (r.returncode, r.stdout) == (0, expected), r.stderr
    r = run("aer", naacl, hyp1, "--format", "naacl", "--hyp-format", "pharaoh", "--one-based")
    assert (r.returncode, r.stdout) == (0, expected), r.stderr
    # reversed hypothesis file scored with --reverse-hyp gives the same numbers
    rev = w(tmp_path, "rev.txt", "0-0 2-2 1-2\n1-0\n")
    r = run("aer", files["gold"], rev, "--reverse-hyp", "--src", files["src"], "--tgt", files["tgt"])
    assert (r.returncode, r.stdout) == (0, expected), r.stderr
    # 1-based gold in the Hansards form (i-j sure, ipj possible) against a 0-based hypothesis
    gold1 = w(tmp_path, "gold1.txt", "1-1 2-2 3p3\n1-2 2p1\n")
    r = run("aer", gold1, files["hyp"], "--gold-one-based", "--src", files["src"], "--tgt", files["tgt"])
    assert (r.returncode, r.stdout) == (0, expected), r.stderr
    r = run("aer", gold1, files["hyp"], "--src", files["src"], "--tgt", files["tgt"])  # read as 0-based: 3 is out
    assert r.returncode == 2 and "out of range" in r.stderr


@pytest.mark.parametrize("case", ["bad_token", "mismatch", "range", "missing"])
def test_aer_errors(tmp_path, files, case):
    gold, hyp, extra = files["gold"], files["hyp"], []
    if case == "bad_token":
        hyp, where = w(tmp_path, "h.txt", "0-0\n0:1\n"), ":2: "
    elif case == "mismatch":
        hyp, where = w(tmp_path, "h.txt", "0-0\n"), ":2: "
    elif case == "range":
        hyp, where = w(tmp_path, "h.txt", "0-0\n0-5\n"), ":2: "
        extra = ["--src", files["src"], "--tgt", files["tgt"]]
    else:
        hyp, where = str(tmp_path / "nope.txt"), ": cannot read"
    r = run("aer", gold, hyp, *extra)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hmm-nmt-aer: error: ") and (hyp + where) in lines[0], r.stderr


def test_symmetrize_cli_matches_library_and_writes_file(tmp_path):
    fwd = w(tmp_path, "fwd", "0-0 2-0 2-1\n1-0 1-1\n\n")
    rev = w(tmp_path, "rev", "1-1\n0-0 1-1\n0-0\n")
    out = tmp_path / "sym.txt"
    # hand-derived in test_alignment_symmetrize: line 1 final / final-and, line 2 atools grow-diag
    expected = {"grow-diag-final": "0-0 1-1 2-0 2-1\n0-0 1-1\n0-0\n",
                "grow-diag-final-and": "0-0 2-1\n0-0 1-1\n0-0\n",
                "grow-diag": "\n0-0 1-1\n\n", "intersect": "\n1-1\n\n", "union": "0-0 1-1 2-0 2-1\n0-0 1-0 1-1\n0-0\n"}
    for method, text in expected.items():
        r = run("symmetrize", fwd, rev, "--method", method, "-o", str(out))
        assert r.returncode == 0 and r.stdout == "", r.stderr
        assert out.read_text() == text, method
    r = run("symmetrize", fwd, rev, "--method", "grow-diag-final-and")
    assert r.stdout == expected["grow-diag-final-and"]


@pytest.mark.parametrize("case", ["bad_token", "mismatch", "range", "possible"])
def test_symmetrize_errors_leave_no_output(tmp_path, case):
    fwd = w(tmp_path, "fwd", "0-0 1-1\n0-0\n")
    rev = w(tmp_path, "rev", "0-0\n0-0\n")
    extra = []
    if case == "bad_token":
        rev, where = w(tmp_path, "bad", "0-0\n0--0\n"), ":2: "
    elif case == "mismatch":
        rev, where = w(tmp_path, "short", "0-0\n0-0\n0-0\n"), ":3: "
    elif case == "range":
        where = ":1: "
        extra = ["--src", w(tmp_path, "s", "a\nb\n"), "--tgt", w(tmp_path, "t", "x y\nz\n")]
        rev = w(tmp_path, "r", "0-0\n0-0\n")
    else:
        rev, where = w(tmp_path, "poss", "0?0\n0-0\n"), ":1: "
    out = tmp_path / "out" / "sym.txt"
    out.parent.mkdir()
    r = run("symmetrize", fwd, rev, "--method", "grow-diag", "-o", str(out), *extra)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "hmm-nmt-symmetrize: error: " in r.stderr
    bad = fwd if case in ("range", "mismatch") else rev
    assert (bad + where) in r.stderr, r.stderr
    assert os.listdir(out.parent) == []  # neither the output nor a temporary file


def test_baselines_script_rejects_bad_input_before_aligning(tmp_path):
    src = w(tmp_path, "s", "a b\nc\n")
    tgt = w(tmp_path, "t", "x\n")
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "statistical_baselines.sh"), src, tgt, "-"],
                       capture_output=True, text=True, env=dict(ENV, PYTHON=sys.executable), timeout=60)
    assert r.returncode == 2 and "2 source sentences" in r.stderr and r.stdout == ""
    gold = w(tmp_path, "g", "0-0 5-5\n0-0\n")
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "statistical_baselines.sh"), src,
                        w(tmp_path, "t2", "x\ny\n"), gold], capture_output=True, text=True,
                       env=dict(ENV, PYTHON=sys.executable), timeout=60)
    assert r.returncode == 2 and f"{gold}:1:" in r.stderr


@pytest.mark.skipif(importlib.util.find_spec("eflomal") is None,
                    reason="optional [baselines] extra (eflomal) not installed")
def test_baselines_eflomal_on_toy_corpus(tmp_path):
    """eflomal + our grow-diag on 400 generated toy pairs: far better than a diagonal guess."""
    data = tmp_path / "toy"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(data),
                    "--train", "400", "--valid", "1", "--test", "100"], check=True, capture_output=True)
    out = tmp_path / "out"
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "statistical_baselines.sh"), str(data / "test.src"),
                        str(data / "test.tgt"), str(data / "test.align"), "--train-src", str(data / "train.src"),
                        "--train-tgt", str(data / "train.tgt"), "--aligners", "eflomal", "--out-dir", str(out)],
                       capture_output=True, text=True, env=dict(ENV, PYTHON=sys.executable), timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: float(line.split("AER=")[1].split()[0]) for line in r.stdout.splitlines()}
    assert set(rows) == {"eflomal.fwd", "eflomal.rev", "eflomal.grow-diag"}
    # diagonal baseline on the same data: link target j to source round(j * I / J)
    from hmm_nmt_align.aer import corpus_scores
    from hmm_nmt_align.io import Alignment, read_pharaoh, read_tokens

    gold = read_pharaoh(str(data / "test.align"))
    src, tgt = read_tokens(str(data / "test.src")), read_tokens(str(data / "test.tgt"))
    diag = [Alignment.from_links({(min(len(s) - 1, int(j * len(s) / len(t))), j) for j in range(len(t))})
            for s, t in zip(src, tgt)]
    diag_aer = 100 * corpus_scores(gold, diag)["AER"]
    assert rows["eflomal.grow-diag"] < diag_aer - 20, (rows, diag_aer)
    assert len((out / "eflomal.grow-diag.align").read_text().splitlines()) == 100
    # the written symmetrized file is exactly our symmetrization of the written directional files
    from hmm_nmt_align.base.symmetrize import grow_diag

    fwd, rev = read_pharaoh(str(out / "eflomal.fwd.align")), read_pharaoh(str(out / "eflomal.rev.align"))
    sym = read_pharaoh(str(out / "eflomal.grow-diag.align"))
    assert [sorted(a.sure) for a in sym] == [grow_diag(f.sure, r.sure) for f, r in zip(fwd, rev)]


def test_package_does_not_import_fairseq_or_torch():
    code = ("import sys, alignment, hmm_nmt_align.io, hmm_nmt_align.aer, hmm_nmt_align.base.symmetrize, hmm_nmt_align.base.subword, "
            "hmm_nmt_align.cli, hmm_nmt_align.heatmap, hmm_nmt_align.baselines, hmm_nmt_align.base.links, hmm_nmt_align.base.segment; "
            "print(sorted(m for m in ('fairseq', 'torch') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)
