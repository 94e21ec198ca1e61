"""A model directory of hmm-nmt-align-corpus nobody can break: no code run from its checkpoints or manifest, no
output inside it, one run at a time, trainers that die with the command, every bad option refused before the
first stage, and one line (exit 2) for every error. Fast: the pipeline runs with the fakes of
test_corpus_stages (no training) unless a test is marked slow."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from test_corpus_stages import PAIRS, SETTINGS, FakeLoader, FakeTrainer, align_corpus, corpus, fake_preprocess

from hmm_nmt_align.base.dirlock import DirectoryBusy, locked
from hmm_nmt_align.corpus import CorpusError, ModelDir
from hmm_nmt_align.corpus.align import _load_direction
from hmm_nmt_align.corpus.cli import build_parser, main, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(cwd, *args, timeout=300):
    """The real command line in a child process."""
    return subprocess.run([sys.executable, "-m", "hmm_nmt_align.corpus", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))


def one_line_error(p, message):
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.count("error:") == 1 and message in p.stderr, p.stderr


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished model directory (made with the fakes) and its corpus."""
    work = tmp_path_factory.mktemp("safety")
    corpus(work)
    align_corpus(work)
    return work


@pytest.fixture
def copy(finished, tmp_path):
    """A copy of the finished model directory and corpus to break."""
    for name in ("c.src", "c.tgt"):
        shutil.copy(finished / name, tmp_path / name)
    shutil.copytree(finished / "m", tmp_path / "m")
    return tmp_path


class Payload:
    """Unpickled, it would create the file ``marker``: a checkpoint from someone else."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def poison(path, marker):
    torch.save({"extra_state": {"previous_training_time": Payload(marker)}, "model": {}}, path)


def opts_for(work, *extra):
    w = str(work)
    return build_parser().parse_args(["-s", f"{w}/c.src", "-t", f"{w}/c.tgt", "--model-dir", f"{w}/m",
                                      "-o", f"{w}/c.align", *SETTINGS, *extra])


# ----------------------------------------------------------------------------------------------- code execution
def test_continue_refuses_a_checkpoint_with_a_payload_and_runs_none_of_it(copy):
    marker = copy / "ran"
    poison(copy / "m" / "fwd" / "checkpoint_last.pt", marker)
    with pytest.raises(CorpusError, match=r"fwd/checkpoint_last.pt"):
        run(opts_for(copy, "--continue"), launch=FakeTrainer(), preprocess=fake_preprocess, load=FakeLoader())
    assert not marker.exists()


@pytest.mark.parametrize("stage", ["fwd.guided", "fwd"])
def test_the_real_loader_refuses_a_payload_for_the_alignment_and_the_first_pass_links(copy, stage):
    """--align-only loads the second pass's checkpoints; more --seeds (or another second pass) first loads the
    first pass's to remake the links: both through the safe loader."""
    marker = copy / "ran"
    poison(copy / "m" / stage / "checkpoint_last.pt", marker)
    md = ModelDir(str(copy / "m"))
    with pytest.raises(CorpusError, match=f"--model-dir {copy / 'm'}: .*{stage}/checkpoint_last.pt"):
        _load_direction(md, ["fwd"], True, False, "guide" if stage.endswith("guided") else "train")
    assert not marker.exists()


def test_align_only_with_a_payload_is_one_line_exit_2(copy):
    marker = copy / "ran"
    poison(copy / "m" / "fwd.guided" / "checkpoint_last.pt", marker)  # the first one loaded
    p = cli(copy, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "--align-only", "-o", "a", "--no-progress")
    one_line_error(p, "fwd.guided/checkpoint_last.pt")
    assert not marker.exists() and not (copy / "a").exists()


@pytest.mark.parametrize("content", [b"", b"not a checkpoint\n", None])
def test_an_empty_text_or_missing_checkpoint_is_one_line_exit_2(copy, content):
    ck = copy / "m" / "fwd.guided" / "checkpoint_last.pt"
    if content is None:
        ck.unlink()
    else:
        ck.write_bytes(content)
    p = cli(copy, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "--align-only", "-o", "a", "--no-progress")
    one_line_error(p, "fwd.guided/checkpoint_last.pt")
    assert not (copy / "a").exists()


# ----------------------------------------------------------------------------------------------- lost data
@pytest.mark.parametrize("inside", ["m/manifest.json", "m/codes", "m/text/train.src", "m/preprocess.log", "m",
                                    "m/fwd/x.align", "m/new.align"])
@pytest.mark.parametrize("mode", [["--align-only"], []])
def test_no_output_may_fall_inside_the_model_directory(copy, inside, mode):
    before = {p: p.read_bytes() for p in (copy / "m").rglob("*") if p.is_file()}
    p = cli(copy, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", *mode, "-o", inside, "--no-progress")
    one_line_error(p, "inside --model-dir m")
    assert {p: p.read_bytes() for p in (copy / "m").rglob("*") if p.is_file()} == before


def test_hmm_nmt_align_refuses_an_output_inside_the_model_directory_too(copy):
    p = subprocess.run([sys.executable, "-m", "hmm_nmt_align.extract", "--model-dir", "m", "--src-text", "c.src",
                        "--tgt-text", "c.tgt", "-o", "m/manifest.json"], cwd=copy, capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert json.loads((copy / "m" / "manifest.json").read_text())["version"] == 1


@pytest.mark.parametrize("args,message", [
    (["-o", "folder"], "-o folder is a directory"),
    (["-o", "a", "--model-dir", "afile"], "--model-dir afile is a file"),
])
def test_a_folder_as_output_or_a_file_as_model_dir_is_refused_first(copy, args, message):
    (copy / "folder").mkdir()
    (copy / "afile").write_text("keep\n")
    p = cli(copy, "-s", "c.src", "-t", "c.tgt", *(["--model-dir", "m"] if "--model-dir" not in args else []), *args,
            "--align-only", "--no-progress")
    one_line_error(p, message)
    assert (copy / "afile").read_text() == "keep\n"


def test_a_symlinked_output_is_written_through(copy):
    (copy / "target.align").write_text("old\n")
    os.symlink("target.align", copy / "link.align")
    opts = opts_for(copy, "--align-only")
    opts.output = str(copy / "link.align")
    assert run(opts, launch=FakeTrainer(), preprocess=fake_preprocess, load=FakeLoader()) == 0
    assert os.path.islink(copy / "link.align") and os.readlink(copy / "link.align") == "target.align"
    lines = (copy / "target.align").read_text().splitlines()
    assert len(lines) == len(PAIRS) and lines[0] == "0-1 1-2 2-0"


# ----------------------------------------------------------------------------------------------- one run at a time
def test_a_second_run_is_refused_naming_the_holder(copy):
    with locked(str(copy / "m")):
        p = cli(copy, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "-o", "a", "--no-progress")
        one_line_error(p, f"--model-dir m is in use by pid {os.getpid()}")
        p = cli(copy, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "--align-only", "-o", "a", "--no-progress")
        one_line_error(p, f"in use by pid {os.getpid()}")  # a reader waits for no writer either
    assert not (copy / "a").exists()


def _hmm_nmt_align(cwd, *args):
    return subprocess.run([sys.executable, "-m", "hmm_nmt_align.extract", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_hmm_nmt_align_does_not_read_a_model_directory_while_it_trains(copy):
    with locked(str(copy / "m")):
        p = _hmm_nmt_align(copy, "--model-dir", "m", "--src-text", "c.src", "--tgt-text", "c.tgt", "-o", "a")
        one_line_error(p, f"--model-dir m is in use by pid {os.getpid()}")
    assert not (copy / "a").exists()


def test_hmm_nmt_align_answers_a_broken_manifest_in_one_line(copy):
    (copy / "m" / "manifest.json").write_text('{"version": 1, "config": []}')
    p = _hmm_nmt_align(copy, "--model-dir", "m", "--src-text", "c.src", "--tgt-text", "c.tgt", "-o", "a")
    one_line_error(p, "manifest.json: config must be a JSON object")


def test_readers_share_the_lock_and_a_writer_waits_for_them(tmp_path):
    with locked(str(tmp_path), exclusive=False), locked(str(tmp_path), exclusive=False):
        with pytest.raises(DirectoryBusy, match="in use by another run that reads it"):
            with locked(str(tmp_path)):
                pass
    with locked(str(tmp_path)):  # released
        pass


def test_a_lock_of_a_killed_run_is_taken_over(tmp_path):
    code = ("import sys, time; sys.path[:0] = sys.argv[2:]; from hmm_nmt_align.base.dirlock import locked\n"
            "with locked(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), ROOT, os.path.join(ROOT, "alignment")],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    with pytest.raises(DirectoryBusy, match=f"pid {child.pid}"):
        with locked(str(tmp_path)):
            pass
    child.send_signal(signal.SIGKILL)
    child.wait()
    with locked(str(tmp_path)):  # the kernel dropped the dead run's lock
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())


def test_trainers_die_with_the_command_however_it_dies(tmp_path):
    """popen_trainer's children get SIGKILL when the command is SIGKILLed (no orphan trains beside the rerun)."""
    code = ("import sys, time; sys.path[:0] = sys.argv[1:]\nfrom hmm_nmt_align.corpus.train import popen_trainer\n"
            "p = popen_trainer([sys.executable, '-c', 'import time; time.sleep(120)'], sys.stdout, {})\n"
            "print(p.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code, ROOT, os.path.join(ROOT, "alignment")],
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 30
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid):
    """Running (not a zombie waiting for a reaper)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------- silent wrong results
def test_a_second_separator_on_a_line_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("x y ||| X Y\nx ||| X ||| Y\n")
    p = cli(tmp_path, "-i", "a.txt", "--model-dir", "m", "-o", "o")
    one_line_error(p, "a.txt:2: a second '|||'")
    assert not (tmp_path / "m").exists() and not (tmp_path / "o").exists()


def test_align_only_warns_when_the_text_is_mostly_unknown_to_the_model(copy, capsys):
    for side, text in (("src", "qqq www\nxyz\n"), ("tgt", "QQQ WWW\nXYZ\n")):
        (copy / f"new.{side}").write_text(text)
    opts = opts_for(copy, "--align-only")
    opts.src, opts.tgt = str(copy / "new.src"), str(copy / "new.tgt")
    assert run(opts, launch=FakeTrainer(), preprocess=fake_preprocess, load=FakeLoader()) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "<unk> in the dictionary" in err and "% of -s," in err and "% of -t;" in err
    capsys.readouterr()
    assert run(opts_for(copy, "--align-only"), launch=FakeTrainer(), preprocess=fake_preprocess,
               load=FakeLoader()) == 0
    assert "<unk>" not in capsys.readouterr().err  # the training text itself: no warning


@pytest.mark.parametrize("args,message", [
    (["--lr", "-1"], "--lr must be a number > 0, got -1.0"),
    (["--lr", "nan"], "--lr must be a number > 0, got nan"),
    (["--dropout", "1.5"], "--dropout must be in [0, 1), got 1.5"),
    (["--heads", "3"], "--heads 3 must divide --embed-dim 128"),
    (["--max-tokens", "1"], "--max-tokens 1 is smaller than line 3 (5 words with EOS on its longer side): give --max-tokens 6"),
    (["--align-max-tokens", "1"], "argument --align-max-tokens: must be >= 1024, got 1"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--patience", "-1"], "argument --patience: must be >= 0, got -1"),
    (["--seed", "4294967295", "--seeds", "2"], "the seeds must stay <= 4294967295"),
])
def test_bad_options_are_refused_before_anything_is_made(tmp_path, args, message):
    corpus(tmp_path)
    p = cli(tmp_path, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", "-o", "o", *args)
    one_line_error(p, message)
    assert not (tmp_path / "m").exists() and not (tmp_path / "o").exists()


def test_a_batch_too_small_for_a_line_in_pieces_is_refused_before_training_and_the_fixed_rerun_runs(tmp_path):
    """Words fit, pieces do not (5 merges split words into letters): refused after segmenting, before training, and
    the same directory takes the corrected command (nothing was trained with the refused settings)."""
    corpus(tmp_path)
    trainer = FakeTrainer()
    with pytest.raises(CorpusError, match=r"--max-tokens 6 is smaller than line \d+ \(\d+ pieces with EOS"):
        run(opts_for(tmp_path, "--max-tokens", "6", "--merges", "5"), launch=trainer, preprocess=fake_preprocess,
            load=FakeLoader())
    assert trainer.cmds == [] and "codes" in json.loads((tmp_path / "m" / "manifest.json").read_text())["done"]
    assert run(opts_for(tmp_path, "--max-tokens", "64", "--merges", "5"), launch=trainer,
               preprocess=fake_preprocess, load=FakeLoader()) == 0
    assert json.loads((tmp_path / "m" / "manifest.json").read_text())["config"]["max_tokens"] == 64


def test_a_line_too_long_for_the_model_is_left_empty_with_a_warning_and_exit_0(copy, capsys):
    src = [p[0] for p in PAIRS] + [" ".join(["cat"] * 1100)]
    tgt = [p[1] for p in PAIRS] + [" ".join(["CAT"] * 3)]
    (copy / "long.src").write_text("".join(x + "\n" for x in src))
    (copy / "long.tgt").write_text("".join(x + "\n" for x in tgt))
    opts = opts_for(copy, "--align-only")
    opts.src, opts.tgt = str(copy / "long.src"), str(copy / "long.tgt")
    assert run(opts, launch=FakeTrainer(), preprocess=fake_preprocess, load=FakeLoader()) == 0
    lines = (copy / "c.align").read_text().split("\n")[:-1]
    assert len(lines) == len(src) and lines[-1] == "" and lines[0] == "0-1 1-2 2-0"
    err = capsys.readouterr().err
    assert f"hmm-nmt-align-corpus: warning: {copy / 'long.src'}:{len(src)}: " in err
    assert "its output line is left empty" in err


def test_a_write_failure_is_one_line_exit_2(monkeypatch, capsys):
    import hmm_nmt_align.corpus.cli as cli_module

    def full(opts, **kw):
        raise OSError(28, "No space left on device", "/data/out.align")

    monkeypatch.setattr(cli_module, "run", full)
    assert main(["-s", "a", "-t", "b", "--model-dir", "m", "-o", "o"]) == 2
    assert capsys.readouterr().err == "hmm-nmt-align-corpus: error: /data/out.align: No space left on device\n"


# ----------------------------------------------------------------------------------------------- the manifest
@pytest.mark.parametrize("edit,message", [
    (lambda m: [m], "manifest.json: the file must be a JSON object"),
    (lambda m: dict(m, config=dict(m["config"], seeds="2")), "config.seeds must be an integer >= 1, got '2'"),
    (lambda m: dict(m, config=dict(m["config"], seeds=-1)), "config.seeds must be an integer >= 1, got -1"),
    (lambda m: dict(m, config=dict(m["config"], seeds=0)), "config.seeds must be an integer >= 1, got 0"),
    (lambda m: dict(m, config=dict(m["config"], guide_updates="abc")), "config.guide_updates must be an integer"),
    (lambda m: dict(m, config=dict(m["config"], lr=True)), "config.lr must be a number in (0, inf]"),
    (lambda m: dict(m, done=dict(m["done"], bin={})), "done.bin.train_pairs must be an integer >= 0, got None"),
    (lambda m: dict(m, done=dict(m["done"], **{"train.fwd": {"max_update": "6"}})), "done.train.fwd.max_update"),
    (lambda m: dict(m, done=[]), "done must be a JSON object"),
    (lambda m: dict(m, version=2), "made by another version of this tool"),
])
def test_a_manifest_that_this_tool_did_not_write_is_one_line_exit_2(copy, edit, message):
    path = copy / "m" / "manifest.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    for mode in (["--align-only"], [], ["--continue"]):
        p = cli(copy, "-s", "c.src", "-t", "c.tgt", "--model-dir", "m", *mode, "-o", "a", "--no-progress")
        one_line_error(p, message)
    assert not (copy / "a").exists()


# ----------------------------------------------------------------------------------------------- for real
TINY = ["--warmup-updates", "2", "--merges", "30", "--embed-dim", "16", "--ffn-dim", "32", "--layers", "1",
        "--heads", "2", "--threads", "2", "--guide-updates", "0", "--no-progress", "--cpu"]


def _trainers_of(model_dir):
    """Live processes whose command line names ``model_dir`` (its trainers)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        if str(model_dir) in cmd and "fairseq_cli.train" in cmd and _alive(int(pid)):
            out.append(int(pid))
    return out


@pytest.mark.slow
def test_sigkill_leaves_no_trainer_and_the_rerun_trains_exactly_to_the_target(tmp_path):
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(tmp_path / "raw"),
                    "--train", "150", "--valid", "5", "--test", "5"], check=True, capture_output=True)
    args = ["-s", "raw/train.src", "-t", "raw/train.tgt", "--model-dir", str(tmp_path / "m"), "-o", "a",
            "--max-update", "100", *TINY]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.Popen([sys.executable, "-m", "hmm_nmt_align.corpus", *args], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp_path / "m" / "fwd" / "train.log"
    deadline = time.time() + 240
    while time.time() < deadline and not (log.exists() and '"num_updates": "' in log.read_text(errors="replace")):
        time.sleep(0.5)
    assert _trainers_of(tmp_path / "m"), "the trainers did not start"
    first.send_signal(signal.SIGKILL)
    first.wait()
    deadline = time.time() + 30
    while _trainers_of(tmp_path / "m") and time.time() < deadline:
        time.sleep(0.2)
    assert not _trainers_of(tmp_path / "m")
    p = cli(tmp_path, *args, timeout=600)  # the lock of the killed run is taken over
    assert p.returncode == 0, p.stderr[-2000:]
    done = json.loads((tmp_path / "m" / "manifest.json").read_text())["done"]
    assert (done["train.fwd"]["updates"], done["train.rev"]["updates"]) == (100, 100)


@pytest.mark.slow
def test_a_resumed_trainer_refuses_a_payload_in_checkpoint_last(tmp_path):
    """fairseq-train resumes a direction from its checkpoint_last.pt: through the safe loader too."""
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(tmp_path / "raw"),
                    "--train", "60", "--valid", "5", "--test", "5"], check=True, capture_output=True)
    args = ["-s", "raw/train.src", "-t", "raw/train.tgt", "--model-dir", "m", "-o", "a", "--max-update", "4", *TINY]
    trainer = FakeTrainer(interrupt_at=0)  # stops before the first trainer: codes and bin/ made for real
    opts = build_parser().parse_args([*args[:4], "--model-dir", str(tmp_path / "m"), "-o", str(tmp_path / "a"),
                                      *args[8:]])
    opts.src, opts.tgt = str(tmp_path / "raw" / "train.src"), str(tmp_path / "raw" / "train.tgt")
    with pytest.raises(KeyboardInterrupt):
        run(opts, launch=trainer)
    os.makedirs(tmp_path / "m" / "fwd", exist_ok=True)
    marker = tmp_path / "ran"
    poison(tmp_path / "m" / "fwd" / "checkpoint_last.pt", marker)
    p = cli(tmp_path, *args, timeout=600)
    assert p.returncode == 2 and "training fwd failed" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not marker.exists()
