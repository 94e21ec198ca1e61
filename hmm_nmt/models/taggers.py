"""Sequence taggers for the ``sequence_tagging`` task: HNMC, HNMC2, HNMC-CN and the paper's baselines.

One model, ``sequence_tagger``, with an architecture per sequence core::

    hnmc_tagger  hnmc2_tagger  hnmc_cn_tagger      (hidden neural Markov chains, hmm_nmt.hmm.hnmc)
    rnn_tagger   birnn_tagger                      (tanh RNN, left-to-right / bidirectional)
    lstm_tagger  gru_tagger                        (left-to-right LSTM / GRU)
    bilstm_tagger  bigru_tagger                    (bidirectional LSTM / GRU)
    bilstm_crf_tagger                              (BiLSTM emissions + linear-chain CRF, Lample et al. 2016)

``bilstm_crf_tagger`` is a BiLSTM (architecture 2 by default: ``--num-layers`` BiLSTM layers, then an affine
map to tag scores) whose scores are the emissions of a :class:`~hmm_nmt.hmm.crf.LinearChainCRF` constrained
by the task's training tag scheme (``task.tag_constraints()``); it is trained on the CRF's sequence NLL
(:meth:`SequenceTaggerModel.sequence_nll`, which ``tagging_cross_entropy`` uses when a model has it), its
``forward`` returns the CRF's log marginals p(y_t | x) (the contract's log-probabilities, whose arg-max is
the MPM) and Viterbi decoding is the CRF's.

Character features (every tagger, off by default): ``--char-embed-dim D --char-hidden H`` runs a character
BiLSTM (D-dimensional character embeddings, H units per direction) over each word's characters and
concatenates its two final states to the word embedding. The characters are the real ones of every word,
including words first seen at test time (``<unk>`` for the word embedding): the task puts them into the
batch as ``net_input["src_chars"]`` (B, T, C), ids over the alphabet of the word dictionary's characters
(:mod:`hmm_nmt.data.chars`), read from the original casing even with ``--lowercase``. Every scoring method
(``forward``, ``sequence_nll``, ``viterbi``, ``constrained_viterbi``) takes ``src_chars=None``; without it
the characters are those of the dictionary strings, as in older versions (the same features for a word of
the dictionary; one unknown character for ``<unk>``).

Singleton replacement (every tagger, off by default; Lample et al. 2016, section 4): ``--singleton-unk P``
replaces each training-set singleton (a word seen once in training, from the word dictionary's counts) by
``<unk>`` in the word-embedding lookup with probability P at training time, so the ``<unk>`` row is trained on
rare words and the model learns to lean on the character features for them; the characters stay the word's
own. Evaluation and tagging never replace.

All share the embedding options (``--embed-dim``, learned, or ``--embed-path`` pretrained vectors from a
text file with one ``word v1 ... vD`` per line, an optional ``count dim`` header line, ``--freeze-embed``)
and the paper's three architectures (``--tagger-architecture``, alias ``--hnmc-architecture``):

1. the model only: its states (hidden units) are the tags,
2. ``--num-layers`` models of ``--hidden-size`` then an affine map and a softmax,
3. ``--num-layers`` models of ``--hidden-size`` then a model whose states are the tags.

Every model ends with a softmax over tags (log-probabilities out): for the RNNs, a log-softmax of the
tanh outputs (bidirectional: forward + backward outputs summed where the tags are the hidden units,
concatenated elsewhere; ``--hidden-size`` is per direction); for the HNMCs, the log of the EFB
posteriors, already a distribution. ``forward(src_tokens, src_lengths, src_chars=None)`` returns (B, T, n_tags), the
contract of :mod:`hmm_nmt.tasks.sequence_tagging`.
"""
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture

from hmm_nmt.hmm.crf import LinearChainCRF
from hmm_nmt.hmm.hnmc import make_architecture
from hmm_nmt.models.char_features import CharEncoder
from hmm_nmt.options import nonnegative_int, positive_int, set_default

logger = logging.getLogger(__name__)

CORES = ("hnmc", "hnmc2", "hnmc_cn", "rnn", "birnn", "bilstm", "bigru", "lstm", "gru", "bilstm_crf")
_RNN = {"rnn": (nn.RNN, False), "birnn": (nn.RNN, True), "bilstm": (nn.LSTM, True), "bigru": (nn.GRU, True),
        "lstm": (nn.LSTM, False), "gru": (nn.GRU, False), "bilstm_crf": (nn.LSTM, True)}


def read_embedding_file(path, dictionary, embed_dim, lowercase_fallback=True):
    """Vectors for the words of ``dictionary`` from a text file (word2vec/GloVe text format).

    Returns ``(tensor (len(dictionary), embed_dim) or None rows, found mask)``. A line whose vector has
    another size than ``embed_dim`` raises ``ValueError`` naming the file and line.
    """
    wanted = {dictionary[i]: i for i in range(dictionary.nspecial, len(dictionary))}
    lower = {}
    if lowercase_fallback:
        for w, i in wanted.items():
            lower.setdefault(w.lower(), []).append(i)
    vectors = torch.zeros(len(dictionary), embed_dim)
    found = torch.zeros(len(dictionary), dtype=torch.bool)
    exact = torch.zeros(len(dictionary), dtype=torch.bool)
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.rstrip().split(" ")
            if lineno == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # word2vec header "count dim"
            if len(parts) < 2:
                continue
            if len(parts) - 1 != embed_dim:
                raise ValueError(f"{path}:{lineno}: vector of size {len(parts) - 1}, expected --embed-dim {embed_dim}")
            word = parts[0]
            targets = []
            if word in wanted:
                targets.append((wanted[word], True))
            for i in lower.get(word, []):
                targets.append((i, False))
            if not targets:
                continue
            vec = torch.tensor([float(x) for x in parts[1:]])
            for i, is_exact in targets:
                if is_exact or not exact[i]:
                    vectors[i] = vec
                    found[i] = True
                    exact[i] |= is_exact
    return vectors, found


class RNNCore(nn.Module):
    """A (bi)directional RNN/LSTM/GRU layer on right-padded input (packed, so padding never leaks)."""

    def __init__(self, kind, input_dim, hidden_size, combine="concat"):
        super().__init__()
        cls, self.bidirectional = _RNN[kind]
        kwargs = {"nonlinearity": "tanh"} if cls is nn.RNN else {}
        self.rnn = cls(input_dim, hidden_size, batch_first=True, bidirectional=self.bidirectional, **kwargs)
        self.combine = combine
        self.output_dim = hidden_size * (2 if self.bidirectional and combine == "concat" else 1)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        if self.bidirectional and self.combine == "sum":
            fwd, bwd = out.chunk(2, dim=-1)
            out = fwd + bwd
        return out


class RNNArchitecture(nn.Module):
    """The paper's architectures 1-3 for the RNN baselines (log-probabilities out; raw scores with
    ``normalize=False``, the emissions of a CRF)."""

    def __init__(self, kind, architecture, input_dim, num_outputs, hidden_size, num_layers=1, normalize=True):
        super().__init__()
        self.normalize = normalize
        layers, dim = [], input_dim
        if architecture in (2, 3):
            for _ in range(num_layers):
                layers.append(RNNCore(kind, dim, hidden_size, "concat"))
                dim = layers[-1].output_dim
        if architecture in (1, 3):
            layers.append(RNNCore(kind, dim, num_outputs, "sum"))
            self.classifier = None
        elif architecture == 2:
            self.classifier = nn.Linear(dim, num_outputs)
        else:
            raise ValueError(f"architecture must be 1, 2 or 3, got {architecture}")
        self.layers = nn.ModuleList(layers)

    def forward(self, x, lengths):
        for layer in self.layers:
            x = layer(x, lengths)
        if self.classifier is not None:
            x = self.classifier(x)
        return F.log_softmax(x, dim=-1) if self.normalize else x


@register_model("sequence_tagger")
class SequenceTaggerModel(BaseFairseqModel):
    """Embedding + sequence core + softmax over tags; see the module docstring."""

    def __init__(self, args, embed, core, padding_idx, chars=None, crf=None, words=None):
        super().__init__()
        self.args = args
        self.embed = embed
        self.core = core
        self.padding_idx = padding_idx
        self.dropout = nn.Dropout(args.dropout)
        self.core_kind = args.tagger_core
        if chars is not None:
            self.chars = chars
        if crf is not None:
            self.crf = crf
        self.singleton_unk = getattr(args, "singleton_unk", 0.0) or 0.0
        if self.singleton_unk > 0:
            if words is None:
                raise ValueError("--singleton-unk needs the word dictionary (its training counts)")
            self.unk_idx = words.unk()
            # not a parameter: rebuilt from the dictionary, so checkpoints stay as they were
            single = torch.tensor([c == 1 for c in words.count], dtype=torch.bool)
            single[: words.nspecial] = False
            self.register_buffer("singletons", single, persistent=False)

    @staticmethod
    def add_args(parser):
        parser.add_argument("--tagger-core", choices=CORES, help="sequence core (set by the --arch)")
        parser.add_argument("--tagger-architecture", "--hnmc-architecture", dest="tagger_architecture",
                            type=int, choices=[1, 2, 3],
                            help="1: model only; 2: model + feed-forward; 3: two models stacked")
        parser.add_argument("--embed-dim", type=positive_int, help="word embedding size")
        parser.add_argument("--embed-path", type=str, help="pretrained word vectors (text: word v1 ... vD)")
        parser.add_argument("--freeze-embed", action="store_true", help="do not train the embeddings")
        parser.add_argument("--hidden-size", type=positive_int, help="hidden size (states/units, per direction) of arch 2/3")
        parser.add_argument("--num-layers", type=positive_int, help="stacked hidden sequence layers in arch 2/3 (K)")
        parser.add_argument("--char-embed-dim", type=nonnegative_int,
                            help="character embedding size of the char BiLSTM word features (0: none)")
        parser.add_argument("--char-hidden", type=positive_int, help="char BiLSTM units per direction (default 25)")
        parser.add_argument("--dropout", type=float, help="dropout on the embeddings")
        parser.add_argument("--singleton-unk", type=float, metavar="P",
                            help="at training, replace each training singleton by <unk> in the word embedding "
                                 "lookup with probability P (Lample et al. 2016; characters unchanged)")
        parser.add_argument("--hnmc-activation", choices=["melu", "exp", "sigmoid"],
                            help="positive last activation of the HNMC networks")

    @classmethod
    def build_model(cls, args, task):
        base_tagger(args)
        words, tags = task.source_dictionary, task.target_dictionary
        embed = nn.Embedding(len(words), args.embed_dim, padding_idx=words.pad())
        nn.init.normal_(embed.weight, mean=0.0, std=args.embed_dim ** -0.5)
        if args.embed_path:
            vectors, found = read_embedding_file(args.embed_path, words, args.embed_dim)
            with torch.no_grad():
                embed.weight[found] = vectors[found]
            logger.info(f"{args.embed_path}: pretrained vectors for {int(found.sum())} of "
                        f"{len(words) - words.nspecial} words")
        with torch.no_grad():
            embed.weight[words.pad()] = 0
        if args.freeze_embed:
            embed.weight.requires_grad_(False)
        n_tags = len(tags)
        chars = None
        input_dim = args.embed_dim
        if args.char_embed_dim:
            alphabet = task.char_alphabet() if hasattr(task, "char_alphabet") else None
            chars = CharEncoder(words, args.char_embed_dim, args.char_hidden, alphabet)
            input_dim += chars.output_dim
        crf = None
        if args.tagger_core in ("hnmc", "hnmc2", "hnmc_cn"):
            core = make_architecture(args.tagger_core, args.tagger_architecture, input_dim, n_tags,
                                     args.hidden_size, args.num_layers, args.hnmc_activation)
        else:
            is_crf = args.tagger_core == "bilstm_crf"
            core = RNNArchitecture(args.tagger_core, args.tagger_architecture, input_dim, n_tags,
                                   args.hidden_size, args.num_layers, normalize=not is_crf)
            if is_crf:
                allowed, start, end = (task.tag_constraints() if hasattr(task, "tag_constraints")
                                       else (None, None, None))
                crf = LinearChainCRF(n_tags, allowed, start, end)
        return cls(args, embed, core, words.pad(), chars, crf, words)

    def features(self, src_tokens, src_chars=None):
        """Word embeddings (with character features when configured, from ``src_chars`` (B, T, C) when
        given, else from the dictionary strings; see :class:`CharEncoder`), after dropout: (B, T, D)."""
        x = self.embed(self._replace_singletons(src_tokens))
        if getattr(self, "chars", None) is not None:
            x = torch.cat([x, self.chars(src_tokens, src_chars)], dim=-1)
        return self.dropout(x)

    def _replace_singletons(self, src_tokens):
        if not (self.training and self.singleton_unk > 0):
            return src_tokens
        drop = self.singletons[src_tokens] & (torch.rand(src_tokens.shape, device=src_tokens.device)
                                              < self.singleton_unk)
        return src_tokens.masked_fill(drop, self.unk_idx)

    def _scores(self, src_tokens, src_lengths=None, src_chars=None):
        mask = src_tokens.ne(self.padding_idx)
        if src_lengths is None:
            src_lengths = mask.sum(1)
        x = self.features(src_tokens, src_chars)
        if self.core_kind.startswith("hnmc"):
            return self.core(x, mask), mask
        return self.core(x, src_lengths), mask

    def forward(self, src_tokens, src_lengths=None, src_chars=None, **kwargs):
        out, mask = self._scores(src_tokens, src_lengths, src_chars)
        if getattr(self, "crf", None) is not None:
            return self.crf.marginals(out, mask)  # log p(y_t | x) under the CRF
        return out

    @property
    def has_sequence_nll(self):
        return getattr(self, "crf", None) is not None

    def sequence_nll(self, src_tokens, src_lengths, target, src_chars=None):
        """-log p(target | x) per sentence (B,) under the CRF (``bilstm_crf_tagger`` only)."""
        if getattr(self, "crf", None) is None:
            raise ValueError(f"{self.core_kind}_tagger has no sequence NLL (token NLL only)")
        emissions, mask = self._scores(src_tokens, src_lengths, src_chars)
        return self.crf.nll(emissions, target.masked_fill(~mask, 0), mask)

    def crf_potentials(self, src_tokens, src_lengths=None, src_chars=None):
        """``(trans (K, K), start (B, K), emit (B, T, K))`` of the CRF (``bilstm_crf_tagger`` only; see
        :meth:`hmm_nmt.hmm.crf.LinearChainCRF.potentials`), what an ensemble averages."""
        if getattr(self, "crf", None) is None:
            raise ValueError(f"{self.core_kind}_tagger has no CRF")
        emissions, mask = self._scores(src_tokens, src_lengths, src_chars)
        return self.crf.potentials(emissions.float(), mask)

    def constrained_viterbi(self, src_tokens, src_lengths=None, constraints=None, src_chars=None):
        """The best tag path (B, T) (-1 on padding) under the model's own sequence scores with the tag
        scheme's ``constraints`` (``(allowed, start, end)``): the CRF's Viterbi (``bilstm_crf_tagger``),
        the last chain's Viterbi (HNMC architectures 1 and 3); None for the other taggers (the caller then
        decodes their per-token log-probabilities under the constraints)."""
        if getattr(self, "crf", None) is not None:
            emissions, mask = self._scores(src_tokens, src_lengths, src_chars)
            return self.crf.decode(emissions, mask, constraints)[1]
        if self.core_kind.startswith("hnmc") and self.args.tagger_architecture in (1, 3):
            return self.viterbi(src_tokens, src_lengths, constraints, src_chars)[1]
        return None

    def viterbi(self, src_tokens, src_lengths=None, constraints=None, src_chars=None):
        """The best tag path (B, T) (-1 on padding) of an HNMC tagger whose last chain's states are the
        tags (architectures 1 and 3), decoded over the chain's own potentials (plus ``constraints``, a tag
        scheme's ``(allowed, start, end)``, added to them); ``(score, path)``."""
        if not self.core_kind.startswith("hnmc"):
            raise ValueError(f"{self.core_kind} has no chain over the tags: no Viterbi path")
        mask = src_tokens.ne(self.padding_idx)
        return self.core.viterbi(self.features(src_tokens, src_chars), mask, constraints)

    def max_positions(self):
        return None


def base_tagger(args):
    args.tagger_architecture = getattr(args, "tagger_architecture", None) or 2
    set_default(args, "embed_dim", 100)
    args.embed_path = getattr(args, "embed_path", None)
    args.freeze_embed = getattr(args, "freeze_embed", False)
    set_default(args, "hidden_size", 32)
    set_default(args, "num_layers", 1)
    args.dropout = getattr(args, "dropout", None)
    if args.dropout is None:
        args.dropout = 0.0
    args.hnmc_activation = getattr(args, "hnmc_activation", None) or "melu"
    set_default(args, "char_embed_dim", 0)
    set_default(args, "char_hidden", 25)
    set_default(args, "singleton_unk", 0.0)
    if not 0.0 <= args.singleton_unk <= 1.0:
        raise ValueError(f"--singleton-unk {args.singleton_unk}: a probability in [0, 1] is needed")


def _arch(core):
    def fn(args):
        args.tagger_core = core
        base_tagger(args)

    fn.__name__ = f"{core}_tagger"
    return fn


for _core in CORES:
    register_model_architecture("sequence_tagger", f"{_core}_tagger")(_arch(_core))
