#!/usr/bin/env python3
"""``hmm-nmt-tag``: tag a CoNLL file with a trained ``sequence_tagging`` checkpoint; write CoNLL with the tags.

What the command does, its options and its errors: :data:`hmm_nmt_align.base.tag_args.TAG_USAGE` (what ``--help``
prints; the parser is :func:`hmm_nmt_align.base.tag_args.tag_parser`, buildable without torch, so that the console
script, :func:`hmm_nmt_align.tag_commands.tag_main`, parses before importing the plugin). This module is the work:
loading (:func:`load_ensemble`, refusing what is not a checkpoint), batching and decoding (:func:`tag_sentences`,
:func:`tag_units`) and :func:`run`.
"""
import logging
import os
import sys

import torch
from tqdm import tqdm

import hmm_nmt  # noqa: F401  (registers the task/models, makes checkpoints loadable)
from hmm_nmt.criterions.tagging_cross_entropy import decode_tags
from hmm_nmt.data import documents
from hmm_nmt.data.conll import CoNLLFormatError, check_column, conllu_column, write_conll, write_conll_parallel
from hmm_nmt.data.entity_eval import count_invalid, entity_scores
from hmm_nmt.models.tagger_ensemble import TaggerEnsemble, check_same_dictionaries
from hmm_nmt_align.base.tag_args import tag_parser
from hmm_nmt_align.safe_checkpoint import CheckpointError as LoadError


def parse_args(argv=None):
    return tag_parser().parse_args(argv)


def load(path, overrides):
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
    return models[0], task


class CheckpointError(ValueError):
    """A ``--path`` that is not a loadable checkpoint; the message names the flag and the file."""


def check_checkpoint(path):
    """Refuse, before torch reads it, a ``--path`` that cannot be a checkpoint: missing, a folder, empty, or
    neither a zip archive (torch >= 1.6) nor a pickle (older torch)."""
    if not os.path.exists(path):
        raise CheckpointError(f"--path: no checkpoint {path}")
    if not os.path.isfile(path):
        raise CheckpointError(f"--path: {path} is not a file")
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        raise CheckpointError(f"--path: {path} is empty (0 bytes), not a checkpoint")
    if head != b"PK\x03\x04" and head[:1] != b"\x80":
        raise CheckpointError(f"--path: {path} is not a PyTorch checkpoint (neither a zip archive nor a pickle)")


def check_output(output, inputs):
    """Refuse an ``--output`` whose folder is missing, or that is one of ``inputs`` ((path, flag) pairs)."""
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise ValueError(f"--output: no such folder {os.path.dirname(output) or '.'}")
    if os.path.isdir(output):
        raise ValueError(f"--output: {output} is a folder")
    for path, flag in inputs:
        if os.path.exists(output) and os.path.exists(path) and os.path.samefile(output, path):
            raise ValueError(f"--output: {output} is the {flag} file; write to another file")


def load_ensemble(paths, overrides):
    """One model, or a :class:`TaggerEnsemble` of several checkpoints of the same data; the first's task."""
    import pickle
    import struct
    import zipfile

    for path in paths:
        check_checkpoint(path)
    loaded = []
    for path in paths:
        try:
            loaded.append(load(path, overrides))
        except LoadError as e:  # not a checkpoint, or one whose pickle would run code (refused, never run)
            raise CheckpointError(f"--path: cannot load {e}") from None
        except (EOFError, pickle.UnpicklingError, zipfile.BadZipFile, struct.error, RuntimeError, KeyError, IndexError,
                UnicodeDecodeError) as e:
            # a truncated or corrupt archive (torch's "PytorchStreamReader failed ..."), a pickle cut short
            # (EOFError, struct.error from torch's weights-only unpickler), a checkpoint without fairseq's fields
            raise CheckpointError(f"--path: cannot load {path}: {type(e).__name__}: {e}") from None
    if len(loaded) == 1:
        return loaded[0]
    check_same_dictionaries([t for _, t in loaded], paths)
    return TaggerEnsemble([m for m, _ in loaded]), loaded[0][1]


def uses_chars(model):
    """True for a tagger with character features (``--char-embed-dim``)."""
    return getattr(model, "chars", None) is not None


def make_net_input(task, words_per_sentence, with_chars=False):
    """The ``net_input`` of one batch of raw word lists, in their order: ``src_tokens`` (B, T) (lowercased
    before the dictionary lookup under ``--lowercase``), ``src_lengths`` and, ``with_chars``, ``src_chars``
    (B, T, C), the characters of the raw words as the task's datasets carry them (unseen words included)."""
    wd = task.source_dictionary
    T = max(len(ws) for ws in words_per_sentence)
    src = torch.full((len(words_per_sentence), T), wd.pad(), dtype=torch.long)
    for r, words in enumerate(words_per_sentence):
        ws = [w.lower() for w in words] if task.args.lowercase else words
        src[r, : len(ws)] = torch.tensor([wd.index(w) for w in ws], dtype=torch.long)
    net_input = {"src_tokens": src, "src_lengths": src.ne(wd.pad()).sum(1)}
    if with_chars:
        net_input["src_chars"] = task.batch_chars(words_per_sentence, T)
    return net_input


def tag_sentences(model, task, words_per_sentence, batch_size=64, device="cpu", progress=True, decoding="argmax"):
    """Predicted tag strings, in the training tag scheme, for lists of words (the same lowercasing/unknown
    handling as training, and the words' own characters for a model with character features);
    ``task.to_file_scheme`` writes them in the data's scheme."""
    td = task.target_dictionary
    order = sorted(range(len(words_per_sentence)), key=lambda i: len(words_per_sentence[i]))
    out = [None] * len(words_per_sentence)
    bar = tqdm(total=len(order), desc="tagging", unit="sent", disable=not progress, file=sys.stderr)
    for start in range(0, len(order), batch_size):
        ids = order[start:start + batch_size]
        net_input = make_net_input(task, [words_per_sentence[i] for i in ids], with_chars=uses_chars(model))
        with torch.no_grad():
            net_input = {k: v.to(device) for k, v in net_input.items()}
            net_out = model(**net_input)
            lprobs = model.get_normalized_probs(net_out, log_probs=True)
            pred = decode_tags(model, net_input, lprobs, task, decoding).cpu()
        for r, i in enumerate(ids):
            out[i] = [td[j] for j in pred[r, : len(words_per_sentence[i])].tolist()]
        bar.update(len(ids))
    bar.close()
    return out


def tag_units(model, task, sentences, word_col, batch_size=64, device="cpu", decoding="argmax"):
    """Predicted tags (training scheme) per sentence; under ``--tagging-unit document`` the sentences are
    tagged in their document units (:meth:`SequenceTaggingTask.units_of`) and the predictions split back."""
    words = [s.column(word_col) for s in sentences]
    if not getattr(task, "document_units", False):
        return tag_sentences(model, task, words, batch_size, device, decoding=decoding)
    groups = task.units_of(sentences)
    unit_words = [documents.join(words, g, documents.SEPARATOR) for g in groups]
    unit_preds = tag_sentences(model, task, unit_words, batch_size, device, decoding=decoding)
    decoded = [None] * len(sentences)
    lengths = [len(w) for w in words]
    for g, pred in zip(groups, unit_preds):
        for i, piece in documents.split(pred, g, lengths).items():
            decoded[i] = piece
    return decoded


def main(argv=None):
    """Exit status 0; 2 for bad input (a one-line error naming the flag or ``file:line``, nothing written);
    130 on Ctrl-C (one line, nothing written)."""
    return main_args(parse_args(argv))


def main_args(args):
    """:func:`main` on parsed arguments (what the console script calls after parsing without torch)."""
    try:
        return run(args)
    except KeyboardInterrupt:
        print("hmm-nmt-tag: interrupted; nothing written", file=sys.stderr)
        return 130


def run(args):
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    overrides = {}
    if args.data:
        overrides["data"] = args.data
    if args.train_file:
        overrides["train_file"] = args.train_file
    paths = [p for p in args.path.split(":") if p]
    try:
        check_output(args.output, [(args.input, "--input")] + [(p, "--path") for p in paths])
        model, task = load_ensemble(paths, overrides)
        conllu = task.data_format(task.args) == "conllu"
        column = conllu_column if conllu else int
        others = []  # blank, -DOCSTART- and comment lines of a column file: copied to the output on their lines
        sentences = task.read_file(task.args, args.input, others=others)
        word_col = task.word_column if args.word_column is None else column(args.word_column)
        check_column(args.input, sentences, word_col, "word")
        gold_col = None if args.gold_column is None else column(args.gold_column)
        if gold_col is not None:
            check_column(args.input, sentences, gold_col, "gold")
    except (CoNLLFormatError, FileNotFoundError, ValueError) as e:
        print(f"hmm-nmt-tag: error: {e}", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    model.to(device).eval()
    decoded = tag_units(model, task, sentences, word_col, args.batch_size, device, args.decoding)
    preds = [task.to_file_scheme(p) for p in decoded]
    tagged = ([cols + [p] for cols, p in zip(s.rows, pred)] for s, pred in zip(sentences, preds))
    try:
        if conllu:
            write_conll(args.output, tagged, sep="\t")
        else:  # line N of the output is line N of the input
            write_conll_parallel(args.output, sentences, tagged, others)
    except OSError as e:
        print(f"hmm-nmt-tag: error: --output: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    n_tok = sum(len(s) for s in sentences)
    print(f"tagged {len(sentences)} sentences, {n_tok} tokens -> {args.output} ({args.decoding} decoding)",
          file=sys.stderr)
    if task.bio:
        print(f"invalid sequences {count_invalid(preds, task.data_scheme)} written ({task.data_scheme}), "
              f"{count_invalid(decoded, task.train_scheme)} as decoded ({task.train_scheme}), "
              f"of {len(sentences)}")
    if gold_col is not None:
        gold = [s.column(gold_col) for s in sentences]
        correct = sum(g == p for gs, ps in zip(gold, preds) for g, p in zip(gs, ps))
        print(f"accuracy {100.0 * correct / n_tok:.2f}")
        if task.bio:
            res = entity_scores(gold, preds, task.data_scheme)
            print(f"entity precision {res['precision']:.2f} recall {res['recall']:.2f} F1 {res['f1']:.2f} "
                  f"({task.data_scheme}, seqeval strict)")
            print(f"chunk_f1 {res['f1']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
