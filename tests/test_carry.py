"""docs/multi30k/cpu-conv/carry.sh: the copy of long runs' resume state between sessions. Checkpoints go out as
16 MB parts in checkpoints.carry/ (a recovered work tree drops what .gitignore names, and it names checkpoints/)
and come back byte for byte; the best checkpoint goes without its optimizer state; a save that git would
ignore fails; a carry of the older forms still restores."""
import os
import subprocess
import sys

import torch
from conftest import ROOT

CARRY = os.path.join(ROOT, "docs", "multi30k", "cpu-conv", "carry.sh")
MB = 1 << 20


def carry(*args, check=True):
    env = dict(os.environ, PY=sys.executable)
    return subprocess.run(["bash", CARRY, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=check)


def git_repo(path, ignore):
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / ".gitignore").write_text(ignore)
    return path


def fake_run(root):
    ck = root / "seed-1" / "m" / "de-en" / "m" / "checkpoints"
    ck.mkdir(parents=True)
    last = os.urandom(40 * MB + 123)  # three parts, the last one short
    (ck / "checkpoint_last.pt").write_bytes(last)
    torch.save({"model": {"w": torch.arange(6.0)}, "last_optimizer_state": {"adam": torch.ones(3)}},
               ck / "checkpoint_best.pt")
    (ck.parent / "train.log").write_text("log\n")
    return ck, last


def test_save_cuts_parts_and_restore_joins_them(tmp_path):
    ck, last = fake_run(tmp_path / "run")
    repo = git_repo(tmp_path / "repo", open(os.path.join(ROOT, ".gitignore")).read())  # the project's own rules
    carry("save", str(tmp_path / "run"), str(repo / "carry"))
    cck = repo / "carry" / ck.parent.relative_to(tmp_path / "run") / "checkpoints.carry"
    parts = sorted(p.name for p in cck.iterdir())
    assert parts == ["checkpoint_best.pt.carry.000", "checkpoint_last.pt.carry.000",
                     "checkpoint_last.pt.carry.001", "checkpoint_last.pt.carry.002"]
    assert max(p.stat().st_size for p in cck.iterdir()) <= 16 * MB
    assert not list((repo / "carry").rglob("*.pt")) and not list((repo / "carry").rglob(".parts.*"))
    assert not list((repo / "carry").rglob("checkpoints"))
    untracked = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "-uall", "--ignored"],
                               capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(untracked) == 6 and all(line.startswith("?? ") for line in untracked)  # .gitignore, 4 parts, the log; none ignored ("!! ")

    carry("save", str(tmp_path / "run"), str(repo / "carry"))  # a second save replaces, adds no parts
    assert sorted(p.name for p in cck.iterdir()) == parts

    out = carry("restore", str(repo / "carry"), str(tmp_path / "back")).stdout
    bck = tmp_path / "back" / ck.relative_to(tmp_path / "run")
    assert out.count("carry.sh: restored") == 2
    assert (bck / "checkpoint_last.pt").read_bytes() == last
    best = torch.load(bck / "checkpoint_best.pt", weights_only=False)
    assert best["last_optimizer_state"] is None and torch.equal(best["model"]["w"], torch.arange(6.0))
    assert (bck.parent / "train.log").read_text() == "log\n"
    assert not list((tmp_path / "back").rglob("*.carry*"))


def test_save_refuses_a_carry_that_git_ignores(tmp_path):
    fake_run(tmp_path / "run")
    repo = git_repo(tmp_path / "repo", "*.carry.*\n")
    res = carry("save", str(tmp_path / "run"), str(repo / "carry"), check=False)
    assert res.returncode == 1
    assert "git ignores these files" in res.stderr and "checkpoint_last.pt.carry.000" in res.stderr


def test_restore_takes_an_older_whole_file_carry(tmp_path):
    ck = tmp_path / "carry" / "job" / "checkpoints"
    ck.mkdir(parents=True)
    (ck / "checkpoint_last.pt.carry").write_bytes(b"whole")
    carry("restore", str(tmp_path / "carry"), str(tmp_path / "back"))
    assert (tmp_path / "back" / "job" / "checkpoints" / "checkpoint_last.pt").read_bytes() == b"whole"
