"""Heat maps: PNGs are produced, are real images of a sensible size, and bad input writes nothing."""
import os
import subprocess
import sys

import numpy as np
import pytest

from hmm_nmt_align.heatmap import plot_matrix, plot_transition, render

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
SRC = ["das", "Haus", "ist", "klein", "</s>"]
TGT = ["the", "house", "is", "small"]


def softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def assert_png(path, min_pixels=100 * 100):
    import matplotlib.image

    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(path)
    assert img.shape[0] * img.shape[1] >= min_pixels
    assert img[..., :3].std() > 0.01  # not a blank canvas


def test_plot_matrix_and_transition(tmp_path):
    rng = np.random.default_rng(0)
    m = softmax_rows(rng.normal(size=(len(TGT), len(SRC))) * 3)
    p = plot_matrix(m, SRC, TGT, "alignment", str(tmp_path / "a.png"), links=[(0, 0), (1, 1)])
    assert_png(p)
    t = softmax_rows(rng.normal(size=(len(SRC), len(SRC))))
    assert_png(plot_transition(t, SRC, 2, str(tmp_path / "t.png"), tgt_token="is"))
    with pytest.raises(ValueError, match="does not match"):
        plot_matrix(m.T, SRC, TGT, "x", str(tmp_path / "bad.png"))
    assert not (tmp_path / "bad.png").exists()


@pytest.mark.slow
def test_cli_npz_all_keys(tmp_path):
    rng = np.random.default_rng(1)
    npz = tmp_path / "pair.npz"
    np.savez(npz, src_tokens=np.array(SRC), tgt_tokens=np.array(TGT),
             alignment=softmax_rows(rng.normal(size=(4, 5))), posterior=softmax_rows(rng.normal(size=(4, 5))),
             attention=softmax_rows(rng.normal(size=(4, 5))), transition=softmax_rows(rng.normal(size=(4, 5, 5))))
    out = tmp_path / "maps"
    r = subprocess.run([sys.executable, "-m", "hmm_nmt_align", "heatmap", "--npz", str(npz), "--out-dir", str(out),
                        "--position", "3"], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(out))
    assert names == ["alignment.png", "attention.png", "posterior.png", "transition_i3.png"]
    assert r.stdout.split() == [str(out / n) for n in ["alignment.png", "posterior.png", "attention.png",
                                                         "transition_i3.png"]]
    for n in names:
        assert_png(out / n)


@pytest.mark.parametrize("case", ["shape", "no_matrix", "position", "not_npz"])
def test_cli_bad_npz_writes_nothing(tmp_path, case):
    npz = tmp_path / "x.npz"
    good = dict(src_tokens=np.array(SRC), tgt_tokens=np.array(TGT))
    if case == "shape":  # posterior fine, attention transposed: nothing at all is written
        np.savez(npz, posterior=np.ones((4, 5)) / 5, attention=np.ones((5, 4)), **good)
    elif case == "no_matrix":
        np.savez(npz, **good)
    elif case == "position":
        np.savez(npz, transition=np.ones((4, 5, 5)) / 5, **good)
    else:
        npz.write_bytes(b"not a zip")
    out = tmp_path / "maps"
    r = subprocess.run([sys.executable, "-m", "hmm_nmt_align", "heatmap", "--npz", str(npz), "--out-dir", str(out),
                        "--position", "7"], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and str(npz) in r.stderr
    assert not out.exists() or os.listdir(out) == []


def test_render_two_dimensional_transition(tmp_path):
    paths = render({"src_tokens": SRC, "tgt_tokens": TGT, "transition": np.eye(5)}, str(tmp_path), position=1)
    assert paths == [str(tmp_path / "transition_i1.png")]
    assert_png(paths[0])
