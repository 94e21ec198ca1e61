"""The argument parsers of ``hmm-nmt-tags`` and ``hmm-nmt-tag``, buildable without torch or fairseq.

The console scripts (:mod:`hmm_nmt_align.tag_commands`) parse the command line with these before importing the
plugin (whose import imports fairseq and torch, seconds), so that ``--help`` and a usage error are immediate;
:mod:`hmm_nmt.data.tags_cli` and :mod:`hmm_nmt.cli.tag` parse with the same parsers. ``SCHEMES`` and
``DECODINGS`` repeat :data:`hmm_nmt.data.tag_schemes.SCHEMES` and
:data:`hmm_nmt.criterions.tagging_cross_entropy.DECODINGS` (a test checks that they agree).
"""
import argparse

__all__ = ["SCHEMES", "DECODINGS", "TAGS_USAGE", "TAG_USAGE", "tags_parser", "tag_parser"]

SCHEMES = ("io", "iob1", "iob2", "ioe1", "ioe2", "bioes")
DECODINGS = ("argmax", "viterbi")
PROG = "hmm-nmt-tags"

TAGS_USAGE = """``hmm-nmt-tags``: convert, detect and score entity tag schemes on CoNLL column files.

    hmm-nmt-tags convert --from iob1 --to bioes eng.train eng.train.bioes     # --from omitted: detected
    hmm-nmt-tags detect eng.train
    hmm-nmt-tags score --scheme iob2 gold.txt pred.txt                        # entity P/R/F1 (seqeval strict)

Column files: one token per line, the tag in ``--column`` (default the last), blank lines between sentences;
``-DOCSTART-`` lines and lines without a token (WNUT-17's lone tabs) are sentence breaks and are copied
through unchanged, as is every column but the tag, byte for byte. The column separator is decided per file:
tabs if any token line has a tab (every token line must then have the same number of tab-separated columns:
a line mixing tabs and spaces is refused, never read with a column lost), else runs of spaces; lines end at
``\n`` only.

``detect`` (and ``--from``/``--scheme`` left to detection) refuses a file without any entity tag: all-O text
could be in any scheme. ``score`` refuses a GOLD and a PRED that are not token-parallel (naming the first line
that differs), and a tag whose prefix has no place in the scheme scored (``S-ORG`` under IOB2, ``B-ORG``
under IO): it names the file, the line and the scheme the file reads as, rather than score it 0; a PRED that
reads as another scheme with the same prefixes (IOB1 against IOB2) is scored with a warning.

Bad input (a malformed or empty file, a truncated ``.gz``, bytes that are not UTF-8, a ``--column`` past the
last one, an output folder that does not exist or an output that is the input): one line ``hmm-nmt-tags:
error: ...`` naming the flag or ``path:line``, exit 2, nothing written. Ctrl-C: exit 130, one line. The
output file appears only complete (written to a temporary file, then renamed).
"""

TAG_USAGE = """Tag a CoNLL file with a trained ``sequence_tagging`` checkpoint; write CoNLL with the predicted tags.

    hmm-nmt-tag --path checkpoints/checkpoint_best.pt --input test.txt --output test.tagged

Each output line is the input line's columns followed by the predicted tag (the conlleval layout when
the input has a gold column: ``word ... gold predicted``). The output is line-parallel to a CoNLL column input:
line N of one is line N of the other, the blank lines, ``-DOCSTART-`` document separators and ``--comment-prefix``
lines (the checkpoint's) copied through as they are, untagged. The words are read from ``--word-column``
(default: the column the model was trained on). The task (and its dictionaries) is rebuilt from the
training data recorded in the checkpoint; if that data moved, pass ``--data``/``--train-file``.
``--decoding viterbi`` writes the best tag sequence the training tag scheme allows (see
``hmm_nmt.criterions.tagging_cross_entropy.decode_tags``) instead of the per-token arg-max. Predictions are
written in the file's own tag scheme (the checkpoint's ``--data-tag-scheme``; converted back from the
training scheme). For entity/chunk tags the script prints the number of invalid sequences, as decoded (in the
training scheme) and as written (in the file's scheme); with ``--gold-column`` it also prints tag accuracy
and entity precision/recall/F1 in the file's scheme (seqeval strict, ``hmm_nmt.data.entity_eval``).
CoNLL-U input (a checkpoint trained with ``--data-format conllu``) is read the same way as in training
(multiword tokens and empty nodes skipped) and written as tab-separated rows of its ten fields plus the tag,
a blank line after each sentence (comments, multiword-token and empty-node lines are not copied).
The output is written to a temporary file and renamed, so a failed run leaves no partial file.

A checkpoint trained with ``--tagging-unit document`` tags each document's sentences as one sequence
(``hmm_nmt.data.documents``) and writes the tags sentence by sentence as usual.

``--path a.pt:b.pt:c.pt`` tags with an ensemble of taggers trained on the same data (fairseq's separator;
``hmm_nmt.models.tagger_ensemble``): their mean per-token probabilities, and under ``--decoding viterbi``
for CRF taggers the best path of their mean CRF potentials.
"""


def tags_parser() -> argparse.ArgumentParser:
    """The parser of ``hmm-nmt-tags`` (subcommands convert, detect, score)."""
    ap = argparse.ArgumentParser(prog=PROG, description=TAGS_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="re-tag a column file in another scheme")
    c.add_argument("--from", dest="src", help=f"scheme of the input ({', '.join(SCHEMES)}; default: detected)")
    c.add_argument("--to", dest="dst", required=True, help="scheme to write")
    c.add_argument("input")
    c.add_argument("output")
    d = sub.add_parser("detect", help="print the scheme a column file is written in")
    d.add_argument("input")
    s = sub.add_parser("score", help="entity precision/recall/F1 of PRED against GOLD")
    s.add_argument("--scheme", help="scheme of both files (default: detected from GOLD)")
    s.add_argument("--report", action="store_true", help="per-type table too")
    s.add_argument("gold")
    s.add_argument("pred")
    for p in (c, d, s):
        p.add_argument("--column", type=int, default=-1, help="the tag column (default -1: the last)")
    return ap


def tag_parser() -> argparse.ArgumentParser:
    """The parser of ``hmm-nmt-tag``."""
    p = argparse.ArgumentParser(prog="hmm-nmt-tag", description=TAG_USAGE,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", required=True,
                   help="checkpoint (checkpoint_best.pt), or several separated by ':' for an ensemble")
    p.add_argument("--input", required=True, help="CoNLL file to tag (.gz allowed)")
    p.add_argument("--output", required=True, help="CoNLL output file")
    p.add_argument("--word-column", default=None, help="word column of the input (default: training's)")
    p.add_argument("--gold-column", default=None,
                   help="gold tag column (CoNLL-U: upos/xpos): print accuracy and entity P/R/F1")
    p.add_argument("--decoding", choices=DECODINGS, default="argmax",
                   help="per-token arg-max, or the best sequence the tag scheme allows (Viterbi)")
    p.add_argument("--data", default=None, help="override the training data directory recorded in the checkpoint")
    p.add_argument("--train-file", default=None, help="override the training file recorded in the checkpoint")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--cpu", action="store_true", help="never use CUDA")
    return p
