"""``hmm-nmt-user-dir``: print the directory of the installed plugin, for fairseq's ``--user-dir``.

fairseq takes ``--user-dir`` as a path, so ``--user-dir hmm_nmt`` resolves only from the repository root.
From anywhere else::

    fairseq-train data-bin --user-dir "$(hmm-nmt-user-dir)" --arch transformer_dhmm ...

The package is located without being imported (importing it imports fairseq), so this takes milliseconds.
"""
import importlib.util
import sys


def plugin_dir():
    """The plugin's directory, or None when hmm_nmt is not installed in this Python."""
    spec = importlib.util.find_spec("hmm_nmt")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def main(argv=None) -> int:
    import argparse

    argparse.ArgumentParser(prog="hmm-nmt-user-dir", description=__doc__.split("\n\n")[0]).parse_args(argv)
    path = plugin_dir()
    if path is None:
        print("hmm-nmt-user-dir: error: the hmm_nmt package is not installed in this Python", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
