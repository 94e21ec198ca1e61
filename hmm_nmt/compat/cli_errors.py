"""fairseq's command lines answer the errors a user can fix with one line, not a traceback.

fairseq-train, -generate, -interactive and -eval-lm have no top-level error handler: a missing data-bin
or an option this plugin refuses (``ValueError("--lexicon-topk-warmup N is ...")``) ends in a Python traceback.
When the running program is one of fairseq's command lines, an uncaught ``FileNotFoundError`` or an exception
whose message names a flag (``--...``) is printed as ``PROG: error: MESSAGE`` and the process exits with 2.
Anything else keeps its traceback (it is a bug to report), and nothing changes for code that imports the
plugin as a library: the hook sees only exceptions that nobody caught.
"""
import os
import sys

from hmm_nmt.compat._once import install_once


def _program():
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name or "").startswith("fairseq_cli."):
        return "fairseq-" + spec.name.split(".", 1)[1].replace("_", "-")
    name = os.path.basename(sys.argv[0] if sys.argv else "")
    return name if name.startswith("fairseq-") else None


def one_line(exc):
    """The one-line message for an exception a user can fix, or None."""
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"{exc.filename}: no such file or directory"
    text = str(exc)
    if isinstance(exc, (ValueError, FileNotFoundError)) and text.startswith("--") and "\n" not in text:
        return text
    return None


@install_once
def install():
    prog = _program()
    if prog is None:
        return False
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
