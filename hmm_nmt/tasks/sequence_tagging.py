"""Sequence labelling (POS tagging, chunking, NER) on CoNLL column files.

Data
----
``data`` (the positional argument of ``fairseq-train``, which fairseq wants to be a directory) holds
``{train,valid,test}`` files named ``SPLIT``, ``SPLIT.txt``, ``SPLIT.conll`` or ``SPLIT.bio`` (each
optionally ``.gz``); ``--train-file/--valid-file/--test-file`` point to files anywhere instead (``data``
then only holds the optional dictionaries, any directory will do). Without a valid file, the dev split is carved from the training file: a random
``--dev-fraction`` of its sentences chosen with ``--dev-seed`` (so the split is the same in every run and
in ``hmm-nmt-tag``); the rest is the training split. ``--word-column`` and ``--tag-column`` choose the
columns (0-based, negative counts from the end; default: first and last). Malformed files (a line with
another column count than the first token line, an empty file) raise
:class:`hmm_nmt.data.conll.CoNLLFormatError` naming the file and line.

``--data-format conllu`` reads CoNLL-U (Universal Dependencies) through the ``conllu`` library instead:
multiword tokens and empty nodes are skipped, the words are the FORM field and ``--tag-column`` names the
field (``upos``, the default, or ``xpos``). CoNLL files: ``-DOCSTART-`` lines are document boundaries and a
line holding only white space (WNUT-17) is a sentence break.

``--tagging-unit document`` (entity tags only) trains, validates and tags runs of consecutive sentences of one
document as one sequence, joined by a separator token tagged ``O`` and packed up to ``--max-source-positions``
tokens (:mod:`hmm_nmt.data.documents`): document context for NER. ``hmm-nmt-tag`` splits the predictions
back into sentences; the validation accuracy then counts the separators, the entity scores do not change.

Tag schemes (entity and chunk tags ``O``/``B-X``/``I-X``/``E-X``/``S-X``): ``--data-tag-scheme`` is the
scheme the files are written in (detected from the training file when omitted), ``--tag-scheme`` the one
the model is trained and decodes in (default: the file's); tags are converted on reading
(:mod:`hmm_nmt.data.tag_schemes`), so the tag dictionary holds training-scheme tags, and predictions are
converted back (:meth:`SequenceTaggingTask.to_file_scheme`) to be scored in the file's scheme. Both
resolved names are written into the task's args, hence into every checkpoint.
:meth:`SequenceTaggingTask.tag_constraints` gives the training scheme's allowed transitions over the tag
dictionary (special symbols never allowed), the constraint of ``--decoding viterbi`` and of
``bilstm_crf_tagger``'s CRF.

Dictionaries are built from the training split (``--word-min-count``; ``--lowercase`` folds words). If
the data directory holds ``dict.words.txt`` / ``dict.tags.txt`` they are loaded instead. Both are fairseq
:class:`~fairseq.data.Dictionary` objects, so both have the special symbols ``<s> <pad> </s> <unk>``
first; tags never seen in training map to the tag ``<unk>``.

Model contract (what a tagger built for this task must honour; ``iohmm_tagger`` relies on it)
------------------------------------------------------------------------------------------------
* The model is built by ``build_model(args, task)`` and reads ``task.source_dictionary`` (words) and
  ``task.target_dictionary`` (tags); it scores all ``len(task.target_dictionary)`` tag indices (the
  criterion and ``hmm-nmt-tag`` never predict the special ones).
* ``model(src_tokens, src_lengths)`` takes ``src_tokens`` (B, T) word indices, right padded with
  ``source_dictionary.pad()``, no BOS/EOS, and ``src_lengths`` (B,), and returns a tensor (B, T, n_tags)
  of log-probabilities or logits (values at padded positions are ignored). When the task's args ask for
  character features (``--char-embed-dim``), the batches also carry ``src_chars`` (B, T, C): the character
  ids of each token's raw word (original casing, also with ``--lowercase``; unseen words included) over the
  word dictionary's alphabet (:mod:`hmm_nmt.data.chars`, :meth:`SequenceTaggingTask.char_alphabet`), right
  padded with 0, aligned with ``src_tokens``; a model then takes ``src_chars=None`` as a keyword argument
  of ``forward`` (and of ``sequence_nll``/``constrained_viterbi`` if it has them).
* ``model.get_normalized_probs(net_output, log_probs)`` turns that output into (log-)probabilities;
  :class:`fairseq.models.BaseFairseqModel`'s default (a log-softmax of a tensor output) does, and is
  the identity on outputs that already are log-probabilities.
* ``sample["target"]`` is (B, T) tag indices, right padded with ``target_dictionary.pad()`` and aligned
  position by position with ``src_tokens`` (no EOS/BOS appended to either).

Use it with the criterion ``tagging_cross_entropy`` (token-level NLL, or the model's own
``sequence_nll`` when it has one; at validation it also logs tag ``accuracy`` and, for entity/chunk tags,
entity ``chunk_f1``/``chunk_precision``/``chunk_recall`` and ``invalid_sequences``).
"""
import logging
import os

import torch
from fairseq.data import Dictionary, LanguagePairDataset, ListDataset
from fairseq.tasks import LegacyFairseqTask, register_task

from hmm_nmt.data import documents
from hmm_nmt.data import tag_schemes as ts
from hmm_nmt.data.chars import CharAlphabet, collate_chars
from hmm_nmt.data.conll import CoNLLFormatError, check_column, conllu_column, read_conll, read_conllu, split_dev
from hmm_nmt.data.entity_eval import is_entity_tagset

logger = logging.getLogger(__name__)

_SUFFIXES = ("", ".txt", ".conll", ".bio")


class CharLanguagePairDataset(LanguagePairDataset):
    """A ``LanguagePairDataset`` whose items also carry the sentence's character ids ``chars`` (T, C) and
    whose batches ``net_input["src_chars"]`` (B, T, C), in the collater's (length-sorted) sentence order,
    right padded with 0 (C: the longest word of the batch, at most ``MAX_WORD_CHARS``)."""

    def __init__(self, *args, chars, **kwargs):
        super().__init__(*args, **kwargs)
        self.chars = chars

    def __getitem__(self, index):
        item = super().__getitem__(index)
        item["chars"] = self.chars[index]
        return item

    def collater(self, samples, pad_to_length=None):
        res = super().collater(samples, pad_to_length=pad_to_length)
        if not res:
            return res
        by_id = {s["id"]: s["chars"] for s in samples}
        src = res["net_input"]["src_tokens"]
        res["net_input"]["src_chars"] = collate_chars([by_id[i] for i in res["id"].tolist()], src.size(1))
        return res


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
        parser.add_argument("--data-format", choices=["conll", "conllu"], default="conll",
                            help="conll: white-space columns; conllu: CoNLL-U through the conllu library")
        parser.add_argument("--word-column", default=None,
                            help="0-based word column (negative: from the end; default 0, CoNLL-U: form)")
        parser.add_argument("--tag-column", default=None,
                            help="0-based tag column (negative: from the end; default -1); CoNLL-U: upos "
                                 "(default) or xpos")
        parser.add_argument("--tag-scheme", default=None, choices=list(ts.SCHEMES) + list(ts.ALIASES),
                            help="entity tag scheme to train and decode in (default: the data's)")
        parser.add_argument("--data-tag-scheme", default=None, choices=list(ts.SCHEMES) + list(ts.ALIASES),
                            help="entity tag scheme the files are written in (default: detected from train)")
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
        parser.add_argument("--max-source-positions", type=int, default=1024,
                            help="longest sentence kept (with --tagging-unit document: the size of a unit)")
        parser.add_argument("--tagging-unit", choices=["sentence", "document"], default="sentence",
                            help="document: tag consecutive sentences of a document (-DOCSTART-) as one sequence, "
                                 "joined by a separator (entity tags only)")

    def __init__(self, args, word_dict, tag_dict):
        super().__init__(args)
        self.word_dict = word_dict
        self.tag_dict = tag_dict
        self.data_scheme = getattr(args, "data_tag_scheme", None)
        self.train_scheme = getattr(args, "tag_scheme", None)
        if not is_entity_tagset(tag_dict.symbols[tag_dict.nspecial:]):
            self.data_scheme = self.train_scheme = None
        self.bio = self.train_scheme is not None  # entity/chunk tags: span metrics apply
        self._alphabet = None
        if self.document_units and not (self.bio and documents.SEPARATOR_TAG in tag_dict.symbols):
            raise ValueError("--tagging-unit document needs entity tags with an O tag (NER, chunking)")

    # ---------------------------------------------------------------- document units
    @property
    def document_units(self):
        """True under ``--tagging-unit document``."""
        return getattr(self.args, "tagging_unit", "sentence") == "document"

    def units_of(self, sentences):
        """The groups of sentence indices tagged as one sequence (:func:`hmm_nmt.data.documents.units`); one
        group per sentence in sentence mode."""
        if not self.document_units:
            return [[i] for i in range(len(sentences))]
        return documents.units([s.doc for s in sentences], [len(s) for s in sentences],
                               self.args.max_source_positions)

    # ---------------------------------------------------------------- characters
    @property
    def needs_chars(self):
        """True when the model has character features (``--char-embed-dim``): datasets then carry
        ``src_chars``."""
        return bool(getattr(self.args, "char_embed_dim", 0) or 0)

    def char_alphabet(self):
        """The character alphabet of the word dictionary (:class:`hmm_nmt.data.chars.CharAlphabet`); with
        ``--lowercase`` it also holds the case variants of those characters, since the characters are read
        from the original casing (the word lookup alone is lowercased)."""
        if self._alphabet is None:
            self._alphabet = CharAlphabet.from_dictionary(self.word_dict,
                                                          case_variants=bool(getattr(self.args, "lowercase", False)))
        return self._alphabet

    def encode_chars(self, words_per_sentence):
        """Per sentence, the (T, C) character ids of its raw words (original casing)."""
        alphabet = self.char_alphabet()
        return [alphabet.words_to_tensor(ws) for ws in words_per_sentence]

    def batch_chars(self, words_per_sentence, num_tokens=None):
        """``src_chars`` (B, T, C) of a batch of raw word lists, in their order."""
        return collate_chars(self.encode_chars(words_per_sentence), num_tokens)

    # ---------------------------------------------------------------- columns and schemes
    @staticmethod
    def data_format(args):
        return getattr(args, "data_format", None) or "conll"

    @classmethod
    def word_column_of(cls, args):
        col = getattr(args, "word_column", None)
        if cls.data_format(args) == "conllu":
            return conllu_column("form" if col is None else col)
        return 0 if col is None else int(col)

    @classmethod
    def tag_column_of(cls, args):
        col = getattr(args, "tag_column", None)
        if cls.data_format(args) == "conllu":
            return conllu_column("upos" if col is None else col)
        return -1 if col is None else int(col)

    @property
    def word_column(self):
        return self.word_column_of(self.args)

    @property
    def tag_column(self):
        return self.tag_column_of(self.args)

    @classmethod
    def resolve_schemes(cls, args, train_tags, tag_symbols=()):
        """Write the canonical ``data_tag_scheme`` / ``tag_scheme`` into ``args`` (None for non-entity tags).

        ``train_tags``: the training sentences' tag lists in the file's scheme (None if unavailable:
        the scheme is then guessed from the prefixes of ``tag_symbols``, a dictionary's tags)."""
        tags = {t for s in train_tags for t in s} if train_tags is not None else set(tag_symbols)
        if not is_entity_tagset(tags):
            if args.tag_scheme or args.data_tag_scheme:
                raise ValueError("--tag-scheme/--data-tag-scheme need entity tags (O, B-X, I-X, E-X, S-X)")
            return
        data = args.data_tag_scheme
        if data is None:
            data = ts.detect(train_tags if train_tags is not None else [[t] for t in tags if t[0] != "I"] or [["O"]])
            logger.info(f"tag scheme of the data: {data} (detected; --data-tag-scheme to override)")
        args.data_tag_scheme = ts.canonical(data)
        args.tag_scheme = ts.canonical(args.tag_scheme or args.data_tag_scheme)

    def convert_tags(self, tags, path=None, line=None):
        """One sentence's file tags in the training scheme."""
        if self.data_scheme is None or self.data_scheme == self.train_scheme:
            return tags
        try:
            return ts.convert(tags, self.data_scheme, self.train_scheme)[0]
        except ts.TagSchemeError as e:
            raise CoNLLFormatError(f"{path}:{line}: {e}") from e

    def to_file_scheme(self, tags):
        """Training-scheme tags (a prediction) written in the data file's scheme."""
        if self.data_scheme is None or self.data_scheme == self.train_scheme:
            return list(tags)
        from hmm_nmt.data.entity_eval import clean_tags

        return ts.convert(clean_tags(tags), self.train_scheme, self.data_scheme)[0]

    def tag_constraints(self):
        """``(allowed[prev][next], start[tag], end[tag])`` over the tag dictionary: the training scheme's
        transitions for entity tags, otherwise every non-special tag anywhere; special symbols never."""
        names = self.tag_dict.symbols
        if self.train_scheme is not None:
            return ts.transitions(names, self.train_scheme)
        ok = [k >= self.tag_dict.nspecial for k in range(len(names))]
        return [[a and b for b in ok] for a in ok], list(ok), list(ok)

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
    def read_file(cls, args, path, others=None):
        """The sentences of any file in the task's data format (no column check); for CoNLL column files,
        ``others`` collects the lines that are not tokens (:func:`~hmm_nmt.data.conll.read_conll`)."""
        if cls.data_format(args) == "conllu":
            return read_conllu(path)
        return read_conll(path, num_columns=getattr(args, "num_columns", None),
                          comment_prefix=getattr(args, "comment_prefix", None), others=others)

    @classmethod
    def _read(cls, args, path):
        sents = cls.read_file(args, path)
        check_column(path, sents, cls.word_column_of(args), "word")
        check_column(path, sents, cls.tag_column_of(args), "tag")
        return sents

    @classmethod
    def words_of(cls, args, sentence):
        words = sentence.column(cls.word_column_of(args))
        return [w.lower() for w in words] if args.lowercase else words

    # ---------------------------------------------------------------- setup
    @classmethod
    def setup_task(cls, args, **kwargs):
        data_dir = args.data if os.path.isdir(args.data) else None
        wpath = os.path.join(data_dir, "dict.words.txt") if data_dir else None
        tpath = os.path.join(data_dir, "dict.tags.txt") if data_dir else None
        for key in ("tag_scheme", "data_tag_scheme"):
            setattr(args, key, getattr(args, key, None))
        tcol = cls.tag_column_of(args)
        if wpath and os.path.isfile(wpath) and os.path.isfile(tpath):
            word_dict, tag_dict = Dictionary.load(wpath), Dictionary.load(tpath)
            symbols = tag_dict.symbols[tag_dict.nspecial:]
            if args.data_tag_scheme is None and is_entity_tagset(symbols):
                try:
                    train_tags = [s.column(tcol) for s in cls.read_split(args, "train")[1]]
                except (FileNotFoundError, CoNLLFormatError):
                    train_tags = None
                cls.resolve_schemes(args, train_tags, symbols)
            else:
                cls.resolve_schemes(args, None, symbols)
        else:
            path, sents = cls.read_split(args, "train")
            cls.resolve_schemes(args, [s.column(tcol) for s in sents])
            word_dict, tag_dict = Dictionary(), Dictionary()
            probe = cls.__new__(cls)
            probe.data_scheme, probe.train_scheme = args.data_tag_scheme, args.tag_scheme
            if getattr(args, "tagging_unit", "sentence") == "document":
                word_dict.add_symbol(documents.SEPARATOR, n=max(len(sents), args.word_min_count))
            for s in sents:
                for w in cls.words_of(args, s):
                    word_dict.add_symbol(w)
                for t in probe.convert_tags(s.column(tcol), path, s.lines[0]):
                    tag_dict.add_symbol(t)
            word_dict.finalize(threshold=args.word_min_count, padding_factor=1)
            tag_dict.finalize(padding_factor=1)
        logger.info(f"[words] dictionary: {len(word_dict)} types; [tags] dictionary: {len(tag_dict)} types "
                    f"({' '.join(tag_dict.symbols[tag_dict.nspecial:][:40])})"
                    + (f"; tag scheme {args.data_tag_scheme} in the data, {args.tag_scheme} in training"
                       if args.tag_scheme else ""))
        return cls(args, word_dict, tag_dict)

    def encode(self, sentences, path=None, groups=None):
        """(word index tensors, tag index tensors) of CoNLL sentences, no EOS; with ``groups`` (see
        :meth:`units_of`) one pair per group, its sentences joined by the document separator."""
        words = [self.words_of(self.args, s) for s in sentences]
        tags = [self.convert_tags(s.column(self.tag_column), path, s.lines[0]) for s in sentences]
        if groups is not None:
            words = [documents.join(words, g, documents.SEPARATOR) for g in groups]
            tags = [documents.join(tags, g, documents.SEPARATOR_TAG) for g in groups]
        src = [torch.LongTensor([self.word_dict.index(w) for w in ws]) for ws in words]
        tgt = [torch.LongTensor([self.tag_dict.index(t) for t in ts_]) for ts_ in tags]
        return src, tgt

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        path, sents = self.read_split(self.args, split)
        if sents is None:
            raise FileNotFoundError(f"no {split} file for data={self.args.data!r} (see --{split}-file)")
        groups = self.units_of(sents) if self.document_units else None
        src, tgt = self.encode(sents, path, groups)
        unk_tags = sum(int((t == self.tag_dict.unk()).sum()) for t in tgt)
        if unk_tags:
            logger.warning(f"{path} [{split}]: {unk_tags} tags not seen in training (counted as errors)")
        chars = None
        if self.needs_chars:
            raw = [s.column(self.word_column) for s in sents]
            if groups is not None:
                raw = [documents.join(raw, g, documents.SEPARATOR) for g in groups]
            chars = self.encode_chars(raw)
        self.datasets[split] = self.build_dataset(src, tgt, chars)
        units = f" in {len(groups)} document units" if groups is not None else ""
        logger.info(f"{path} [{split}]: {len(sents)} sentences{units}, {sum(len(s) for s in sents)} tokens")

    def build_dataset(self, src, tgt=None, chars=None):
        """The dataset of encoded sentences; with ``chars`` (per sentence, (T, C) character ids, see
        :meth:`encode_chars`) its batches also carry ``net_input["src_chars"]``."""
        import numpy as np

        sizes = np.array([len(s) for s in src], dtype=np.int64)
        cls, extra = (LanguagePairDataset, {}) if chars is None else (CharLanguagePairDataset, {"chars": chars})
        return cls(
            ListDataset(src, sizes), sizes, self.word_dict,
            ListDataset(tgt, sizes) if tgt is not None else None, sizes if tgt is not None else None,
            self.tag_dict, left_pad_source=False, left_pad_target=False, input_feeding=False, **extra,
        )

    def build_dataset_for_inference(self, src_tokens, src_lengths, src_words=None, **kwargs):
        """Batches of ``src_tokens``; with ``src_words`` (the raw words of each sentence) they also carry
        ``src_chars`` (without, a tagger with character features reads the dictionary strings)."""
        import numpy as np

        sizes = np.array(src_lengths)
        chars = self.encode_chars(src_words) if src_words is not None else None
        cls, extra = (LanguagePairDataset, {}) if chars is None else (CharLanguagePairDataset, {"chars": chars})
        return cls(ListDataset(src_tokens, sizes), src_lengths, self.word_dict,
                   left_pad_source=False, input_feeding=False, **extra)

    def max_positions(self):
        return (self.args.max_source_positions, self.args.max_source_positions)

    @property
    def source_dictionary(self):
        return self.word_dict

    @property
    def target_dictionary(self):
        return self.tag_dict


__all__ = ["SequenceTaggingTask", "CoNLLFormatError", "is_bio_tagset"]
