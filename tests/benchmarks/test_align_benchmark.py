"""scripts/align_benchmark.py and scripts/alignment_tables.py: every baseline at the merge its dev part chooses,
and the README/docs tables equal to the committed results files they are built from."""
import glob
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import align_benchmark as ab  # noqa: E402
import alignment_tables as at  # noqa: E402


def _gold(tmp_path, lines, dev):
    (tmp_path / "g").write_text("".join(lines))
    src = [5] * len(lines)
    return ab.Gold(SimpleNamespace(gold=str(tmp_path / "g"), gold_one_based=False, gold_reverse=False,
                                   dev_pairs=dev), src, src)


def test_the_merge_is_chosen_on_the_dev_part_not_the_test_part(tmp_path):
    # dev: the gold is the intersection (the union adds a wrong link); test: the gold is the union
    gold = _gold(tmp_path, ["0-0\n", "0-0 1-1\n"], dev=1)
    fwd, rev = [[(0, 0)], [(0, 0)]], [[(0, 0), (1, 2)], [(1, 1)]]
    rows, best = ab.merges(fwd, rev, gold)
    assert rows["intersect"]["dev"]["AER"] == 0.0 and rows["union"]["dev"]["AER"] > 0
    assert rows["union"]["test"]["AER"] < rows["intersect"]["test"]["AER"]
    assert best == "intersect"


def test_gold_links_outside_a_pair_are_refused_naming_the_line(tmp_path):
    (tmp_path / "g").write_text("0-0\n9-0\n")
    with pytest.raises(SystemExit, match=r"g:2: link \(9, 0\) outside"):
        ab.Gold(SimpleNamespace(gold=str(tmp_path / "g"), gold_one_based=False, gold_reverse=False, dev_pairs=1),
                [3, 3], [3, 3])


def _results():
    scores = lambda a: {"dev": {"AER": a, "P": 90.0, "R": 80.0}, "test": {"AER": a + 1, "P": 91.0, "R": 81.0}}  # noqa: E731
    return {"name": "toy", "command": "scripts/align_benchmark.py --name toy", "date": "2026-01-01",
            "data": {"gold_pairs": 3, "dev_pairs": 1, "test_pairs": 2, "training_pairs": 10, "gold": "g", "note": ""},
            "hardware": {"cpu": "CPU X", "cores": 2}, "seeds": [1, 2], "eflomal_runs": 1, "hmm_args": [],
            "systems": [{"system": "eflomal", "run": 1, "merge": "grow-diag", "scores": scores(10.0), "wall_s": 3.0,
                         "cpu_s": 4.0},
                        {"system": "hmm-nmt-align-corpus", "seed": 1, "merge": "default (no gold)",
                         "scores": scores(5.0), "wall_s": 100.0, "cpu_s": 190.0},
                        {"system": "hmm-nmt-align-corpus", "seed": 2, "merge": "default (no gold)",
                         "scores": scores(7.0), "wall_s": 120.0, "cpu_s": 210.0}]}


def test_the_table_lists_each_run_the_mean_and_its_provenance():
    t = at.table(_results())
    assert "| eflomal, run 1 | `grow-diag` | 10.00 | 11.00 | 91.00 | 81.00 |  | 3 | 4 |" in t
    assert "| hmm-nmt-align-corpus, mean of 2 | default (no gold) | **6.00** ± 1.41 | **7.00** ± 1.41 |" in t
    assert "CPU X, 2 cores" in t and "`scripts/align_benchmark.py --name toy`" in t


def test_check_finds_a_table_that_drifted_from_its_results_file(tmp_path):
    res = tmp_path / "r.json"
    res.write_text(json.dumps(_results()))
    md = tmp_path / "page.md"
    md.write_text(f"intro\n<!-- results: {res} -->\nstale\n<!-- /results -->\nend\n")
    script = os.path.join(ROOT, "scripts", "alignment_tables.py")
    assert subprocess.run([sys.executable, script, "--check", str(md)], capture_output=True).returncode == 1
    assert subprocess.run([sys.executable, script, "--write", str(md)], capture_output=True).returncode == 0
    text = md.read_text()
    assert "stale" not in text and "| eflomal, run 1 |" in text and text.endswith("<!-- /results -->\nend\n")
    assert subprocess.run([sys.executable, script, "--check", str(md)], capture_output=True).returncode == 0


def test_the_committed_tables_equal_their_results_files():
    pages = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                                                                 recursive=True))
    for page in pages:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        assert at.render(text) == text, f"{page}: run scripts/alignment_tables.py --write {page}"


def test_a_budget_curve_file_gets_its_own_table():
    pt = lambda n, s, a: {"updates": n, "train_s": s, "scores": {p: {"AER": a, "P": 90.0, "R": 80.0}  # noqa: E731
                                                                for p in ("dev", "test", "all")}}
    res = {"name": "toy", "command": "scripts/budget_curve.py --work w", "date": "2026-01-01", "note": "Quiet cores.",
           "data": {"gold_pairs": 3, "dev_pairs": 1, "training_pairs": 1000}, "hardware": {"cpu": "CPU X", "cores": 2},
           "config": {"seed": 1, "max_update": 1200}, "merge": "the default merge",
           "points": [pt(600, 500.0, 40.0), pt(1200, 1001.0, 30.5)]}
    t = at.table(res)
    assert "| 600 | 500 | 40.00 | 40.00 | 40.00 |" in t and "| 1,200 | 1,001 | 30.50 | 30.50 | 30.50 |" in t
    assert "1,200 updates per direction on 1,000 pairs" in t and "Quiet cores." in t and "CPU X, 2 cores" in t


def test_the_curve_pairs_the_two_directions_checkpoints_of_each_interval(tmp_path):
    import budget_curve as bc

    for d, walls in (("fwd", (50.0, 99.0)), ("rev", (55.0, 97.0))):
        (tmp_path / d).mkdir()
        for e, n in ((1, 600), (2, 1200)):
            (tmp_path / d / f"checkpoint_{e + (d == 'rev')}_{n}.pt").write_text("")
        (tmp_path / d / "checkpoint_last.pt").write_text("")
        (tmp_path / d / "train.log").write_text("".join(
            f'x | {{"num_updates": "{n}", "lr": "0", "wall": "{w}"}}\n' for n, w in zip((600, 1200), walls)))
    (tmp_path / "fwd" / "checkpoint_3_1500.pt").write_text("")  # not on the interval, no rev twin
    md = SimpleNamespace(file=lambda *p: os.path.join(str(tmp_path), *p))
    got = bc.points(md, 600)
    assert list(got) == [600, 1200]
    assert got[600][1].endswith("rev/checkpoint_2_600.pt") and got[600][2] == 55.0 and got[1200][2] == 99.0


def test_a_job_records_its_time_and_peak_memory_even_when_it_fails(tmp_path):
    import resource

    # a child's ru_maxrss starts from what it was forked from (Linux keeps the high-water mark across exec): the
    # command must outgrow this process to show; the benchmark's own process is small
    times = ab.Times(str(tmp_path / "times.json"))  # first: it reads the hardware (imports torch)
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = int(floor) + 200
    grow = f"b = bytearray({size} * 2 ** 20); b[::4096] = b'x' * len(b[::4096])"  # every page touched
    times.run("big", [sys.executable, "-c", grow], str(tmp_path / "big.log"))
    times.run("small", [sys.executable, "-c", "pass"], str(tmp_path / "small.log"))
    assert times.data["big"]["max_rss_mb"] >= size > floor + 100 > times.data["small"]["max_rss_mb"] > 0
    with pytest.raises(SystemExit, match=r"bad failed .*boom"):
        times.run("bad", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], str(tmp_path / "bad.log"))
    saved = json.loads((tmp_path / "times.json").read_text())
    assert saved["bad"]["runs"] == 1 and saved["bad"]["wall_s"] > 0 and saved["big"]["cpu_s"] > 0


def test_link_rules_keep_what_lies_above_each_threshold_and_count_without_gold(tmp_path):
    import link_rules as lr

    (tmp_path / "o").write_text("0-0 1-1 1-2\n\n2-0\n")
    (tmp_path / "s").write_text("0.9 0.4 0.2\n\n0.6\n")
    scored = lr.read_scored(str(tmp_path / "o"), str(tmp_path / "s"), 3)
    assert scored == [[(0, 0, 0.9), (1, 1, 0.4), (1, 2, 0.2)], [], [(2, 0, 0.6)]]
    assert lr.keep_above(scored, 0.5) == [[(0, 0)], [], [(2, 0)]]
    assert lr.keep_above(scored, 0.3) == [[(0, 0), (1, 1)], [], [(2, 0)]]
    t = lr.threshold_for_count(scored, 3)  # the three most probable links
    assert sum(map(len, lr.keep_above(scored, t))) == 3 and 0.2 < t < 0.4
    assert lr.threshold_for_count(scored, 99) == lr.FLOOR
    got = dict(lr.rules(scored, [2, 0, 3], [3, 1, 1]))  # min words: 2 + 0 + 1 = 3
    assert got["threshold 0.5"] == 0.5 and got["count = min words"] == t
    (tmp_path / "bad").write_text("0.9\n\n0.6\n")
    with pytest.raises(SystemExit, match=r"bad:1: 1 scores for 3 links"):
        lr.read_scored(str(tmp_path / "o"), str(tmp_path / "bad"), 3)


def test_a_link_rules_file_gets_its_own_table():
    sc = {p: {"AER": 20.0, "P": 90.0, "R": 70.0} for p in ("dev", "test", "all")}
    res = {"name": "toy", "command": "scripts/link_rules.py --work w", "date": "2026-01-01", "hardware": {"cpu": "CPU X"},
           "data": {"gold_pairs": 3, "dev_pairs": 1}, "config": {"seed": 1, "max_update": 1200, "guide_updates": 300},
           "dev_best": "threshold 0.5", "rules": [{"rule": "threshold 0.5", "threshold": 0.5, "links": 1234, "scores": sc},
                                                  {"rule": "count = min words", "threshold": 0.41, "links": 99,
                                                   "scores": sc}]}
    t = at.table(res)
    assert "| **threshold 0.5** | 0.500 | 1,234 | 20.00 |" in t and "| count = min words | 0.410 | 99 |" in t
    assert "1,200 + 300 updates" in t and "`scripts/link_rules.py --work w`" in t


def test_a_summary_table_keeps_the_mean_rows_alone(tmp_path):
    res = tmp_path / "r.json"
    res.write_text(json.dumps(_results()))
    page = f"<!-- results: {res} summary -->\nold\n<!-- /results -->\n"
    text = at.render(page)
    assert "| hmm-nmt-align-corpus, mean of 2 |" in text and "seed 1 |" not in text
    assert "| eflomal, run 1 |" in text  # a system run once keeps its row


def test_a_job_records_the_commit_it_ran_from(tmp_path):
    times = ab.Times(str(tmp_path / "times.json"))
    times.run("job", [sys.executable, "-c", "pass"], str(tmp_path / "job.log"))
    code = json.loads((tmp_path / "times.json").read_text())["job"]["code"]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        assert code is None  # a copy without git
    else:
        assert code.split("-")[0] == head.stdout.strip()


def test_a_job_resumed_on_another_cpu_or_commit_names_both(tmp_path, monkeypatch):
    times = ab.Times(str(tmp_path / "times.json"))
    monkeypatch.setattr(ab, "cpu_model", lambda: "CPU A")
    monkeypatch.setattr(ab, "code_version", lambda: "abc")
    times.run("job", [sys.executable, "-c", "pass"], str(tmp_path / "job.log"))
    times.run("job", [sys.executable, "-c", "pass"], str(tmp_path / "job.log"))  # same again: named once
    monkeypatch.setattr(ab, "cpu_model", lambda: "CPU B")
    times.run("job", [sys.executable, "-c", "pass"], str(tmp_path / "job.log"))
    job = json.loads((tmp_path / "times.json").read_text())["job"]
    assert (job["cpu"], job["code"], job["runs"]) == ("CPU A + CPU B", "abc", 3)


def test_the_results_name_the_hardware_the_benchmark_started_on(tmp_path, monkeypatch):
    monkeypatch.setattr(ab, "hardware", lambda: {"cpu": "CPU A", "cores": 2})
    ab.Times(str(tmp_path / "times.json")).add("job", 1.0, 2.0)
    monkeypatch.setattr(ab, "hardware", lambda: {"cpu": "CPU B", "cores": 2})
    resumed = ab.Times(str(tmp_path / "times.json"))
    resumed.add("job", 1.0, 2.0)
    assert resumed.hardware["cpu"] == "CPU A" and set(resumed.data) == {"job"}
    assert ab.Times(str(tmp_path / "times.json")).hardware["cpu"] == "CPU A"
    assert ab.Times(str(tmp_path / "new.json")).hardware["cpu"] == "CPU B"


def _seed_dir(tmp_path, stages):
    os.makedirs(tmp_path / "hmm.1")
    (tmp_path / "hmm.1" / "manifest.json").write_text(json.dumps({"config": {}, "times": stages}))
    for ext in ("", ".fwd", ".rev"):
        (tmp_path / f"hmm.1.align{ext}").write_text("0-0\n0-0\n")


def test_a_seed_costs_at_least_the_stages_its_model_directory_recorded(tmp_path):
    gold = _gold(tmp_path, ["0-0\n", "0-0\n"], dev=1)
    opts = SimpleNamespace(work=str(tmp_path))
    _seed_dir(tmp_path, {"train": {"wall_s": 50.0, "cpu_s": 90.0}, "align": {"wall_s": 20.0, "cpu_s": 30.0}})
    times = ab.Times(str(tmp_path / "times.json"))
    times.add("hmm.1", 25.0, 35.0)  # the run that resumed at the alignment; the one that trained left no time
    row = ab.run_hmm(opts, times, gold, 2, 1)
    assert (row["wall_s"], row["cpu_s"], row["times_from"]) == (70.0, 120.0, "stages")
    assert "seed 1: the sum of its stages" in at.table({**_results(), "systems": [row]})
    times.add("hmm.1", 100.0, 100.0)  # a job that recorded its whole time keeps it: stages miss its start-up
    row = ab.run_hmm(opts, times, gold, 2, 1)
    assert (row["wall_s"], row["cpu_s"]) == (125.0, 135.0) and "times_from" not in row


def test_the_provenance_line_names_a_seeds_cpu_only_when_it_differs():
    res = _results()
    cpu = res["hardware"]["cpu"]
    res["systems"][1]["cpu"] = res["systems"][2]["cpu"] = cpu
    assert "CPU of hmm-nmt-align-corpus" not in at.table(res)
    res["systems"][2]["cpu"] = "Other CPU"
    assert f"CPU of hmm-nmt-align-corpus: seed 1: {cpu}; seed 2: Other CPU." in at.table(res)


def test_an_ensemble_is_named_by_its_members_so_more_seeds_run_it_again(tmp_path, monkeypatch):
    runs = []
    monkeypatch.setattr(ab.Times, "run", lambda self, name, cmd, log_path: (
        runs.append(name), open(cmd[cmd.index("-o") + 1], "w").write("0-0\n0-0\n"),
        self.add(name, 1.0, 2.0)))
    gold = _gold(tmp_path, ["0-0\n", "0-0\n"], dev=1)
    times = ab.Times(str(tmp_path / "times.json"))
    opts = SimpleNamespace(work=str(tmp_path))
    hmm = [{"seed": s, "wall_s": 10.0, "cpu_s": 20.0, "stages": {"align": {"wall_s": 1.0, "cpu_s": 2.0}}}
           for s in (1, 2, 3)]
    two = ab.run_ensemble(opts, times, gold, 2, [1, 2], hmm)
    three = ab.run_ensemble(opts, times, gold, 2, [1, 2, 3], hmm)
    ab.run_ensemble(opts, times, gold, 2, [1, 2], hmm)  # done: not run again
    assert runs == ["hmm-ensemble.1-2", "hmm-ensemble.1-2-3"]
    assert two["seeds"] == [1, 2] and two["cpu_s"] == 2.0 + 2 * 18.0 and three["cpu_s"] == 2.0 + 3 * 18.0
    assert (tmp_path / "hmm-ensemble.1-2-3.align").exists()


def test_ensemble_seeds_must_be_among_the_seeds():
    with pytest.raises(SystemExit, match="--ensemble-seeds must be among --seeds"):
        ab.main(["--name", "x", "--work", "w", "--gold-src", "s", "--gold-tgt", "t", "--gold", "g", "--dev-pairs", "1",
                 "--seeds", "1", "2", "--ensemble-seeds", "1", "3"])


_ARGS = ["--name", "x", "--gold-src", "s", "--gold-tgt", "t", "--gold", "g", "--dev-pairs", "1", "--seeds", "1", "2"]


@pytest.mark.parametrize("absent, extra, message", [
    ("eflomal-align", [], r"eflomal-align not found \(pip install -e '.\[baselines\]', or --eflomal-runs 0\)"),
    ("hmm-nmt-align", [], r"hmm-nmt-align not found \(make install"),
    ("systran_align", ["--fast-align"], r"systran-align \(fast_align\) not installed"),
])
def test_a_missing_aligner_stops_the_benchmark_before_it_starts(tmp_path, monkeypatch, absent, extra, message):
    real_tool, real_spec = ab._tool, ab.importlib.util.find_spec
    monkeypatch.setattr(ab, "_tool", lambda name: None if name == absent else real_tool(name) or name)
    monkeypatch.setattr(ab.importlib.util, "find_spec", lambda name: None if name == absent else real_spec(name))
    work = tmp_path / "work"
    with pytest.raises(SystemExit, match=message):
        ab.main(["--work", str(work), *_ARGS, *extra])
    assert not work.exists()  # nothing written, no job timed


def test_one_seed_needs_no_ensemble_command(tmp_path, monkeypatch):
    monkeypatch.setattr(ab, "_tool", lambda name: None if name == "hmm-nmt-align" else name)
    opts = ab.build_parser().parse_args(["--work", str(tmp_path), *_ARGS[:-1]])
    ab.check_tools(opts)  # no SystemExit
    opts.seeds = [1, 2]
    with pytest.raises(SystemExit, match="hmm-nmt-align not found"):
        ab.check_tools(opts)


def test_the_provenance_line_names_each_seeds_code():
    res = _results()
    res["systems"][1]["code"], res["systems"][2]["code"] = "abc123", "def456"
    assert "Code of hmm-nmt-align-corpus: seed 1: abc123; seed 2: def456." in at.table(res)
    res["systems"][2]["code"] = "abc123"
    assert "Code of hmm-nmt-align-corpus: seeds 1, 2: abc123." in at.table(res)


_FAKE = """#!{python}
import json, os, sys
a = sys.argv[1:]
json.dump({{"argv": a, "omp": os.environ.get("OMP_NUM_THREADS")}}, open({log!r} + os.path.basename(sys.argv[0]), "w"))
for flag in ("-o", "-f", "-r"):
    if flag in a:
        open(a[a.index(flag) + 1], "w").write("0-0\\n0-0 1-1\\n")
if "--model-dir" in a:
    os.makedirs(a[a.index("--model-dir") + 1], exist_ok=True)
    json.dump({{"config": {{}}, "times": {{}}}}, open(os.path.join(a[a.index("--model-dir") + 1], "manifest.json"), "w"))
"""


def test_every_aligner_gets_the_threads_whatever_the_callers_omp_setting(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("eflomal-align", "hmm-nmt-align-corpus"):
        (bin_dir / tool).write_text(_FAKE.format(python=sys.executable, log=str(tmp_path / "called.")))
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setattr(ab, "_tool", lambda name: str(bin_dir / name))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a shell that pins its own jobs to one thread
    (tmp_path / "s").write_text("a\na b\n")
    (tmp_path / "t").write_text("x\nx y\n")
    (tmp_path / "g").write_text("0-0\n0-0 1-1\n")
    args = ["--name", "x", "--work", str(tmp_path / "w"), "--gold-src", str(tmp_path / "s"), "--gold-tgt",
            str(tmp_path / "t"), "--gold", str(tmp_path / "g"), "--dev-pairs", "1", "--seeds", "1",
            "--eflomal-runs", "1", "--threads", "3", "--results", str(tmp_path / "r.json")]
    assert ab.main(args) == 0
    eflomal = json.load(open(tmp_path / "called.eflomal-align"))
    hmm = json.load(open(tmp_path / "called.hmm-nmt-align-corpus"))
    assert eflomal["omp"] == "3"
    assert hmm["argv"][hmm["argv"].index("--threads") + 1] == "3"
    assert json.load(open(tmp_path / "r.json"))["threads"] == 3
    with pytest.raises(SystemExit, match="--threads must be at least 1"):
        ab.main([*args[:-4], "--threads", "0"])
