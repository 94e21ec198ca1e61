"""Sequence labelling (POS tagging, chunking, NER) on CoNLL column files.

Data
----
``data`` (the positional argument of ``fairseq-train``, which fairseq wants to be a directory) holds
``{train,valid,test}`` files named ``SPLIT``, ``SPLIT.txt``, ``SPLIT.conll`` or ``SPLIT.bio`` (each
optionally ``.gz``); ``--train-file/--valid-file/--test-file`` point to files anywhere instead (``data``
then only holds the optional dictionaries, any directory will do). Without a valid file, the dev split is carved from the training file: a random
``--dev-fraction`` of its sentences chosen with ``--dev-seed`` (so the split is the same in every run and
in ``scripts/tag.py``); the rest is the training split. ``--word-column`` and ``--tag-column`` choose the
columns (0-based, negative counts from the end; default: first and last). Malformed files (a line with
another column count than the first token line, an empty file) raise
:class:`hmm_nmt.data.conll.CoNLLFormatError` naming the file and line.

Dictionaries are built from the training split (``--word-min-count``; ``--lowercase`` folds words). If
the data directory holds ``dict.words.txt`` / ``dict.tags.txt`` they are loaded instead. Both are fairseq
:class:`~fairseq.data.Dictionary` objects, so both have the special symbols ``<s> <pad> </s> <unk>``
first; tags never seen in training map to the tag ``<unk>``.

Model contract (what a tagger built for this task must honour; ``iohmm_tagger`` relies on it)
------------------------------------------------------------------------------------------------
* The model is built by ``build_model(args, task)`` and reads ``task.source_dictionary`` (words) and
  ``task.target_dictionary`` (tags); it scores all ``len(task.target_dictionary)`` tag indices (the
  criterion and ``scripts/tag.py`` never predict the special ones).
* ``model(src_tokens, src_lengths)`` takes ``src_tokens`` (B, T) word indices, right padded with
  ``source_dictionary.pad()``, no BOS/EOS, and ``src_lengths`` (B,), and returns a tensor (B, T, n_tags)
  of log-probabilities or logits (values at padded positions are ignored).
* ``model.get_normalized_probs(net_output, log_probs)`` turns that output into (log-)probabilities;
  :class:`fairseq.models.BaseFairseqModel`'s default (a log-softmax of a tensor output) does, and is
  the identity on outputs that already are log-probabilities.
* ``sample["target"]`` is (B, T) tag indices, right padded with ``target_dictionary.pad()`` and aligned
  position by position with ``src_tokens`` (no EOS/BOS appended to either).

Use it with the criterion ``tagging_cross_entropy`` (token-level NLL; at validation it also logs tag
``accuracy`` and, for BIO/IOB tags, seqeval's chunk ``chunk_f1``/``chunk_precision``/``chunk_recall``).
"""
import logging
import os

import torch
from fairseq.data import Dictionary, LanguagePairDataset, ListDataset
from fairseq.tasks import LegacyFairseqTask, register_task

from hmm_nmt.data.conll import CoNLLFormatError, check_column, read_conll, split_dev

logger = logging.getLogger(__name__)

_SUFFIXES = ("", ".txt", ".conll", ".bio")


def is_bio_tagset(tags):
    """True if the (non-special) tags look like a chunk scheme (B-X / I-X / E-X / S-X / O)."""
    return any(len(t) > 2 and t[1] in "-_" and t[0] in "BIESL" for t in tags)


@register_task("sequence_tagging")
class SequenceTaggingTask(LegacyFairseqTask):
    """Tag every word of a sentence; see the module docstring for the data format and model contract."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("data", help="directory with {train,valid,test}[.txt|.conll|.bio][.gz] CoNLL files "
                                         "(and optionally dict.words.txt, dict.tags.txt)")
        parser.add_argument("--train-file", default=None, help="CoNLL file of the training split")
        parser.add_argument("--valid-file", default=None, help="CoNLL file of the dev split (else carved from train)")
        parser.add_argument("--test-file", default=None, help="CoNLL file of the test split")
        parser.add_argument("--word-column", type=int, default=0, help="0-based word column (negative: from the end)")
        parser.add_argument("--tag-column", type=int, default=-1, help="0-based tag column (negative: from the end)")
        parser.add_argument("--num-columns", type=int, default=None,
                            help="columns every token line must have (default: those of the first token line)")
        parser.add_argument("--comment-prefix", default=None, help="ignore lines starting with this (e.g. '#')")
        parser.add_argument("--dev-fraction", type=float, default=0.1,
                            help="fraction of the training sentences carved out as dev split when no valid file")
        parser.add_argument("--dev-seed", type=int, default=1, help="seed of the dev carve-out")
        parser.add_argument("--train-subset-sentences", type=int, default=0,
                            help="keep only the first N training sentences after the dev carve-out (0: all)")
        parser.add_argument("--lowercase", action="store_true", help="lowercase words before lookup")
        parser.add_argument("--word-min-count", type=int, default=1, help="words rarer than this in train become <unk>")
        parser.add_argument("--max-source-positions", type=int, default=1024, help="longest sentence kept")

    def __init__(self, args, word_dict, tag_dict):
        super().__init__(args)
        self.word_dict = word_dict
        self.tag_dict = tag_dict
        self.bio = is_bio_tagset(tag_dict.symbols[tag_dict.nspecial:])

    # ---------------------------------------------------------------- files and splits
    @classmethod
    def split_path(cls, args, split):
        explicit = getattr(args, f"{split}_file", None)
        if explicit:
            return explicit
        data = args.data
        if os.path.isdir(data):
            for suffix in _SUFFIXES:
                for gz in ("", ".gz"):
                    path = os.path.join(data, split + suffix + gz)
                    if os.path.isfile(path):
                        return path
            return None
        if split == "train":
            raise FileNotFoundError(f"data={data!r} is not a directory; give the directory, or --train-file")
        return None

    @classmethod
    def read_split(cls, args, split):
        """The sentences of ``split`` (train/valid/test), honouring the dev carve-out; None if absent."""
        carve = cls.split_path(args, "valid") is None
        if split == "valid" and carve or split == "train":
            path = cls.split_path(args, "train")
            if path is None:
                raise FileNotFoundError(f"no training file found for data={args.data!r} (see --train-file)")
            sents = cls._read(args, path)
            if carve:
                train, dev = split_dev(sents, args.dev_fraction, args.dev_seed)
                sents = train if split == "train" else dev
            if split == "train" and args.train_subset_sentences > 0:
                sents = sents[: args.train_subset_sentences]
            return path, sents
        path = cls.split_path(args, split)
        if path is None:
            return None, None
        return path, cls._read(args, path)

    @classmethod
    def _read(cls, args, path):
        sents = read_conll(path, num_columns=args.num_columns, comment_prefix=args.comment_prefix)
        check_column(path, sents, args.word_column, "word")
        check_column(path, sents, args.tag_column, "tag")
        return sents

    @classmethod
    def words_of(cls, args, sentence):
        words = sentence.column(args.word_column)
        return [w.lower() for w in words] if args.lowercase else words

    # ---------------------------------------------------------------- setup
    @classmethod
    def setup_task(cls, args, **kwargs):
        data_dir = args.data if os.path.isdir(args.data) else None
        wpath = os.path.join(data_dir, "dict.words.txt") if data_dir else None
        tpath = os.path.join(data_dir, "dict.tags.txt") if data_dir else None
        if wpath and os.path.isfile(wpath) and os.path.isfile(tpath):
            word_dict, tag_dict = Dictionary.load(wpath), Dictionary.load(tpath)
        else:
            path, sents = cls.read_split(args, "train")
            word_dict, tag_dict = Dictionary(), Dictionary()
            for s in sents:
                for w in cls.words_of(args, s):
                    word_dict.add_symbol(w)
                for t in s.column(args.tag_column):
                    tag_dict.add_symbol(t)
            word_dict.finalize(threshold=args.word_min_count, padding_factor=1)
            tag_dict.finalize(padding_factor=1)
        logger.info(f"[words] dictionary: {len(word_dict)} types; [tags] dictionary: {len(tag_dict)} types "
                    f"({' '.join(tag_dict.symbols[tag_dict.nspecial:][:40])})")
        return cls(args, word_dict, tag_dict)

    def encode(self, sentences, path=None):
        """(word index tensors, tag index tensors) of CoNLL sentences, no EOS."""
        src, tgt = [], []
        for s in sentences:
            src.append(torch.LongTensor([self.word_dict.index(w) for w in self.words_of(self.args, s)]))
            tgt.append(torch.LongTensor([self.tag_dict.index(t) for t in s.column(self.args.tag_column)]))
        return src, tgt

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path, sents = self.read_split(self.args, split)
        if sents is None:
            raise FileNotFoundError(f"no {split} file for data={self.args.data!r} (see --{split}-file)")
        src, tgt = self.encode(sents)
        unk_tags = sum(int((t == self.tag_dict.unk()).sum()) for t in tgt)
        if unk_tags:
            logger.warning(f"{path} [{split}]: {unk_tags} tags not seen in training (counted as errors)")
        self.datasets[split] = self.build_dataset(src, tgt)
        logger.info(f"{path} [{split}]: {len(src)} sentences, {sum(len(s) for s in src)} tokens")

    def build_dataset(self, src, tgt=None):
        import numpy as np

        sizes = np.array([len(s) for s in src], dtype=np.int64)
        return LanguagePairDataset(
            ListDataset(src, sizes), sizes, self.word_dict,
            ListDataset(tgt, sizes) if tgt is not None else None, sizes if tgt is not None else None,
            self.tag_dict, left_pad_source=False, left_pad_target=False, input_feeding=False,
        )

    def build_dataset_for_inference(self, src_tokens, src_lengths, **kwargs):
        import numpy as np

        return LanguagePairDataset(
            ListDataset(src_tokens, np.array(src_lengths)), src_lengths, self.word_dict,
            left_pad_source=False, input_feeding=False,
        )

    def max_positions(self):
        return (self.args.max_source_positions, self.args.max_source_positions)

    @property
    def source_dictionary(self):
        return self.word_dict

    @property
    def target_dictionary(self):
        return self.tag_dict


__all__ = ["SequenceTaggingTask", "CoNLLFormatError", "is_bio_tagset"]
