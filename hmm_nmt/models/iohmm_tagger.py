"""``--arch iohmm_tagger``: an input/output HMM (Bengio & Frasconi 1994) as a sequence tagger.

For the ``sequence_tagging`` task (contract in :mod:`hmm_nmt.tasks.sequence_tagging`). The input ``u_t``
is the embedding of word ``t``, optionally joined with a bidirectional LSTM state (``--iohmm-context
bilstm``, so ``u_t`` sees the whole sentence; ``none`` keeps the tagger causal, as in the paper); the
tags are the outputs ``y_t``. With the math of :mod:`hmm_nmt.hmm.iohmm`:

* state networks ``N_j``: ``phi_ij,t = P(x_t = i | x_{t-1} = j, u_t)``;
* output networks ``O_j``: ``eta_jt = P(y_t | x_t = j, u_t)``, a softmax over the tag dictionary;
* ``model(src_tokens, src_lengths)`` returns ``log eta_t`` with ``eta_t = sum_j zeta_jt eta_jt`` (Eq. 3)
  and ``zeta_t = P(x_t | u_1^t)`` (Eq. 2): the exact marginal ``P(y_t | u)`` of the IOHMM's sequence
  distribution (the states do not depend on the outputs), i.e. what the maximum-posterior-mode tag
  prediction of ``tagging_cross_entropy`` and ``hmm-nmt-tag`` needs;
* :meth:`IOHMMTagger.sequence_log_likelihood` is ``log P(y_1^T | u_1^T)`` (Eq. 6) by the forward
  algorithm; the criterion ``iohmm_tagging`` trains on it (maximum likelihood as in the paper), while
  ``tagging_cross_entropy`` trains the per-position marginals instead.

Character features (off by default), as for ``sequence_tagger``: ``--char-embed-dim D --char-hidden H`` joins
a character BiLSTM's word features (:class:`~hmm_nmt.models.char_features.CharEncoder`, over the batch's
``src_chars``, the words' own characters) to the word embedding before the context BiLSTM, so ``u_t`` also
describes words unseen in training.
"""
import torch
import torch.nn as nn
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture

from hmm_nmt.hmm import iohmm
from hmm_nmt.models.char_features import CharEncoder
from hmm_nmt.options import nonnegative_int, positive_int


@register_model("iohmm_tagger")
class IOHMMTagger(BaseFairseqModel):
    @staticmethod
    def add_args(parser):
        parser.add_argument("--embed-dim", type=positive_int, metavar="D", help="word embedding size")
        parser.add_argument("--iohmm-states", type=positive_int, metavar="N", help="number of IOHMM states n")
        parser.add_argument("--iohmm-context", choices=["none", "bilstm"],
                            help="u_t = word embedding (none), or joined with a BiLSTM state (bilstm)")
        parser.add_argument("--context-hidden", type=positive_int, metavar="H", help="BiLSTM size per direction")
        parser.add_argument("--iohmm-state-hidden", type=nonnegative_int, metavar="H",
                            help="hidden units of each state network N_j (0: linear)")
        parser.add_argument("--iohmm-output-hidden", type=nonnegative_int, metavar="H",
                            help="hidden units of each output network O_j (0: linear)")
        parser.add_argument("--iohmm-graph", choices=["ergodic", "left-to-right"], help="admissible transitions")
        parser.add_argument("--dropout", type=float, metavar="P", help="dropout on u_t")
        parser.add_argument("--char-embed-dim", type=nonnegative_int, metavar="D",
                            help="character embedding size of the char BiLSTM word features (0: none)")
        parser.add_argument("--char-hidden", type=positive_int, metavar="H", help="char BiLSTM units per direction")

    def __init__(self, args, word_dict, tag_dict, alphabet=None):
        super().__init__()
        self.padding_idx = word_dict.pad()
        self.embed = nn.Embedding(len(word_dict), args.embed_dim, padding_idx=self.padding_idx)
        nn.init.normal_(self.embed.weight, std=args.embed_dim ** -0.5)
        self.context = None
        u_dim = args.embed_dim
        if args.char_embed_dim:
            self.chars = CharEncoder(word_dict, args.char_embed_dim, args.char_hidden, alphabet)
            u_dim += self.chars.output_dim
        if args.iohmm_context == "bilstm":
            self.context = nn.LSTM(u_dim, args.context_hidden, batch_first=True, bidirectional=True)
            u_dim += 2 * args.context_hidden
        self.dropout = nn.Dropout(args.dropout)
        n = args.iohmm_states
        if n < 1:
            raise ValueError(f"--iohmm-states must be >= 1, got {n}")
        graph = iohmm.left_to_right_graph(n, 2) if args.iohmm_graph == "left-to-right" else None
        self.iohmm = iohmm.IOHMM(
            iohmm.StateNetworks(n, u_dim, hidden_dim=args.iohmm_state_hidden, graph=graph),
            iohmm.MultinomialOutputs(n, len(tag_dict), input_dim=u_dim, hidden_dim=args.iohmm_output_hidden),
            initial="learned",
        )

    @classmethod
    def build_model(cls, args, task):
        iohmm_tagger(args)
        alphabet = task.char_alphabet() if args.char_embed_dim and hasattr(task, "char_alphabet") else None
        return cls(args, task.source_dictionary, task.target_dictionary, alphabet)

    def inputs(self, src_tokens, src_lengths, src_chars=None):
        """``u`` (B, T, d) and the real-word mask (B, T)."""
        mask = src_tokens.ne(self.padding_idx)
        u = self.embed(src_tokens)
        if getattr(self, "chars", None) is not None:
            u = torch.cat([u, self.chars(src_tokens, src_chars)], -1)
        if self.context is not None:
            packed = nn.utils.rnn.pack_padded_sequence(u, src_lengths.cpu(), batch_first=True, enforce_sorted=False)
            c, _ = self.context(packed)
            c, _ = nn.utils.rnn.pad_packed_sequence(c, batch_first=True, total_length=u.size(1))
            u = torch.cat([u, c], -1)
        return self.dropout(u), mask

    def forward(self, src_tokens, src_lengths, src_chars=None, **kwargs):
        """``log P(y_t = c | u)`` (B, T, n_tags): Eq. 3 in log space."""
        u, mask = self.inputs(src_tokens, src_lengths, src_chars)
        B, T = src_tokens.shape
        log_phi = self.iohmm.state_networks(u)
        log_zeta = iohmm.state_distribution(log_phi, self.iohmm.log_zeta0(), mask)  # Eq. 2
        log_eta = self.iohmm.output_networks.log_probs(u, (B, T))  # (B, T, n, C)
        return torch.logsumexp(log_zeta.unsqueeze(-1) + log_eta, dim=2)

    def sequence_log_likelihood(self, src_tokens, src_lengths, target, src_chars=None):
        """``log P(y_1^T | u_1^T)`` per sentence (B,), Eq. 6 (``target`` padded like ``src_tokens``)."""
        u, mask = self.inputs(src_tokens, src_lengths, src_chars)
        return self.iohmm.log_likelihood(u, target, mask=mask)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        lp = net_output[0] if isinstance(net_output, (tuple, list)) else net_output
        return lp if log_probs else lp.exp()

    def max_positions(self):
        return None


@register_model_architecture("iohmm_tagger", "iohmm_tagger")
def iohmm_tagger(args):
    def default(name, value):
        if getattr(args, name, None) is None:
            setattr(args, name, value)

    default("embed_dim", 64)
    default("iohmm_states", 16)
    default("iohmm_context", "bilstm")
    default("context_hidden", 64)
    default("iohmm_state_hidden", 0)
    default("iohmm_output_hidden", 0)
    default("iohmm_graph", "ergodic")
    default("dropout", 0.1)
    default("char_embed_dim", 0)
    default("char_hidden", 25)
