"""hmm_nmt: hidden Markov models for neural machine translation, as a fairseq plugin.

Importing this package (what ``fairseq-* --user-dir hmm_nmt`` does) registers every model,
architecture, criterion, task and learning-rate scheduler of the plugin, makes fairseq checkpoints loadable under
torch >= 2.6 (see :mod:`hmm_nmt.compat.checkpoints`), makes fairseq's checkpoint copies atomic
(:mod:`hmm_nmt.compat.atomic_checkpoints`) and, on machines without CUDA, lets fairseq's
distributed training run on CPU processes with gloo (see :mod:`hmm_nmt.compat.distributed_cpu`).

The HMM mathematics lives in :mod:`hmm_nmt.hmm` and does not import fairseq.
"""
import contextlib
import importlib
import logging
import os

__version__ = "0.1.0"


@contextlib.contextmanager
def _quiet_fairseq_import():
    """Leave the logging configuration as it was found while fairseq and the plugin import.

    fairseq 0.12 configures logging on import: ``fairseq.models.wav2vec.wav2vec2_classification`` calls
    ``logging.basicConfig(level=DEBUG)`` (root at DEBUG with a stderr handler: every later DEBUG record of any
    library is printed) and ``fairseq.tasks.text_to_speech`` then logs "Please install tensorboardX" through it.
    While importing, a root without handlers gets a WARNING-level stderr handler (what Python's last-resort
    handler prints anyway, so real warnings and errors still show) which turns fairseq's ``basicConfig`` calls
    into no-ops, and the text_to_speech logger is held at WARNING; afterwards the root level, the root handlers
    and that logger's level are put back as they were.
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    guard = None
    if not handlers:
        guard = logging.StreamHandler()
        guard.setLevel(logging.WARNING)
        root.addHandler(guard)
    tts = logging.getLogger("fairseq.tasks.text_to_speech")
    tts_level = tts.level
    tts.setLevel(logging.WARNING)
    try:
        yield
    finally:
        tts.setLevel(tts_level)
        root.setLevel(level)
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)


def _import_all(subpackage):
    # fairseq's own convention: every module of models/, criterions/, tasks/ registers itself on import
    folder = os.path.join(os.path.dirname(__file__), subpackage)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and not name.startswith("_"):
            importlib.import_module(f"hmm_nmt.{subpackage}.{name[:-3]}")


with _quiet_fairseq_import():
    from hmm_nmt import compat  # noqa: E402

    compat.install_torch()  # checkpoint loading under torch >= 2.6, numpy >= 2

    try:
        import fairseq  # noqa: F401
    except ImportError:  # pure-torch use of hmm_nmt.hmm without fairseq installed
        fairseq = None

    if fairseq is not None:
        for _sub in ("tasks", "criterions", "models", "optim"):
            _import_all(_sub)
        compat.install_fairseq()  # atomic checkpoint copies; on CPU-only machines the gloo launcher and bf16 autocast
