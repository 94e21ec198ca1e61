"""The built wheel, installed non-editable into a fresh folder and used from outside the checkout.

The wheel must add exactly two top-level import names (``hmm_nmt``, ``hmm_nmt_align``), carry every package
folder of the checkout (``[tool.setuptools] packages`` is an explicit list), and work from any directory:
the console scripts run, and ``fairseq-train --user-dir "$(hmm-nmt-user-dir)"`` (the README's command) trains
a few updates on the toy corpus with the installed plugin, not the checkout's.
"""
import glob
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)

pytestmark = pytest.mark.slow


def _package_folders():
    """Import names of every package folder of the checkout that the wheel must carry."""
    out = set()
    for top, name in (("hmm_nmt", "hmm_nmt"), (os.path.join("alignment", "hmm_nmt_align"), "hmm_nmt_align")):
        for init in glob.glob(os.path.join(ROOT, top, "**", "__init__.py"), recursive=True):
            rel = os.path.relpath(os.path.dirname(init), os.path.join(ROOT, top))
            out.add(name if rel == "." else name + "." + rel.replace(os.sep, "."))
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(work / "dist"), ROOT], check=True, capture_output=True, text=True, timeout=600)
    (wheel,) = glob.glob(str(work / "dist" / "*.whl"))
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target",
                    str(target), wheel], check=True, capture_output=True, text=True, timeout=600)
    # the installed copy first: the venv's editable finder comes after the path entries
    env = dict(os.environ, PYTHONPATH=str(target), OMP_NUM_THREADS="1",
               PATH=str(target / "bin") + os.pathsep + BIN + os.pathsep + os.environ.get("PATH", ""))
    outside = work / "elsewhere"
    outside.mkdir()
    return wheel, target, env, outside


def test_the_wheel_installs_two_top_level_names_and_every_package(installed):
    wheel, _, _, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"hmm_nmt", "hmm_nmt_align"}, tops
    packaged = {os.path.dirname(n).replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert packaged == _package_folders(), packaged ^ _package_folders()
    assert not any(n.startswith(("benchmarks/", "tests/", "scripts/")) for n in names)


def test_console_scripts_run_from_outside_the_checkout(installed):
    _, target, env, outside = installed
    for script in ("hmm-nmt-align", "hmm-nmt-aer", "hmm-nmt-symmetrize", "hmm-nmt-tag", "hmm-nmt-baselines"):
        p = subprocess.run([str(target / "bin" / script), "--help"], cwd=outside, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0 and "usage" in p.stdout.lower(), (script, p.stderr[-2000:])
    p = subprocess.run([str(target / "bin" / "hmm-nmt-user-dir")], cwd=outside, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == str(target / "hmm_nmt"), (p.stdout, p.stderr)
    code = "import hmm_nmt, hmm_nmt_align; print(hmm_nmt.__file__); print(hmm_nmt_align.__file__)"
    p = subprocess.run([sys.executable, "-c", code], cwd=outside, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert all(line.startswith(str(target)) for line in p.stdout.split()), p.stdout


def test_the_readme_training_command_trains_with_the_installed_plugin(installed):
    _, target, env, outside = installed
    raw = outside / "raw"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw),
                    "--train", "200", "--valid", "20", "--test", "20"], check=True, capture_output=True)
    run = dict(cwd=outside, env=env, capture_output=True, text=True, timeout=900)
    p = subprocess.run(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref",
                        f"{raw}/train", "--validpref", f"{raw}/valid", "--destdir", "data-bin",
                        "--joined-dictionary", "--workers", "1"], **run)
    assert p.returncode == 0, p.stderr[-2000:]
    user_dir = subprocess.run(["hmm-nmt-user-dir"], **run).stdout.strip()
    p = subprocess.run(["fairseq-train", "data-bin", "--user-dir", user_dir, "--arch", "transformer_dhmm",
                        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32",
                        "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
                        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
                        "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                        "--optimizer", "adam", "--lr", "5e-4", "--max-tokens", "1000", "--max-update", "3",
                        "--save-dir", "checkpoints", "--no-epoch-checkpoints", "--num-workers", "0",
                        "--no-progress-bar", "--log-format", "simple"], **run)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (outside / "checkpoints" / "checkpoint_last.pt").exists()
    assert str(target / "hmm_nmt") == user_dir
