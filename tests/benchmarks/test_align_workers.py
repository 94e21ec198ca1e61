"""scripts/align_workers.py: the two runs get the same input and flags but --align-workers, their links are compared
line by line and scored on the gold, and the results file makes its table."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import align_workers as aw  # noqa: E402
import alignment_tables as at  # noqa: E402

# a stand-in for hmm-nmt-align-corpus: records its argv, writes "0-0" per input line (or "1-1" with workers when
# asked to differ)
_FAKE = """#!{python}
import json, os, sys
a = sys.argv[1:]
name = os.path.basename(a[a.index("-o") + 1]).split(".")[0]
json.dump(a, open({log!r} + name, "w"))
n = sum(1 for _ in open(a[a.index("-s") + 1]))
link = "1-1" if {differ} and "--align-workers" not in a else "0-0"
for flag in ("-o", "-f", "-r"):
    open(a[a.index(flag) + 1], "w").write((link + "\\n") * n)
"""


def _setup(tmp_path, monkeypatch, differ=False):
    exe = tmp_path / "hmm-nmt-align-corpus"
    exe.write_text(_FAKE.format(python=sys.executable, log=str(tmp_path / "argv."), differ=differ))
    exe.chmod(0o755)
    monkeypatch.setattr(aw, "_tool", lambda name: str(exe))
    (tmp_path / "s").write_text("a\nb\nc\n")
    (tmp_path / "t").write_text("x\ny\nz\n")
    return ["--model-dir", "m", "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t"), "--lines", "2",
            "--threads", "2", "--work", str(tmp_path / "w"), "--results", str(tmp_path / "r.json")]


def test_the_two_runs_differ_only_in_align_workers_and_their_links_are_compared(tmp_path, monkeypatch):
    args = _setup(tmp_path, monkeypatch)
    assert aw.main(args) == 0
    threads = json.load(open(tmp_path / "argv.threads"))
    workers = json.load(open(tmp_path / "argv.workers"))
    assert threads[-2:] == ["--align-workers", "0"] and "--align-workers" not in workers
    assert [x for x in threads if "threads." not in x][:-2] == [x for x in workers if "workers." not in x]
    assert (tmp_path / "w" / "input.src").read_text() == "a\nb\n"
    res = json.load(open(tmp_path / "r.json"))
    assert res["pairs"] == 2 and set(res["runs"]) == {"threads", "workers"}
    assert res["lines_differing"] == {"align": 0, "fwd": 0, "rev": 0}
    assert res["runs"]["workers"]["wall_s"] > 0 and res["speedup"] > 0
    t = at.table(res)
    assert "| 2 worker processes of one thread (the default) |" in t and "merged 0, forward 0, reverse 0" in t


def test_links_that_differ_are_counted_and_fail_the_run_where_the_gold_tells_them_apart(tmp_path, monkeypatch):
    args = _setup(tmp_path, monkeypatch, differ=True)
    assert aw.main(args) == 0  # no gold: counted, not judged
    assert json.load(open(tmp_path / "r.json"))["lines_differing"] == {"align": 2, "fwd": 2, "rev": 2}
    (tmp_path / "g").write_text("0-0\n0-0\n")
    gold = ["--gold", str(tmp_path / "g"), "--dev-pairs", "1"]
    assert aw.main(args + gold) == 1
    res = json.load(open(tmp_path / "r.json"))
    assert res["runs"]["threads"]["scores"]["test"]["AER"] == 0.0
    assert res["runs"]["workers"]["scores"]["test"]["AER"] == 100.0
    assert "| 0.00 | 0.00 |" in at.table(res) and "| 100.00 | 100.00 |" in at.table(res)


@pytest.mark.parametrize("extra, message", [(["--threads", "1"], "--threads must be at least 2"),
                                            (["--order", "workers"], "--order must name each")])
def test_bad_flags_stop_before_any_run(tmp_path, monkeypatch, capsys, extra, message):
    args = _setup(tmp_path, monkeypatch)
    with pytest.raises(SystemExit):
        aw.main(args + extra)
    assert message in capsys.readouterr().err and not (tmp_path / "w").exists()
