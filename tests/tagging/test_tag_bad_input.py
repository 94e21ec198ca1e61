"""hmm-nmt-tag (hmm_nmt.cli.tag) on checkpoints that are not checkpoints, a bad --output, and Ctrl-C: a one-line
error naming the flag and the file, exit 2 (130 on Ctrl-C), nothing written, no traceback."""
import os
import subprocess
import sys

import pytest

from hmm_nmt.cli import tag

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def conll(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("The DT B-NP\ncat NN I-NP\n")
    return f


def tag_main(capsys, *args):
    rc = tag.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err.strip().splitlines()


@pytest.mark.parametrize("content, message", [
    (b"", "is empty (0 bytes), not a checkpoint"),
    (b"epoch 3 loss 1.2\nthis is not a checkpoint\n", "is not a PyTorch checkpoint"),
    (b"PK\x03\x04" + b"\x00" * 40, "cannot load"),  # a zip header, then nothing: torch's reader fails
    (b"\x80\x02}q\x00(X", "cannot load"),  # a pickle cut short
], ids=["zero-byte", "text", "broken-zip", "truncated-pickle"])
def test_not_a_checkpoint(tmp_path, capsys, conll, content, message):
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(content)
    rc, out, err = tag_main(capsys, "--path", ckpt, "--input", conll, "--output", tmp_path / "out")
    assert rc == 2 and out == "" and len(err) == 1, err
    assert err[0].startswith("hmm-nmt-tag: error: --path: ") and str(ckpt) in err[0] and message in err[0], err
    assert not (tmp_path / "out").exists()


def test_missing_checkpoint_and_bad_output(tmp_path, capsys, conll):
    rc, _, err = tag_main(capsys, "--path", tmp_path / "none.pt", "--input", conll, "--output", tmp_path / "out")
    assert rc == 2 and err == [f"hmm-nmt-tag: error: --path: no checkpoint {tmp_path / 'none.pt'}"]
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"")
    rc, _, err = tag_main(capsys, "--path", ckpt, "--input", conll, "--output", tmp_path / "no" / "out")
    assert rc == 2 and err == [f"hmm-nmt-tag: error: --output: no such folder {tmp_path / 'no'}"], err
    rc, _, err = tag_main(capsys, "--path", ckpt, "--input", conll, "--output", conll)
    assert rc == 2 and "is the --input file" in err[0] and conll.read_text().startswith("The DT")


CTRL_C = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever the runner ignores
from hmm_nmt.cli import tag
def interrupted(paths, overrides):
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C while the checkpoint loads
    raise AssertionError("not interrupted")
tag.load_ensemble = interrupted
sys.exit(tag.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ctrl_c_exits_130_one_line_nothing_written(tmp_path, conll):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", CTRL_C, "--path", str(conll), "--input", str(conll), "--output",
                        str(tmp_path / "out")], capture_output=True, text=True, env=env)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines() == ["hmm-nmt-tag: interrupted; nothing written"], r.stderr
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]
