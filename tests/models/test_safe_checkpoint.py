"""No code runs from a checkpoint: every loader goes through hmm_nmt_align.safe_checkpoint.

A checkpoint carrying a pickle payload (an object whose ``__reduce__`` runs ``touch MARKER``) is given to every
entry point that loads one; each must refuse it in one line naming the file, and the marker must not exist. The
command lines run with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, under which a ``torch.load`` without an explicit
``weights_only=True`` (fairseq's own) unpickles anything: the loader must not depend on torch's default.
"""
import os
import pickle
import re
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import finished_manifest

from hmm_nmt_align.safe_checkpoint import CheckpointError, UnsafeCheckpointError, load_checkpoint_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "checkpoints")
CKPT = os.path.join(FIXTURES, "transformer_dhmm.pt")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
ENV.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)


class _Payload:
    """Unpickled, it runs ``touch MARKER`` (what a hostile checkpoint would do with a worse command)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


def payload_checkpoint(path, marker, **save_kw):
    """A real fairseq checkpoint (the frozen zero-order fixture) with a payload in its ``extra_state``."""
    state = load_checkpoint_state(CKPT)
    state["extra_state"] = {"train_iterator": {"epoch": 1}, "note": _Payload(marker)}
    with open(path, "wb") as f:
        torch.save(state, f, **save_kw)
    return str(path)


# ------------------------------------------------------------------------------------------- the loader itself
def test_loads_a_fairseq_checkpoint_without_importing_fairseq():
    code = ("import sys\nfrom hmm_nmt_align.safe_checkpoint import load_checkpoint_state\n"
            f"s = load_checkpoint_state({CKPT!r})\n"
            "print(sorted(s)[:3], 'fairseq' in sys.modules, type(s['cfg']).__name__, s['cfg']['model'].arch)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['args', 'cfg', 'criterion'] False dict transformer_dhmm"


@pytest.mark.parametrize("form", ["zip", "legacy", "protocol4"])
def test_a_payload_is_refused_and_never_run(tmp_path, monkeypatch, form):
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker, path = tmp_path / "MARKER", tmp_path / "evil.pt"
    if form == "protocol4":  # a hand-made pickle: STACK_GLOBAL, which the static scan cannot read
        with open(path, "wb") as f:
            pickle.dump({"model": {}, "x": _Payload(marker)}, f, protocol=4)
    else:
        payload_checkpoint(path, marker, **({"_use_new_zipfile_serialization": False} if form == "legacy" else {}))
    with pytest.raises(UnsafeCheckpointError) as e:
        load_checkpoint_state(path)
    assert not marker.exists()
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: refused: unpickling it could run code"), message
    if form != "protocol4":
        assert "posix.system" in message, message
    assert isinstance(e.value, pickle.UnpicklingError)


def test_files_that_are_no_checkpoint_are_one_line_errors(tmp_path):
    (tmp_path / "zero.pt").write_bytes(b"")
    (tmp_path / "text.pt").write_text("hello, I am not a checkpoint\n")
    with open(CKPT, "rb") as f:
        (tmp_path / "cut.pt").write_bytes(f.read()[:1000])
    cases = {"zero.pt": "not a checkpoint (empty file)", "text.pt": "not a PyTorch checkpoint (neither a zip archive nor a pickle)",
             "cut.pt": "not a PyTorch checkpoint (RuntimeError: PytorchStreamReader failed",
             "missing.pt": "no such checkpoint", "": "a folder, not a checkpoint"}
    for name, want in cases.items():
        path = str(tmp_path / name) if name else str(tmp_path)
        with pytest.raises(CheckpointError) as e:
            load_checkpoint_state(path)
        assert not isinstance(e.value, UnsafeCheckpointError)
        assert str(e.value).startswith(f"{path}: {want}") and "\n" not in str(e.value), str(e.value)


# ------------------------------------------------------------------------------------------- no other torch.load
LOAD_CALL = re.compile(r"\btorch(?:\.serialization)?\s*\.\s*load\s*\(|\bfrom\s+torch(?:\.serialization)?\s+import\s+"
                       r"[^\n]*\bload\b")
LOADER = os.path.join("alignment", "hmm_nmt_align", "safe_checkpoint.py")
# files allowed to keep a direct call, with how many
ALLOWED = {}


def test_no_torch_load_outside_the_safe_loader():
    found = {}
    for top in ("hmm_nmt", "alignment", "benchmarks", "scripts", "examples", "tests"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            for name in files:
                if not name.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(folder, name), ROOT)
                if rel == LOADER:
                    continue
                with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if LOAD_CALL.search(line):
                            found.setdefault(rel, []).append(f"{rel}:{n}: {line.strip()}")
    bad = [hit for rel, hits in sorted(found.items()) if len(hits) != ALLOWED.get(rel, 0) for hit in hits]
    assert not bad, "torch.load outside hmm_nmt_align.safe_checkpoint (use load_checkpoint_state):\n" + "\n".join(bad)
    assert found.get(LOADER) is None and os.path.isfile(os.path.join(ROOT, LOADER))


def test_the_scan_finds_a_direct_call():
    torch_ = "torch"  # spelled apart, so that this file holds no call itself
    assert LOAD_CALL.search(f"state = {torch_}.load(p, weights_only=False)")
    assert LOAD_CALL.search(f"x = {torch_}.serialization.load (f)")
    assert LOAD_CALL.search(f"from {torch_} import nn, load")
    assert not LOAD_CALL.search("state = load_checkpoint_state(p)") and not LOAD_CALL.search(f"{torch_}.loads = 1")


# ------------------------------------------------------------------------------------------- every entry point
def _model_dir(tmp_path, marker):
    """A finished model directory of hmm-nmt-align-corpus whose checkpoints carry the payload."""
    md = tmp_path / "model"
    (md / "bin").mkdir(parents=True)
    for side in ("src", "tgt"):
        shutil.copy(os.path.join(FIXTURES, f"dict.{side}.txt"), md / "bin" / f"dict.{side}.txt")
    (md / "codes").write_text("#version: 0.2\ns 1\n")
    for name in ("fwd", "rev"):
        (md / name).mkdir()
        payload_checkpoint(md / name / "checkpoint_last.pt", marker)
    (md / "manifest.json").write_text(finished_manifest())
    return str(md)


TAG = "import sys\nfrom hmm_nmt_align.tag_commands import tag_main\nsys.exit(tag_main(sys.argv[1:]))"
ENTRY_POINTS = {
    # name: (program as argv, arguments (EVIL: the checkpoint, TMP: a folder), prog in the error line)
    "align_path": (["-m", "hmm_nmt_align.extract"], ["--no-progress", "--path", "EVIL", "--src-text", "TMP/s",
                                                     "--tgt-text", "TMP/t", "--bpe", "none", "--method", "posterior",
                                                     "-o", "TMP/out"], "hmm-nmt-align"),
    "align_model_dir": (["-m", "hmm_nmt_align.extract"], ["--no-progress", "--model-dir", "MODEL", "--src-text",
                                                          "TMP/s", "--tgt-text", "TMP/t", "-o", "TMP/out"],
                        "hmm-nmt-align"),
    "adapt": (["-m", "hmm_nmt_align.adapt"], ["--no-progress", "--path", "EVIL", "--src-text", "TMP/s", "--tgt-text",
                                              "TMP/t", "--bpe", "none", "--updates", "1", "-o", "TMP/out"],
              "hmm-nmt-adapt"),
    "heatmap": (["-m", "hmm_nmt_align.heatmap"], ["--path", "EVIL", "--data", FIXTURES, "--index", "0",
                                                  "--out-dir", "TMP/out"], "hmm-nmt-heatmap"),
    "tag": (["-c", TAG], ["--path", "EVIL", "--input", "TMP/in.conll", "--output", "TMP/out"], "hmm-nmt-tag"),
    "fairseq_generate": (["-m", "fairseq_cli.generate"], [FIXTURES, "--user-dir", os.path.join(ROOT, "hmm_nmt"),
                                                          "-s", "src", "-t", "tgt", "--path", "EVIL"],
                         "fairseq-generate"),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_refuses_a_payload_and_runs_none_of_it(tmp_path, entry):
    program, args, prog = ENTRY_POINTS[entry]
    marker = tmp_path / "MARKER"
    evil = payload_checkpoint(tmp_path / "evil.pt", marker)
    model = _model_dir(tmp_path, marker) if entry == "align_model_dir" else None
    (tmp_path / "s").write_text("s1 s2\ns3\n")
    (tmp_path / "t").write_text("t1\nt2 t3\n")
    (tmp_path / "in.conll").write_text("w1\tDT\nw2\tNN\n\n")
    argv = [evil if a == "EVIL" else model if a == "MODEL" else a.replace("TMP", str(tmp_path)) for a in args]
    proc = subprocess.run([sys.executable, *program, *argv], capture_output=True, text=True, env=ENV, cwd=ROOT,
                          timeout=300)
    assert not marker.exists(), "the payload ran"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith(("INFO:", "20"))]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr[-3000:]
    named = evil if model is None else os.path.join(model, "fwd", "checkpoint_last.pt")
    assert named in lines[0] and "refused: unpickling it could run code" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------- fairseq's command lines
def _fairseq(tool, *args):
    return subprocess.run([sys.executable, "-m", f"fairseq_cli.{tool}", *args], capture_output=True, text=True,
                          env=ENV, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("case", ["zero_byte", "text", "missing"])
def test_fairseq_generate_with_a_bad_checkpoint_is_one_line(tmp_path, case):
    path = tmp_path / f"{case}.pt"
    if case == "zero_byte":
        path.write_bytes(b"")
    elif case == "text":
        path.write_text("hello, I am not a checkpoint\n")
    proc = _fairseq("generate", FIXTURES, "--user-dir", os.path.join(ROOT, "hmm_nmt"), "-s", "src", "-t", "tgt",
                    "--path", str(path))
    want = {"zero_byte": "not a checkpoint (empty file)", "text": "not a PyTorch checkpoint (neither a zip archive nor a pickle)",
            "missing": "no such checkpoint"}[case]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith(("INFO:", "20"))]
    assert lines == [f"fairseq-generate: error: {path}: {want}"], proc.stderr[-3000:]


def test_fairseq_train_with_a_missing_data_bin_prints_only_the_error(tmp_path):
    missing = str(tmp_path / "no" / "data-bin")
    proc = _fairseq("train", missing, "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--arch", "transformer_dhmm",
                    "--criterion", "dhmm_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "1e-3",
                    "--max-tokens", "500", "--max-update", "1", "--save-dir", str(tmp_path / "ck"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"fairseq-train: error: {missing}: no such file or directory"], \
        proc.stderr[-3000:]
    assert not (tmp_path / "ck").exists()
