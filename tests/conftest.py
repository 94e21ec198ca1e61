import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_sigint():
    """``preexec_fn`` for a child that must see a simulated Ctrl-C: a shell without job control starts
    background jobs with SIGINT ignored, and an ignored SIGINT is inherited across exec (Python then installs
    no KeyboardInterrupt handler), so the tests restore the default before exec."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
# The checkout under test comes first, whatever is installed in the environment: hmm_nmt lives at its root,
# hmm_nmt_align in alignment/ (src layout). Both go first on sys.path for this process and on PYTHONPATH for
# every child a test starts (the tests build their children's PYTHONPATH from os.environ's).
CHECKOUT_PATHS = [ROOT, os.path.join(ROOT, "alignment")]
for _p in reversed(CHECKOUT_PATHS):
    if _p in sys.path:
        sys.path.remove(_p)
    sys.path.insert(0, _p)
os.environ["PYTHONPATH"] = os.pathsep.join(
    CHECKOUT_PATHS + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in CHECKOUT_PATHS])
SHARED_DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
# the real corpora some tests read, in a folder beside the checkout (absent from a plain clone: those tests skip)
SHARED_CORPORA = {
    "conll2000": "the CoNLL-2000 chunking corpus",
    "conll2003": "the CoNLL-2003 English NER corpus",
    "multi30k": "the Multi30k German-English corpus",
    "hansards_enfr": "the English-French Hansards and their gold alignments",
    "europarl_deen": "the German-English Europarl gold alignments",
    "ud_en_ewt": "the UD English Web Treebank",
    "wnut17": "the WNUT-17 corpus",
}


def needs_shared(name):
    """Skip mark for a test that reads the real corpus ../shared/data/NAME, with a reason naming the folder."""
    return pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED_DATA, name)),
                              reason=f"needs ../shared/data/{name} ({SHARED_CORPORA[name]}), absent")


def save_tagger_checkpoint(model, args, path):
    """A checkpoint of an (untrained) ``sequence_tagging`` model in the layout fairseq-train writes, for
    ``hmm-nmt-tag`` tests that need no training run."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    checkpoint_utils.torch_persistent_save(
        {"cfg": convert_namespace_to_omegaconf(args), "model": model.state_dict(),
         "optimizer_history": [{"criterion_name": "TaggingCrossEntropyCriterion", "optimizer_name": "Adam",
                                "num_updates": 0, "lr_scheduler_state": {"best": None}}],
         "extra_state": {"best_loss": None, "train_iterator": {"epoch": 1}}}, path)
    return path


def load_tag_script():
    """``hmm-nmt-tag`` as a module (its ``main(argv)`` returns the exit status)."""
    from hmm_nmt.cli import tag

    return tag


@pytest.fixture(scope="session")
def scale_toy(tmp_path_factory):
    """A 200-pair toy corpus binarised by fairseq-preprocess, shared by the scaling tests (distributed, resume,
    bf16) of one session; each test writes its checkpoints under its own subdirectory."""
    import subprocess

    work = tmp_path_factory.mktemp("scale_toy")
    raw = work / "raw"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw),
                    "--train", "200", "--valid", "20", "--test", "20"], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--destdir", str(work / "bin"),
                    "--joined-dictionary", "--workers", "1"], check=True, capture_output=True, env=env)
    return work


def open_fifo_writer(fifo, proc, limit_s=300):
    """Open ``fifo`` for writing once ``proc`` has opened it for reading; fail (rather than block for ever)
    when ``proc`` exits first, e.g. because it refuses the FIFO."""
    import errno
    import time

    start = time.monotonic()
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} without opening the FIFO: {proc.stderr.read()}")
        assert time.monotonic() - start < limit_s, "the command never opened the FIFO"
        time.sleep(0.05)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "w")


def finished_manifest(**config):
    """The manifest.json text of a finished one-seed, one-pass model directory of hmm-nmt-align-corpus (every
    key its schema requires), for tests that build a model directory by hand; ``config`` overrides settings."""
    import json

    settings = {"merges": 4000, "embed_dim": 128, "ffn_dim": 512, "layers": 2, "heads": 4, "max_tokens": 2048,
                "lr": 0.002, "warmup_updates": 200, "dropout": 0.1, "seed": 1, "max_update": 4800, "patience": 0,
                "valid_lines": 500, "lexicon": "separable", "target_context": "past", "lr_schedule": "linear",
                "label_smoothing": 0.1, "time_limit": None, "seeds": 1, "guide_updates": 0, "guide_weight": 4.0}
    settings.update(config)
    return json.dumps({"version": 1, "config": settings, "corpus": "0" * 64, "lines": 1,
                       "done": {"train.fwd": {"max_update": 4800}, "train.rev": {"max_update": 4800}}}) + "\n"
