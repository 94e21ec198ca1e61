"""docs/multi30k/cpu-conv/babysit.sh around the long runs: `carry` waits for a moment when every *running*
job's checkpoint_last.pt is freshly written (a finished job's older checkpoint must not hold it back), and `pause`
stops a running benchmark right after its next checkpoint. The benchmarks are stand-in processes whose command
lines look like scripts/benchmark_translation.py's (babysit finds jobs by their --out and --models)."""
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT

BABYSIT = os.path.join(ROOT, "docs", "multi30k", "cpu-conv", "babysit.sh")
SLEEPER = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); time.sleep(120)"


def job(run, seed, model):
    ck = run / f"seed-{seed}" / model / "de-en" / model / "checkpoints"
    ck.mkdir(parents=True)
    return ck / "checkpoint_last.pt"


def fake_benchmark(run, seed, model):
    # argv as ladder.sh's exec gives it; python -c ignores the trailing arguments
    return subprocess.Popen([sys.executable, "-c", SLEEPER, "scripts/benchmark_translation.py", "--out",
                             f"{run}/seed-{seed}/{model}", "--models", model])


def age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_carry_is_not_held_back_by_a_finished_jobs_checkpoint(tmp_path):
    run = tmp_path / "runs"
    done = job(run, 1, "transformer")  # finished 10 minutes ago: no process, checkpoint 600 s old
    done.write_bytes(b"finished")
    age(done, 600)
    live = job(run, 2, "transformer")
    live.write_bytes(b"running")
    age(live, 20)  # written 20 s ago: a moment to copy it
    bench = fake_benchmark(run, 2, "transformer")
    log = tmp_path / "babysit.log"
    with open(log, "w") as out:  # a file, not a pipe: the loop's sleeping children must not hold our reader
        sitter = subprocess.Popen(["bash", BABYSIT, "carry", str(run), str(tmp_path / "carry"), "1"], cwd=ROOT,
                                  env=dict(os.environ, PY=sys.executable), stdout=out, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and "babysit: carried" not in log.read_text():
            time.sleep(0.5)
        assert "babysit: carried" in log.read_text(), "carry waited on the finished job's old checkpoint"
        back = tmp_path / "carry" / "seed-2" / "transformer" / "de-en" / "transformer" / "checkpoints.carry"
        assert (back / "checkpoint_last.pt.carry.000").read_bytes() == b"running"
    finally:
        os.killpg(sitter.pid, signal.SIGKILL)
        bench.kill()
        sitter.wait()
        bench.wait()


def test_pause_stops_a_running_job_right_after_its_next_checkpoint(tmp_path):
    run = tmp_path / "runs"
    last = job(run, 1, "dhmm0_fast")
    last.write_bytes(b"old")
    age(last, 300)  # the previous checkpoint: too old to mean "just written"
    bench = fake_benchmark(run, 1, "dhmm0_fast")
    sitter = subprocess.Popen(["bash", BABYSIT, "pause", str(run)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        time.sleep(8)
        assert bench.poll() is None, "paused before any new checkpoint"
        last.write_bytes(b"new")
        age(last, 6)  # the next checkpoint, written after the pause began and finished 6 s ago
        assert bench.wait(timeout=60) == 7  # our SIGTERM handler: stopped by babysit's TERM
        out, _ = sitter.communicate(timeout=60)
        assert "babysit: paused dhmm0_fast" in out
    finally:
        bench.kill()
        if sitter.poll() is None:
            os.killpg(sitter.pid, signal.SIGKILL)
