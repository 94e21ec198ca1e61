"""hmm-nmt-align-corpus for real on a tiny corpus: training both directions, alignment, reuse, bad input."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--max-update", "6", "--warmup-updates", "2", "--merges", "30", "--embed-dim", "16", "--ffn-dim", "32",
        "--layers", "1", "--heads", "2", "--threads", "2", "--guide-updates", "8", "--no-progress"]


def corpus_cmd(*args):
    return [sys.executable, "-c", "import sys; from hmm_nmt_align.corpus import main; sys.exit(main())", *args]


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


def run(cwd, *args):
    env = _env()
    return subprocess.run(corpus_cmd(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    work = tmp_path_factory.mktemp("corpus")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(work / "raw"),
                    "--train", "120", "--valid", "5", "--test", "5"], check=True, capture_output=True)
    src = (work / "raw" / "train.src").read_text().splitlines()
    tgt = (work / "raw" / "train.tgt").read_text().splitlines()
    src[3] = ""  # an empty side: an empty output line, never a shifted file
    (work / "c.src").write_text("\n".join(src) + "\n")
    (work / "c.tgt").write_text("\n".join(tgt) + "\n")
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "-o", "c.align", "-f", "c.fwd", "-r", "c.rev",
            "--scores", "c.scores", *TINY)
    assert p.returncode == 0, p.stderr[-3000:]
    return work, src, tgt, p


def _links(path):
    return _links_text(path.read_text())


def _links_text(text):
    return [[tuple(map(int, x.split("-"))) for x in line.split()] for line in text.split("\n")[:-1]]


@pytest.mark.slow
def test_the_whole_command_writes_line_parallel_word_links_and_a_model_dir(made):
    work, src, tgt, p = made
    assert "training the first-order direct HMM, both directions (6 updates each, 1 thread each)" in p.stderr
    for name in ("c.align", "c.fwd", "c.rev"):
        links = _links(work / name)
        assert len(links) == len(src) and links[3] == []
        assert all(0 <= i < len(src[k].split()) and 0 <= j < len(tgt[k].split()) for k, sent in enumerate(links)
                   for i, j in sent), name
    assert sum(map(len, _links(work / "c.fwd"))) > 0  # argmax-free threshold links may be few; a direction is not
    manifest = json.loads((work / "m" / "manifest.json").read_text())
    assert {"codes", "bin", "train.fwd", "train.rev", "links", "guide.fwd", "guide.rev"} <= set(manifest["done"])
    assert manifest["done"]["train.fwd"]["updates"] == 6 and manifest["done"]["train.rev"]["updates"] == 6
    # the second pass: 8 updates (an epoch of the tiny corpus: every link is seen) from the first pass's checkpoint, toward the links of the training pairs
    assert "training on toward the first pass's links (second pass), both directions (8 updates each" in p.stderr
    assert manifest["done"]["guide.fwd"]["updates"] == 8 and manifest["done"]["guide.rev"]["updates"] == 8
    assert manifest["done"]["links"]["pairs"] == manifest["done"]["bin"]["train_pairs"]
    assert manifest["done"]["links"]["links"] > 0
    for d in ("fwd", "rev"):
        log = (work / "m" / f"{d}.guided" / "train.log").read_text()
        assert "loading pretrained model from" in log and f"{d}/checkpoint_last.pt" in log
        assert '"train_guide": "' in log  # -log p(links | E, F) logged: the links were loaded and used
    for f in ("codes", "bin/dict.src.txt", "fwd/checkpoint_last.pt", "rev/checkpoint_last.pt"):
        assert (work / "m" / f).exists(), f


@pytest.mark.slow
def test_scores_are_line_parallel_to_the_merged_links_and_pass_its_threshold(made):
    work, src, _, _ = made
    links = _links(work / "c.align")
    scores = [[float(x) for x in line.split()] for line in (work / "c.scores").read_text().split("\n")[:-1]]
    assert [len(s) for s in scores] == [len(sent) for sent in links] and len(scores) == len(src)
    flat = [x for s in scores for x in s]
    assert flat and all(0.5 < x <= 1.0 for x in flat)  # mean of two posteriors, kept when above threshold:0.5


def _extract(cwd, *args):
    env = _env()
    cmd = [sys.executable, "-c", "import sys; from hmm_nmt_align.extract import main; sys.exit(main())", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_hmm_nmt_align_model_dir_aligns_text_as_the_corpus_command_does(made, tmp_path):
    work, _, _, _ = made
    p = _extract(tmp_path, "--model-dir", str(work / "m"), "--src-text", str(work / "c.src"), "--tgt-text",
                 str(work / "c.tgt"), "-o", "x.align", "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "x.align").read_text() == (work / "c.align").read_text()
    p = _extract(tmp_path, "--model-dir", str(work / "m"), "--path", str(work / "m" / "fwd" / "checkpoint_last.pt"),
                 "--src-text", str(work / "c.src"), "--tgt-text", str(work / "c.tgt"), "-o", "y.align")
    assert p.returncode == 2 and "drop --path" in p.stderr and not (tmp_path / "y.align").exists()
    p = _extract(tmp_path, "--model-dir", str(tmp_path), "--src-text", str(work / "c.src"), "--tgt-text",
                 str(work / "c.tgt"), "-o", "y.align")
    assert p.returncode == 2 and "not a finished model directory" in p.stderr and "Traceback" not in p.stderr


def test_worker_processes_align_as_one_process_does(made, tmp_path):
    """--threads 2 on a CPU: two worker processes share each chunk's pairs in length-sorted shares; every output
    (merged links, scores, each direction) equals the one-process run's, line for line. The corpus is repeated
    past one share (pool.SHARE pairs), with an empty side and a line too long for the model among them."""
    work, src, tgt, _ = made
    copies = 5
    long_src = " ".join(["w"] * 3000)  # past the model's positions: left empty, named on stderr
    (tmp_path / "s").write_text("\n".join(src * copies + [long_src]) + "\n")
    (tmp_path / "t").write_text("\n".join(tgt * copies + ["x"]) + "\n")
    outs = {}
    # one thread; two worker processes (the default for --threads 2); two threads of one process, a direction each
    for name, extra in (("1", ["--threads", "1"]), ("2", ["--threads", "2"]),
                        ("2t", ["--threads", "2", "--align-workers", "0"])):
        p = run(tmp_path, "-s", "s", "-t", "t", "--model-dir", str(work / "m"), "--align-only", "-o", f"{name}.align",
                "-f", f"{name}.fwd", "-r", f"{name}.rev", "--scores", f"{name}.scores", *extra, "--no-progress")
        assert p.returncode == 0, p.stderr[-2000:]
        outs[name] = {ext: (tmp_path / f"{name}.{ext}").read_text() for ext in ("align", "fwd", "rev", "scores")}
        assert f"s:{len(src) * copies + 1}: " in p.stderr and "1 too long for the model" in p.stderr
    assert outs["1"] == outs["2"] == outs["2t"]
    lines = outs["2"]["align"].split("\n")[:-1]
    assert len(lines) == len(src) * copies + 1 and lines[3] == "" and lines[-1] == ""
    assert lines[:len(src)] == (work / "c.align").read_text().split("\n")[:-1]


def test_the_align_flops_benchmark_times_the_stage_on_a_real_model_directory(made, tmp_path):
    """benchmarks/align_flops.py runs the stage's own _align_chunk on the model directory: its merged links are
    the command's, and the report holds the measured time and the FLOP count."""
    work, src, _, _ = made
    out, links = tmp_path / "flops.json", tmp_path / "flops.align"
    p = subprocess.run([sys.executable, "-m", "benchmarks.align_flops", "--model-dir", str(work / "m"), "--src-text",
                        str(work / "c.src"), "--tgt-text", str(work / "c.tgt"), "--lines", str(len(src)),
                        "--links-out", str(links), "--out", str(out)],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert links.read_text() == (work / "c.align").read_text()
    doc = json.loads(out.read_text())
    assert doc["lines"] == len(src) and doc["directions"]["fwd"]["pairs"] == len(src) - 1  # one empty side
    assert doc["s_per_pair"] > 0 and doc["executed_flops_per_pair"] >= doc["needed_flops_per_pair"] > 0


def test_the_heap_benchmark_trains_both_directions_under_both_settings(made, tmp_path):
    """benchmarks/heap.py runs the model directory's own trainers, both directions side by side, with glibc's
    default heap and with hmm_nmt_align.base.heap's; scripts/alignment_tables.py renders its results file."""
    work, _, _, _ = made
    out = tmp_path / "heap.json"
    p = subprocess.run([sys.executable, "-m", "benchmarks.heap", "--model-dir", str(work / "m"), "--updates", "3",
                        "--repeats", "2", "--out", str(out)], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [(r["round"], r["heap"]) for r in doc["runs"]] == [(1, "default"), (1, "kept"), (2, "kept"), (2, "default")]
    for r in doc["runs"]:
        assert [d["direction"] for d in r["directions"]] == ["fwd", "rev"]
        assert all(d["updates"] == 3 and d["s_per_update"] > 0 and d["max_rss_mb"] > 0 for d in r["directions"])
    assert doc["summary"]["speed-up"] > 0 and "| glibc's default |" in p.stdout
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import alignment_tables
    finally:
        sys.path.pop(0)
    assert alignment_tables.table(doc) == p.stdout


@pytest.mark.slow
def test_model_dirs_of_one_corpus_align_as_an_ensemble(made, tmp_path):
    """--model-dir A:B averages the two models' posteriors in each direction: two copies of one model give its
    own links, and --path A:B does the same; a model directory of other BPE codes is refused in one line."""
    work, _, _, _ = made
    import shutil

    shutil.copytree(work / "m", tmp_path / "m2")
    text = ["--src-text", str(work / "c.src"), "--tgt-text", str(work / "c.tgt"), "--no-progress"]
    p = _extract(tmp_path, "--model-dir", f"{work / 'm'}{os.pathsep}{tmp_path / 'm2'}", *text, "-o", "e.align")
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "e.align").read_text() == (work / "c.align").read_text()
    ck = f"{work / 'm' / 'fwd.guided' / 'checkpoint_last.pt'}{os.pathsep}{tmp_path / 'm2' / 'fwd.guided' / 'checkpoint_last.pt'}"
    p = _extract(tmp_path, "--path", ck, "--data", str(work / "m" / "bin"), "--bpe-codes", str(work / "m" / "codes"),
                 "--method", "posterior", "--links", "threshold:0.5", "--pool", "words", *text, "-o", "f.align")
    assert p.returncode == 0, p.stderr[-2000:]
    assert _links(tmp_path / "f.align") == [sorted(x) for x in _links(work / "c.fwd")]
    (tmp_path / "m2" / "codes").write_text((tmp_path / "m2" / "codes").read_text() + "x y\n")
    p = _extract(tmp_path, "--model-dir", f"{work / 'm'}{os.pathsep}{tmp_path / 'm2'}", *text, "-o", "g.align")
    assert p.returncode == 2 and "have different codes" in p.stderr and not (tmp_path / "g.align").exists()
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_seeds_train_an_ensemble_equal_to_separate_seeds_and_a_finished_model_grows(made, tmp_path):
    """--seeds 2 trains fwd.2/rev.2 with seed 2 beside fwd/rev: its first pass equals two one-seed directories
    (seeds 1 and 2) as one ensemble; its second pass follows the links of that ensemble, and aligns as the two
    second-pass checkpoints do; rerunning a finished one-seed directory with --seeds 2 trains only the new seed's
    first pass, then makes the links and both second passes again, to the same links; fewer seeds are refused."""
    work, _, _, _ = made
    import shutil

    both = ["-s", "c.src", "-t", "c.tgt"]
    p = run(work, *both, "--model-dir", str(tmp_path / "s2"), "--seed", "2", "-o", str(tmp_path / "s2.align"), *TINY)
    assert p.returncode == 0, p.stderr[-2000:]
    p = run(work, *both, "--model-dir", str(tmp_path / "e"), "--seeds", "2", "-o", str(tmp_path / "e.align"),
            "-f", str(tmp_path / "e.fwd"), *TINY)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "training the first-order direct HMM, seeds 1-2, both directions (6 updates each, 1 thread each, " \
           "2 at a time)" in p.stderr
    assert "(second pass), seeds 1-2, both directions (8 updates each" in p.stderr
    manifest = json.loads((tmp_path / "e" / "manifest.json").read_text())
    assert manifest["config"]["seeds"] == 2 and manifest["done"]["links"]["seeds"] == 2
    if not manifest["done"]["links"]["links"]:  # two 6-update models may agree on nothing: trained on without
        assert "warning: the first pass agreed on no link" in p.stderr
    assert {"train.fwd", "train.rev", "train.fwd.2", "train.rev.2", "guide.fwd.2", "guide.rev.2"} <= set(manifest["done"])
    assert "'seed': 2" in (tmp_path / "e" / "fwd.2" / "train.log").read_text()
    text = ["--src-text", str(work / "c.src"), "--tgt-text", str(work / "c.tgt"), "--no-progress"]

    def forward(ckpts, folder, out):  # the forward posteriors' threshold links of an ensemble of checkpoints
        p = _extract(tmp_path, "--path", os.pathsep.join(map(str, ckpts)), "--data", str(folder / "bin"),
                     "--bpe-codes", str(folder / "codes"), "--method", "posterior", "--links", "threshold:0.5",
                     "--pool", "words", *text, "-o", out)
        assert p.returncode == 0, p.stderr[-2000:]
        return (tmp_path / out).read_text()

    first = [tmp_path / "e" / d / "checkpoint_last.pt" for d in ("fwd", "fwd.2")]
    apart = [work / "m" / "fwd" / "checkpoint_last.pt", tmp_path / "s2" / "fwd" / "checkpoint_last.pt"]
    assert forward(first, tmp_path / "e", "a.align") == forward(apart, work / "m", "b.align")
    # the -f file is the ensemble's forward direction: the two second-pass forward checkpoints as one --path
    second = [tmp_path / "e" / d / "checkpoint_last.pt" for d in ("fwd.guided", "fwd.2.guided")]
    assert _links(tmp_path / "e.fwd") == _links_text(forward(second, tmp_path / "e", "f.align"))
    ensemble = (tmp_path / "e.align").read_text()
    assert ensemble not in ((work / "c.align").read_text(), (tmp_path / "s2.align").read_text())  # not one member
    p = _extract(tmp_path, "--model-dir", str(tmp_path / "e"), *text, "-o", "dir.align")
    assert p.returncode == 0 and (tmp_path / "dir.align").read_text() == ensemble
    # a finished one-seed directory grows: only seed 2's first pass is trained
    shutil.copytree(work / "m", tmp_path / "g")
    before = (tmp_path / "g" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns
    p = run(work, *both, "--model-dir", str(tmp_path / "g"), "--seeds", "2", "-o", str(tmp_path / "g.align"), *TINY)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "direct HMM, seed 2, both directions" in p.stderr and "(second pass), seeds 1-2, both" in p.stderr
    assert (tmp_path / "g" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns == before
    assert (tmp_path / "g.align").read_text() == ensemble
    p = run(work, *both, "--model-dir", str(tmp_path / "g"), "-o", str(tmp_path / "h.align"), *TINY)
    assert p.returncode == 2 and "(seeds)" in p.stderr and not (tmp_path / "h.align").exists()


@pytest.mark.slow
def test_a_second_pass_shorter_than_the_corpus_trains_on_a_sample_of_it(made, tmp_path):
    """4 updates of 256 tokens cannot see the 120 pairs: the links and the second pass are a sample's, which
    fairseq-train reads from guide-bin/ with its links; the outputs are the whole corpus's."""
    from fairseq.data import data_utils

    work, src, _, _ = made
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "s.align"),
            *[x if x != "8" else "4" for x in TINY], "--max-tokens", "256")
    assert p.returncode == 0, p.stderr[-2000:]
    done = json.loads((tmp_path / "m" / "manifest.json").read_text())["done"]
    n = done["links"]["sample"]
    assert 0 < n < done["bin"]["train_pairs"] and f"aligning {n} of the {done['bin']['train_pairs']} training" in p.stderr
    g = tmp_path / "m" / "guide-bin"
    assert len(data_utils.load_indexed_dataset(str(g / "train.align.src-tgt"), None, "mmap")) == n
    for name in ("fwd", "rev"):
        log = (tmp_path / "m" / f"{name}.guided" / "train.log").read_text()
        assert f"loaded {n} examples from: {g}" in log and done[f"guide.{name}"]["updates"] == 4
    assert len((tmp_path / "s.align").read_text().split("\n")) == len(src) + 1


@pytest.mark.slow
def test_another_second_pass_on_a_finished_model_remakes_only_the_second_pass(made, tmp_path):
    """--guide-updates 0 on a finished directory drops the second pass and aligns with the first (as the forward
    first-pass checkpoint does alone); asking for the second pass again makes the same links and checkpoints."""
    work, _, _, _ = made
    import shutil

    shutil.copytree(work / "m", tmp_path / "m")
    both = ["-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m")]
    before = (tmp_path / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns
    one_pass = [x if x != "8" else "0" for x in TINY]
    p = run(work, *both, "-o", str(tmp_path / "one.align"), "-f", str(tmp_path / "one.fwd"), *one_pass)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "training" not in p.stderr and not (tmp_path / "m" / "fwd.guided").exists()
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["config"]["guide_updates"] == 0 and "links" not in manifest["done"]
    assert not any(n.startswith("train.align") for n in os.listdir(tmp_path / "m" / "bin"))
    p = _extract(tmp_path, "--path", str(tmp_path / "m" / "fwd" / "checkpoint_last.pt"), "--data",
                 str(tmp_path / "m" / "bin"), "--bpe-codes", str(tmp_path / "m" / "codes"), "--method", "posterior",
                 "--links", "threshold:0.5", "--pool", "words", "--src-text", str(work / "c.src"), "--tgt-text",
                 str(work / "c.tgt"), "-o", "p1.fwd", "--no-progress")
    assert p.returncode == 0 and _links(tmp_path / "p1.fwd") == [sorted(x) for x in _links(tmp_path / "one.fwd")]
    p = run(work, *both, "-o", str(tmp_path / "two.align"), *TINY)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "direct HMM" not in p.stderr and "(second pass), both directions" in p.stderr
    assert (tmp_path / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns == before
    assert (tmp_path / "two.align").read_text() == (work / "c.align").read_text()


@pytest.mark.slow
def test_a_model_dir_from_before_the_newer_options_reads_as_their_old_settings(made, tmp_path):
    """A manifest written before --lexicon, --lr-schedule, --label-smoothing and the second pass existed means what
    the command trained then (softmax, inverse-sqrt, 0.1, one pass): the same settings resume it and align with the
    first-pass checkpoints, today's defaults are refused."""
    work, _, _, _ = made
    import shutil

    shutil.copytree(work / "m", tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    for key in ("lexicon", "lr_schedule", "label_smoothing", "guide_updates", "guide_weight"):
        del manifest["config"][key]
    for key in ("links", "guide.fwd", "guide.rev"):
        del manifest["done"][key]
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(manifest))
    before = (tmp_path / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns
    old = ["--lexicon", "softmax", "--lr-schedule", "inverse-sqrt", "--label-smoothing", "0.1", "--guide-updates", "0",
           "--guide-weight", "1"]
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "o.align"),
            *TINY, *old)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns == before
    assert "training" not in p.stderr
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "o.align"),
            *TINY)
    assert p.returncode == 2 and "(lexicon, lr_schedule, guide_updates, guide_weight)" in p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["fwd", "rev"])
def test_each_direction_alone_equals_that_model_aligning_on_its_own(made, tmp_path, direction):
    """-f and -r come from the same pass as -o (both directions side by side): each equals hmm-nmt-align
    with that one (second-pass) checkpoint, the reverse one run target-to-source and written source-target."""
    work, _, _, _ = made
    m = work / "m"
    src, tgt = (work / "c.src", work / "c.tgt") if direction == "fwd" else (work / "c.tgt", work / "c.src")
    p = _extract(tmp_path, "--path", str(m / f"{direction}.guided" / "checkpoint_last.pt"), "--data", str(m / "bin"),
                 "--bpe-codes", str(m / "codes"), "--src-text", str(src), "--tgt-text", str(tgt), "--method",
                 "posterior", "--links", "threshold:0.5", "--pool", "words", "-o", "one.align", "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    alone = _links(tmp_path / "one.align")
    if direction == "rev":
        alone = [sorted((i, j) for j, i in sent) for sent in alone]
    assert alone == [sorted(sent) for sent in _links(work / f"c.{direction}")]
    assert sum(map(len, alone)) > 0


@pytest.mark.slow
@pytest.mark.parametrize("options", [{"lexicon": "class", "lr_schedule": "linear", "label_smoothing": 0.0},
                                     {"lexicon": "separable", "target_context": "both", "precision": "bf16"}])
def test_the_model_options_train_and_align(made, tmp_path, options):
    """Each model option reaches both checkpoints and the manifest; --precision bf16 trains and aligns under
    autocast (one run with the others: each real training costs the suite time)."""
    work, src, _, _ = made
    flags = [x for k, v in options.items() for x in ("--" + k.replace("_", "-"), str(v))]
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "c.align"),
            *TINY, *flags)
    assert p.returncode == 0, p.stderr[-2000:]
    from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    for d in ("fwd", "rev"):
        ckpt = load_checkpoint_state(tmp_path / "m" / d / "checkpoint_last.pt")
        cfg = ckpt["cfg"]
        for k, v in options.items():
            if k == "lr_schedule":  # linear: decays to 0 at the last update
                assert (cfg["lr_scheduler"]["_name"], cfg["lr_scheduler"]["total_num_update"]) == ("polynomial_decay", 6)
                assert ckpt["last_optimizer_state"]["param_groups"][0]["lr"] == 0 and manifest["config"][k] == v
            elif k == "label_smoothing":
                assert cfg["criterion"]["label_smoothing"] == v and manifest["config"][k] == v
            elif k != "precision":
                assert getattr(cfg["model"], k) == v and manifest["config"][k] == v
        bf16 = "--bf16 on CPU: bfloat16 autocast" in (tmp_path / "m" / d / "train.log").read_text()
        assert bf16 == (options.get("precision") == "bf16")
        assert manifest["done"][f"train.{d}"]["precision"] == options.get("precision", "fp32")
    links = _links(tmp_path / "c.align")
    assert len(links) == len(src) and links[3] == [] and sum(map(len, links)) > 0


@pytest.mark.slow
def test_rerun_reuses_the_model_and_align_only_aligns_new_text_without_training(made):
    work, src, tgt, _ = made
    before = (work / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "-o", "again.align", *TINY)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (work / "again.align").read_text() == (work / "c.align").read_text()  # same model, same links
    assert (work / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns == before  # nothing retrained
    assert "training" not in p.stderr and "aligning" in p.stderr  # and it does not say it trains
    # new sentences, fast_align's "src ||| tgt" input, the finished model reused with no training
    (work / "new.txt").write_text("".join(f"{s} ||| {t}\n" for s, t in zip(src[:7], tgt[:7])))
    p = run(work, "-i", "new.txt", "--model-dir", "m", "--align-only", "-o", "new.align", "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    assert (work / "new.align").read_text().split("\n")[:7] == (work / "c.align").read_text().split("\n")[:7]
    assert (work / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns == before
    # another corpus or setting on the same model directory is refused, not silently mixed
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "-o", "x.align", *TINY[:-1], "--merges", "40")
    assert p.returncode == 2 and "made from another corpus or settings (merges)" in p.stderr
    assert not (work / "x.align").exists()


@pytest.mark.slow
def test_continue_trains_the_model_further(made, tmp_path):
    work, _, _, _ = made
    import shutil

    shutil.copytree(work / "m", tmp_path / "m")
    # the model's shape comes from its manifest, whatever this command line says
    other = [x if x != "16" else "24" for x in TINY]
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "--continue",
            "-o", str(tmp_path / "more.align"), *other)
    assert p.returncode == 0, p.stderr[-2000:]
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["done"]["train.fwd"]["updates"] == 12 and manifest["continued"][0]["updates"] == 6
    # the first pass changed: its links and the second pass are made again, from the continued checkpoints
    assert "(second pass), both directions (8 updates each" in p.stderr
    assert manifest["done"]["guide.fwd"]["at"] > manifest["done"]["train.fwd"]["at"]
    assert manifest["done"]["links"]["at"] >= manifest["done"]["train.rev"]["at"]


@pytest.mark.slow
def test_a_time_limit_stops_each_direction_annealed_and_continue_adds_to_what_each_has(made, tmp_path):
    """--time-limit: both directions stop on fairseq's clock long before --max-update, with the learning rate
    decayed by budget_linear's clock; the same command then trains nothing more; --continue trains each
    direction --max-update more than it has, and a time limit there starts at the checkpoint's hours."""
    work, _, _, _ = made
    from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

    limited = [*TINY[:1], "1000", *TINY[2:3], "1", *TINY[4:], "--time-limit", "8s"]
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "a"),
            *limited)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "(1000 updates each, at most 8 s, 1 thread each)" in p.stderr
    done = json.loads((tmp_path / "m" / "manifest.json").read_text())["done"]
    for d in ("fwd", "rev"):
        assert 2 <= done[f"train.{d}"]["updates"] < 1000 and done[f"train.{d}"]["max_update"] == 1000
        ckpt = load_checkpoint_state(tmp_path / "m" / d / "checkpoint_last.pt")
        sched = ckpt["cfg"]["lr_scheduler"]
        assert (sched["_name"], sched["budget_hours"], ckpt["cfg"]["optimization"]["stop_time_hours"]) == \
            ("budget_linear", pytest.approx(8 / 3600), pytest.approx(8 / 3600))
        lr = ckpt["last_optimizer_state"]["param_groups"][0]["lr"]
        by_updates = 2e-3 * (1 - (done[f"train.{d}"]["updates"] - 1) / 999)
        assert lr < 0.5 * by_updates  # the clock, not the update count, decayed it
        assert ckpt["optimizer_history"][-1]["lr_scheduler_state"]["seconds"] > 4.0
    before = (tmp_path / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "a"),
            *limited)
    assert p.returncode == 0 and "training" not in p.stderr
    assert (tmp_path / "m" / "fwd" / "checkpoint_last.pt").stat().st_mtime_ns == before
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "--continue",
            "-o", str(tmp_path / "b"), *limited)
    assert p.returncode == 0, p.stderr[-2000:]
    again = json.loads((tmp_path / "m" / "manifest.json").read_text())["done"]
    for d in ("fwd", "rev"):
        assert done[f"train.{d}"]["updates"] < again[f"train.{d}"]["updates"] < done[f"train.{d}"]["updates"] + 1000
        cfg = load_checkpoint_state(tmp_path / "m" / d / "checkpoint_last.pt")["cfg"]
        start = cfg["lr_scheduler"]["budget_start_hours"]  # the clock of the checkpoint it continued
        assert start * 3600 > 4.0 and cfg["optimization"]["stop_time_hours"] * 3600 > 8.0 + 4.0
    p = run(work, "-s", "c.src", "-t", "c.tgt", "--model-dir", str(tmp_path / "m"), "--continue",
            "-o", str(tmp_path / "c"), *TINY[:1], "2", *TINY[2:])
    assert p.returncode == 0, p.stderr[-2000:]
    last = json.loads((tmp_path / "m" / "manifest.json").read_text())["done"]
    for d in ("fwd", "rev"):  # each direction 2 more than it had, however many that was
        assert last[f"train.{d}"]["updates"] == again[f"train.{d}"]["updates"] + 2


@pytest.mark.parametrize("content,args,message", [
    ({"a.src": "x y\nz\n", "a.tgt": "x\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o"], "-s a.src has 2 lines but -t a.tgt has 1"),
    ({"a.src": "x y\n\xff\n", "a.tgt": "x\ny\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o"], "a.src:2: not UTF-8"),
    ({"a.txt": "x ||| y\nno separator\n"}, ["-i", "a.txt", "-o", "o"], "a.txt:2: no '|||'"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "a.src"], "-o a.src is the input -s"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "no/such/dir/o"], "does not exist"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--links", "best"],
     "--links: unknown link decision"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-o", "o"], "give -s SRC -t TGT, or -i FILE"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--align-only"], "no finished model"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-f", "o", "--scores", "s"], "give -o too"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--max-update", "0"],
     "argument --max-update: must be >= 1, got 0"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--label-smoothing", "1"],
     "--label-smoothing must be in [0, 1), got 1.0"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--guide-weight", "-1"],
     "--guide-weight must be a number >= 0, got -1.0"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--guide-updates", "-2"],
     "argument --guide-updates: must be >= 0, got -2"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--time-limit", "0m"],
     "argument --time-limit: must be > 0, got '0m'"),
    ({"a.src": "x\n", "a.tgt": "y\n"}, ["-s", "a.src", "-t", "a.tgt", "-o", "o", "--time-limit", "an hour"],
     "argument --time-limit: hours (1.5), or minutes (90m) or seconds (5400s), got 'an hour'"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, content, args, message):
    for name, text in content.items():
        (tmp_path / name).write_bytes(text.encode("latin-1"))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    p = run(tmp_path, *args, "--model-dir", "m")
    assert p.returncode == 2 and message in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert "Traceback" not in p.stderr and len(errors) == 1
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # inputs intact, no output
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_during_training_then_the_same_command_resumes(made, tmp_path, how):
    """Ctrl-C (SIGINT to the foreground group) or a scheduler's SIGTERM to the command alone: the trainers stop
    too, nothing is written, and the same command resumes from the last checkpoint."""
    import signal
    import time

    work, _, _, _ = made
    env = _env()
    args = ["-s", str(work / "c.src"), "-t", str(work / "c.tgt"), "--model-dir", str(tmp_path / "m"),
            "-o", str(tmp_path / "out.align"), *TINY[:1], "40", *TINY[2:]]
    # SIGINT as at a terminal: a runner started in the background ignores it, and so would the command
    proc = subprocess.Popen(corpus_cmd(*args), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ckpt = tmp_path / "m" / "fwd" / "checkpoint_last.pt"
    deadline = time.time() + 600
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    log = tmp_path / "m" / "fwd" / "train.log"
    size = log.stat().st_size
    time.sleep(3)
    assert log.stat().st_size == size  # no trainer left running
    assert proc.returncode == 130 and "interrupted; run the same command again to continue" in err, err[-2000:]
    assert "Traceback" not in err and not (tmp_path / "out.align").exists()
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert "train.fwd" not in manifest["done"]
    p = run(tmp_path, *args)
    assert p.returncode == 0, p.stderr[-2000:]
    import re

    resumed = re.findall(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)",
                         (tmp_path / "m" / "fwd" / "train.log").read_text())
    assert len(resumed) == 1 and 0 < int(resumed[0]) < 40  # from where it stopped, not from update 0
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["done"]["train.fwd"]["updates"] == 40 and manifest["done"]["train.rev"]["updates"] == 40
    assert len((tmp_path / "out.align").read_text().split("\n")) - 1 == len((work / "c.src").read_text().splitlines())


@pytest.mark.slow
def test_sigterm_during_alignment_leaves_no_output_and_no_temporary_file(made, tmp_path):
    """A scheduler's SIGTERM while the pairs are being aligned (the two directions in their threads): exit 130
    with the one-line note, no -o/-f/--scores file, and none of their temporary files left beside them."""
    import signal
    import time

    work, src, tgt, _ = made
    many = 500  # copies of the corpus: alignment lasts long enough to be interrupted in the middle
    (tmp_path / "big.txt").write_text("".join(f"{s} ||| {t}\n" for s, t in zip(src, tgt) if s and t) * many)
    env = _env()
    proc = subprocess.Popen(corpus_cmd("-i", "big.txt", "--model-dir", str(work / "m"), "--align-only", "-o", "o.align",
                                       "-f", "o.fwd", "--scores", "o.scores", "--threads", "2", "--no-progress"),
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    while not any("aligning" in line for line in seen) and proc.poll() is None:
        seen.append(proc.stderr.readline())
    assert "aligning" in seen[-1], seen
    time.sleep(1.0)
    assert proc.poll() is None, "alignment finished before it could be interrupted: raise `many`"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "interrupted; run the same command again to continue" in err, err[-2000:]
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt"]


@pytest.mark.parametrize("gpus,threads,pending,width", [(0, 2, 2, 2), (0, 2, 6, 2), (0, 16, 6, 6), (0, 1, 2, 2),
                                                        (0, 4, 1, 1), (1, 16, 6, 2), (2, 2, 6, 2), (4, 2, 6, 4)])
def test_trainers_side_by_side(monkeypatch, gpus, threads, pending, width):
    """How many trainers --seeds runs at once: one per GPU with two or more, two on one GPU, else one per
    thread, never fewer than a seed's two directions nor more than are pending."""
    import torch

    from hmm_nmt_align.corpus.cli import build_parser
    from hmm_nmt_align.corpus.train import _width

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    opts = build_parser().parse_args(["-s", "a", "-t", "b", "--model-dir", "m", "--threads", str(threads)])
    assert _width(opts, pending) == width


@pytest.mark.parametrize("gpus,visible,expected", [(0, None, [None, None]), (1, None, [None, None]),
                                                   (2, None, ["0", "1"]), (4, "2,3", ["2", "3"])])
def test_two_gpus_or_more_train_one_direction_each(monkeypatch, gpus, visible, expected):
    """With two GPUs or more each direction's trainer sees one (the k-th the user made visible); with fewer,
    or --cpu, the environment is left as it is."""
    import torch

    from hmm_nmt_align.corpus.cli import build_parser
    from hmm_nmt_align.corpus.train import _direction_env

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    for cpu in (False, True):
        opts = build_parser().parse_args(["-s", "a", "-t", "b", "--model-dir", "m"] + (["--cpu"] if cpu else []))
        got = [_direction_env(opts, k, env).get("CUDA_VISIBLE_DEVICES") for k in (0, 1)]
        assert got == ([visible, visible] if cpu or gpus < 2 else expected)


def test_a_signal_while_the_outputs_are_created_or_renamed_waits_for_them():
    """Ctrl-C / SIGTERM (the handler) inside a held block is raised only where signals are allowed again:
    at the start of the aligning block inside it, or after the held block (the outputs renamed)."""
    import signal as sig

    from hmm_nmt_align.corpus.align import _signals_held
    from hmm_nmt_align.corpus.cli import _terminated

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with _signals_held():
            _terminated(sig.SIGTERM, None)
            steps.append("created")
            with _signals_held(False):
                steps.append("aligned")  # not reached: the deferred signal is raised on entry
    assert steps == ["created"]
    with pytest.raises(KeyboardInterrupt):
        with _signals_held():
            with _signals_held(False):
                steps.append("aligned")
            _terminated(sig.SIGINT, None)
            steps.append("renamed")
    assert steps == ["created", "aligned", "renamed"]
    with _signals_held():
        pass  # nothing pending any more
    with pytest.raises(KeyboardInterrupt):
        _terminated(sig.SIGTERM, None)  # outside: at once
