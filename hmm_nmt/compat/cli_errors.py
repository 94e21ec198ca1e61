"""fairseq's command lines answer the errors a user can fix with one line, not a traceback.

fairseq-train, -generate, -interactive and -eval-lm have no top-level error handler: a missing data-bin
or an option this plugin refuses (``ValueError("--lexicon-topk-warmup N is ...")``) ends in a Python traceback.
When the running program is one of fairseq's command lines, an uncaught ``FileNotFoundError``, a checkpoint that
is missing (fairseq's ``IOError("Model file not found: ...")``), empty, not a checkpoint or refused for its pickle
payload (:class:`hmm_nmt_align.safe_checkpoint.CheckpointError`), or an exception whose message names a flag
(``--...``) is printed as ``PROG: error: MESSAGE`` and the process exits with 2. A missing data-bin and a
``--path`` that cannot be a checkpoint are found before fairseq turns the arguments into its config (which prints
hydra's warnings), so the error is the only line on stderr besides fairseq's INFO log.
Anything else keeps its traceback (it is a bug to report), and nothing changes for code that imports the
plugin as a library: the hook sees only exceptions that nobody caught.
"""
import errno
import functools
import os
import sys

from hmm_nmt.compat._once import install_once
from hmm_nmt_align.safe_checkpoint import CheckpointError, check_checkpoint_file

_NOT_FOUND = "Model file not found: "


def _program():
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").startswith("fairseq_cli."):
        return "fairseq-" + spec.name.split(".", 1)[1].replace("_", "-")
    name = os.path.basename(sys.argv[0] if sys.argv else "")
    return name if name.startswith("fairseq-") else None


def one_line(exc):
    """The one-line message for an exception a user can fix, or None."""
    if isinstance(exc, CheckpointError):  # missing, empty, not a checkpoint, or a pickle payload (never run)
        return str(exc)
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"{exc.filename}: no such file or directory"
    text = str(exc)
    if isinstance(exc, FileNotFoundError) and text and "\n" not in text:  # fairseq's "Dataset not found: ..."
        return text
    if type(exc) is OSError and text.startswith(_NOT_FOUND) and "\n" not in text:
        # fairseq's load_model_ensemble_and_task: IOError("Model file not found: PATH")
        return f"{text[len(_NOT_FOUND):]}: no such checkpoint"
    if isinstance(exc, (ValueError, FileNotFoundError)) and text.startswith("--") and "\n" not in text:
        return text
    return None


def _cli_modules(prog):
    """The running command line's module: ``__main__`` under ``python -m fairseq_cli.X``, else ``fairseq_cli.X``."""
    main = sys.modules.get("__main__")
    name = "fairseq_cli." + prog[len("fairseq-"):].replace("-", "_")
    mods = [main] if getattr(getattr(main, "__spec__", None), "name", None) == name else []
    return mods + ([sys.modules[name]] if name in sys.modules else [])


def _local_paths(text):
    """fairseq's ``split_paths`` of a ``PATH[:PATH...]`` option, local paths only (none for a URL)."""
    if not isinstance(text, str) or not text or "://" in text:
        return []
    return [p for p in text.split(os.pathsep) if p]


def _inputs_checked_first(convert):
    """fairseq's ``convert_namespace_to_omegaconf``, after a check that the data-bin exists and that every
    ``--path`` checkpoint can be one (:func:`~hmm_nmt_align.safe_checkpoint.check_checkpoint_file`: nothing
    unpickled): the conversion runs hydra, whose deprecation warnings (some 20 lines on stderr) and the config
    dump would come before the one error line."""

    @functools.wraps(convert)
    def wrapper(args, *rest, **kw):
        data = _local_paths(getattr(args, "data", None))
        # sequence_tagging reads --train-file/--valid-file/--test-file from anywhere: its data folder is optional
        files = any(getattr(args, f"{split}_file", None) for split in ("train", "valid", "test"))
        if data and not files and not os.path.exists(data[0]):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), data[0])
        for path in _local_paths(getattr(args, "path", None)):
            check_checkpoint_file(path)
        return convert(args, *rest, **kw)

    return wrapper


@install_once
def install():
    prog = _program()
    if prog is None:
        return False
    for module in _cli_modules(prog):
        convert = getattr(module, "convert_namespace_to_omegaconf", None)
        if convert is not None:
            module.convert_namespace_to_omegaconf = _inputs_checked_first(convert)
    previous = sys.excepthook

    def hook(kind, exc, tb):
        message = one_line(exc)
        if message is None:
            return previous(kind, exc, tb)
        sys.stdout.flush()
        sys.stderr.write(f"{prog}: error: {message}\n")
        sys.stderr.flush()
        os._exit(2)  # after the hook the interpreter would exit with 1

    sys.excepthook = hook
