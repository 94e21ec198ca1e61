"""fairseq's command line tools in child processes: run and log them, stop them cleanly on Ctrl-C / SIGTERM.

fairseq-train and fairseq-generate run under ``benchmarks/fairseq_instrumented.py`` (peak memory, timed
optimisation steps); the registry preflight asks a child interpreter what the plugin registers.
"""
import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
import time

from benchmarks.common import REPO, USER_DIR, BenchmarkError

INSTRUMENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fairseq_instrumented.py")


def task_args(eos_penalty=0.0):
    """fairseq-generate's task flags: the stock translation task, or hmm_nmt's with an EOS penalty."""
    if not eos_penalty:
        return ["--task", "translation"]
    return ["--task", "translation_eos_penalty", "--eos-penalty", repr(float(eos_penalty))]


def run_fairseq(python, env, tool, stats_path, fairseq_args, log_path, stdout_path=None, on_line=None):
    """``fairseq-<tool> fairseq_args`` under the instrumenting wrapper, appending to ``log_path``.

    Without ``stdout_path`` the child's output goes to the log line by line (``on_line`` sees each line);
    with it, stdout goes there and stderr to the log.  On an interruption (Ctrl-C, or SIGTERM turned into
    one by :func:`interrupt_on_sigterm`) the child gets SIGINT, so that fairseq stops cleanly and its
    checkpoints stay, and the interruption goes on.  Returns the command line.
    """
    cmd = [python, INSTRUMENT, tool, stats_path, "--"] + fairseq_args
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_path, "a", encoding="utf-8"))
        log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} $ {shlex.join(cmd)}\n")
        log.flush()
        out = stack.enter_context(open(stdout_path, "w", encoding="utf-8")) if stdout_path else None
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if out is None else out,
                                stderr=subprocess.STDOUT if out is None else log,
                                text=True, bufsize=1, env=env)
        try:
            if out is None:
                for line in proc.stdout:
                    log.write(line)
                    log.flush()  # others may follow the log while it runs
                    if on_line is not None:
                        on_line(line)
            rc = proc.wait()
        except BaseException:
            # interrupted: stop fairseq cleanly (its checkpoints stay) before leaving
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            raise
    if rc != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = "".join(f.readlines()[-25:])
        raise BenchmarkError(f"fairseq-{tool} failed (exit code {rc}); end of {log_path}:\n{tail}")
    return cmd


def query_registry(python, env):
    """What ``python`` with the plugin registers: archs, criterions, CUDA, GPU name, torch and fairseq versions."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);\n"
        "import torch\n"
        "from fairseq.utils import import_user_module\n"
        "from argparse import Namespace\n"
        "import_user_module(Namespace(user_dir=sys.argv[2]))\n"
        "from fairseq.models import ARCH_MODEL_REGISTRY\n"
        "from fairseq.criterions import CRITERION_REGISTRY\n"
        "print(json.dumps({'archs': sorted(ARCH_MODEL_REGISTRY), 'criterions': sorted(CRITERION_REGISTRY),"
        " 'cuda': torch.cuda.is_available(),"
        " 'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,"
        " 'torch': torch.__version__, 'fairseq': __import__('fairseq').__version__}))\n"
    )
    proc = subprocess.run([python, "-c", code, REPO, USER_DIR], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BenchmarkError(f"cannot import fairseq with the plugin {USER_DIR} using {python}:\n"
                             + proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _interrupt_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # kill / a batch system's TERM: stop the fairseq child cleanly, as on Ctrl-C


def interrupt_on_sigterm():
    """Make SIGTERM behave as Ctrl-C (a KeyboardInterrupt) in this process; only from the main thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


def generate_to_file(cmd, out, log, threads, failure):
    """Run a fairseq-generate command line with ``threads`` threads, stdout to ``out``, stderr to ``log``;
    a non-zero exit stops the script with ``failure``, the exit code and the log's last 15 lines."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with open(out, "w") as fo, open(log, "w") as fl:
        proc = subprocess.run(cmd, stdout=fo, stderr=fl, env=env)
    if proc.returncode != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-15:])
        raise SystemExit(f"{failure} (exit {proc.returncode}):\n{tail}")
