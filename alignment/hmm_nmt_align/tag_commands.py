"""Console scripts ``hmm-nmt-tags`` and ``hmm-nmt-tag``: parse the command line, then import the plugin.

``hmm_nmt`` imports fairseq and torch on import (seconds); these entry points parse with the torch-free parsers
of :mod:`hmm_nmt_align.base.tag_args` first, so ``--help`` and usage errors answer at once, and import
:mod:`hmm_nmt.data.tags_cli` / :mod:`hmm_nmt.cli.tag` only to do the work. A Ctrl-C while the plugin imports
exits 130 with one line, as one during the work does.
"""
import sys

from hmm_nmt_align.base.tag_args import tag_parser, tags_parser

__all__ = ["tags_main", "tag_main"]


def _interrupted(prog: str) -> int:
    print(f"{prog}: interrupted; nothing written", file=sys.stderr)
    return 130


def tags_main(argv=None) -> int:
    opts = tags_parser().parse_args(argv)
    try:
        from hmm_nmt.data.tags_cli import run
    except KeyboardInterrupt:
        return _interrupted("hmm-nmt-tags")
    return run(opts)


def tag_main(argv=None) -> int:
    args = tag_parser().parse_args(argv)
    try:
        from hmm_nmt.cli.tag import main_args
    except KeyboardInterrupt:
        return _interrupted("hmm-nmt-tag")
    return main_args(args)
