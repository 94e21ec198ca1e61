"""Careless and hostile input to the alignment-file tools (hmm-nmt-aer, hmm-nmt-symmetrize) as real subprocesses:
a warning where the result is valid but suspicious, one error line and exit 2 where there is none, no input
ever overwritten, Ctrl-C without a traceback. docs/input-errors.md lists every case and its test."""
import os
import signal
import subprocess
import sys

import pytest
from conftest import default_sigint, open_fifo_writer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def run(*args, **kw):
    """`python -m hmm_nmt_align CMD ARGS` = the console script CMD (hmm-nmt-aer, ...)."""
    return subprocess.run([sys.executable, "-m", "hmm_nmt_align", *args], capture_output=True, text=True, env=ENV,
                          cwd=ROOT, timeout=120, **kw)


def w(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


# ------------------------------------------------------------------------------------------- hmm-nmt-aer
def test_aer_one_based_gold_against_zero_based_hyp_warns(tmp_path):
    gold = w(tmp_path, "gold", "1-1 2-2 3p3\n1-2 2p1\n")  # 1-based (Hansards style), never index 0
    hyp = w(tmp_path, "hyp", "0-0 1-1 2-2\n0-1 1-0\n")  # the same links, 0-based
    r = run("aer", gold, hyp)
    assert r.returncode == 0 and r.stdout.startswith("AER=")
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hmm-nmt-aer: warning: GOLD never uses index 0") \
        and "--gold-one-based" in err[0], r.stderr
    r = run("aer", gold, hyp, "--gold-one-based")
    assert (r.returncode, r.stdout, r.stderr) == (0, "AER=0.00 P=100.00 R=100.00 F=100.00 sentences=2\n", "")
    # and the other way round: a 1-based hypothesis against a 0-based gold
    r = run("aer", hyp, gold)
    assert "warning: HYP never uses index 0" in r.stderr and "--hyp-one-based" in r.stderr, r.stderr
    r = run("aer", hyp, gold, "--hyp-one-based")
    assert (r.returncode, r.stderr) == (0, "") and r.stdout.startswith("AER=0.00 ")
    # both 0-based: no warning
    r = run("aer", hyp, hyp)
    assert (r.returncode, r.stderr) == (0, "")


@pytest.mark.parametrize("case", ["empty_files", "no_links"])
def test_aer_nothing_to_score_is_an_error(tmp_path, case):
    text = "" if case == "empty_files" else "\n\n"
    gold, hyp = w(tmp_path, "gold", text), w(tmp_path, "hyp", text)
    r = run("aer", gold, hyp)
    assert r.returncode == 2 and r.stdout == "" and "nan" not in r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hmm-nmt-aer: error: {gold}: "), r.stderr
    r = run("aer", gold, hyp, "--json")
    assert r.returncode == 2 and r.stdout == ""


def test_aer_reads_stdin_and_process_substitution(tmp_path):
    gold = w(tmp_path, "gold", "0-0 1-1\n0-1\n")
    r = run("aer", "/dev/stdin", gold, input="0-0 1-1\n0-1\n")
    assert (r.returncode, r.stdout) == (0, "AER=0.00 P=100.00 R=100.00 F=100.00 sentences=2\n"), r.stderr
    r = subprocess.run(["bash", "-c", f'"$0" -m hmm_nmt_align aer <(cat {gold}) {gold}', sys.executable],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert (r.returncode, r.stdout) == (0, "AER=0.00 P=100.00 R=100.00 F=100.00 sentences=2\n"), r.stderr


# ------------------------------------------------------------------------------------------- hmm-nmt-symmetrize
@pytest.mark.parametrize("which", ["fwd", "rev", "src", "link", "dotted"])
def test_symmetrize_never_overwrites_an_input(tmp_path, which):
    fwd, rev = w(tmp_path, "fwd", "0-0 1-1\n0-0\n"), w(tmp_path, "rev", "0-0\n0-0\n")
    src, tgt = w(tmp_path, "src", "a b\nc\n"), w(tmp_path, "tgt", "x y\nz\n")
    os.symlink(fwd, tmp_path / "link")
    out, flag = {"fwd": (fwd, "FWD"), "rev": (rev, "REV"), "src": (src, "--src"),
                 "link": (str(tmp_path / "link"), "FWD"),
                 "dotted": (os.path.join(str(tmp_path), ".", "rev"), "REV")}[which]
    before = {n: (tmp_path / n).read_text() for n in ("fwd", "rev", "src", "tgt")}
    r = run("symmetrize", fwd, rev, "-c", "grow-diag", "--src", src, "--tgt", tgt, "-o", out)
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hmm-nmt-symmetrize: error: ") and f"same file as {flag}" in err[0]
    assert {n: (tmp_path / n).read_text() for n in before} == before
    assert sorted(os.listdir(tmp_path)) == ["fwd", "link", "rev", "src", "tgt"]  # no temporary file either


@pytest.mark.parametrize("link", ["to_a_file", "dangling"])
def test_symmetrize_writes_through_a_symbolic_link(tmp_path, link):
    """-o naming a symbolic link writes the file it points to (as a shell's > does); the link stays."""
    fwd, rev = w(tmp_path, "fwd", "0-0 1-1\n0-0\n"), w(tmp_path, "rev", "0-0\n0-0\n")
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "sym.align"
    if link == "to_a_file":
        target.write_text("old content\n")
    os.symlink(target, tmp_path / "out.align")
    r = run("symmetrize", fwd, rev, "-c", "intersect", "-o", str(tmp_path / "out.align"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert os.path.islink(tmp_path / "out.align") and os.readlink(tmp_path / "out.align") == str(target)
    assert target.read_text() == "0-0\n0-0\n"
    assert sorted(os.listdir(tmp_path / "elsewhere")) == ["sym.align"]  # no temporary file


# ------------------------------------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("cmd", ["aer", "symmetrize"])
def test_ctrl_c_is_one_line_and_exit_130(tmp_path, cmd):
    """SIGINT while the command reads its input (a FIFO): one line, 130, the old output kept, no temporary file.
    The FIFO is opened for writing once the command has opened it, so the signal arrives inside its main,
    never during the interpreter's start; the FIFO is closed after the signal, so a signal that arrived between
    two read calls (pending, not interrupting one) is raised as soon as the read returns."""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    other = w(tmp_path, "other", "0-0\n")
    out = w(tmp_path, "out", "old\n")
    args = ["aer", fifo, other] if cmd == "aer" else ["symmetrize", fifo, other, "-c", "union", "-o", out]
    proc = subprocess.Popen([sys.executable, "-m", "hmm_nmt_align", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT, preexec_fn=default_sigint)
    with open_fifo_writer(fifo, proc) as f:
        f.write("0-0\n")
        f.flush()
        proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines() == [f"hmm-nmt-{cmd}: interrupted"] and stdout == ""
    assert (tmp_path / "out").read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["fifo", "other", "out"]
