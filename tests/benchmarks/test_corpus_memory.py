"""scripts/corpus_memory.py: the corpus cycled to each size, and each stage's peak memory in the right column
(the driver, the largest descendant, the tree), measured on a command that allocates known amounts."""
import json
import os
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import corpus_memory as cm  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="the sampler reads Linux's /proc")

# a stand-in for hmm-nmt-align-corpus: its log lines, 200 MB in a child while "training", 300 MB in itself while
# "aligning"; each held long enough for several samples
FAKE = textwrap.dedent("""\
    import subprocess, sys, time
    def say(m):
        sys.stderr.write("hmm-nmt-align-corpus: " + m + "\\n"); sys.stderr.flush()
    assert sys.argv[1:3] == ["-s", sys.argv[2]] and open(sys.argv[2]).read().count("\\n") == int(sys.argv[-1])
    say("segmenting and binarizing"); time.sleep(0.6)
    say("training the first-order direct HMM, both directions")
    subprocess.run([sys.executable, "-c", "import time; b = bytearray(200 << 20); time.sleep(1.2)"], check=True)
    say("aligning 10 pairs")
    b = bytearray(300 << 20); time.sleep(1.2)
    """)


def test_the_input_is_cycled_to_each_size(tmp_path):
    (tmp_path / "a.src").write_text("s1\ns2\ns3\n")
    (tmp_path / "a.tgt").write_text("t1\nt2\nt3\n")
    cm.repeat(str(tmp_path / "a.src"), str(tmp_path / "a.tgt"), 7, str(tmp_path / "7"))
    assert (tmp_path / "7.src").read_text() == "s1\ns2\ns3\ns1\ns2\ns3\ns1\n"
    assert (tmp_path / "7.tgt").read_text().splitlines()[-1] == "t1"


def test_each_stage_peak_is_in_its_column_and_a_rerun_skips_what_was_measured(tmp_path, capsys):
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    cmd = tmp_path / "cmd"
    cmd.write_text(f"#!/bin/sh\nexec {sys.executable} {fake} \"$@\"\n")
    cmd.chmod(0o755)
    (tmp_path / "c.src").write_text("a b\nc\n")
    (tmp_path / "c.tgt").write_text("x\ny z\n")
    results = tmp_path / "r.json"
    args = ["--src", str(tmp_path / "c.src"), "--tgt", str(tmp_path / "c.tgt"), "--pairs", "5", "--work",
            str(tmp_path / "w"), "--results", str(results), "--interval", "0.05", "--command", str(cmd), "--",
            "--lines", "5"]
    assert cm.main(args) == 0
    run = json.loads(results.read_text())["runs"][0]
    peaks = run["peaks"]
    assert run["pairs"] == 5 and set(peaks) <= {"read", "prepare", "train", "align"} and "train" in peaks
    assert 200 <= peaks["train"]["child"] < 300 and peaks["train"]["tree"] >= peaks["train"]["child"]
    assert peaks["align"]["driver"] >= 300 and peaks["align"]["child"] == 0
    assert peaks["prepare"]["driver"] < 100 and run["max"]["driver"] == peaks["align"]["driver"]
    assert "| 5 | align |" in capsys.readouterr().out
    os.remove(fake)  # measured: not run again
    assert cm.main(args) == 0
    assert json.loads(results.read_text())["runs"][0] == run
