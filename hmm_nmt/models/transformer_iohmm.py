"""``--arch transformer_iohmm``: a fairseq transformer encoder with an input/output HMM decoder.

Two decoders, chosen by ``--iohmm-decoder``: ``transformer`` (default) puts the IOHMM on top of a small
transformer decoder as its output structure (:mod:`hmm_nmt.models.chain_output_decoder`); ``chain``, this
module's :class:`IOHMMDecoder`, makes the IOHMM the decoder's only memory, as follows.

The chain-only decoder is the IOHMM of Bengio & Frasconi (1994) (math in :mod:`hmm_nmt.hmm.iohmm`) driven by the
input ``u_t = [E e_{t-1} ; c_t]``: the embedding of the previous target word joined with a cross-attention
context ``c_t`` over the encoder states (queried by that embedding plus its position).  With ``n`` states:

* state networks ``N_j``: ``phi_ij,t = P(x_t = i | x_{t-1} = j, u_t)``, a softmax over the successors of
  ``j`` (ergodic or left-to-right graph, ``--iohmm-graph``), linear or one hidden layer in ``u_t``;
* output networks ``O_j``: ``eta_jt(v) = softmax_v(W tanh(A_j u_t + a_j) + b)``, a state-specific hidden
  layer followed by a shared (optionally input-tied) output embedding ``W``;
* internal state ``zeta_it = P(x_t = i | e_<t, f)``: the forward recursion ``zeta_t = Phi_t alpha_hat_{t-1}``
  (Eq. 2) where ``alpha_hat_{t-1}`` is ``zeta_{t-1}`` updated with the observed ``e_{t-1}``;
* output ``p(e_t | e_<t, f) = sum_i zeta_it eta_it(e_t)`` (Eq. 3), whose product over ``t`` is exactly the
  IOHMM likelihood (6) of the target sentence, so the stock cross-entropy criteria train it.

``zeta`` (with the last output hidden layer) is the incremental state, reordered by
``reorder_incremental_state``, so stock ``fairseq-generate`` beam search decodes it.  The
``batch x target x states x vocab`` tensor is never built whole: it is computed in chunks of at most
``--iohmm-chunk-elements`` elements under activation checkpointing (recomputed in the backward pass).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import (
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.models.transformer import (
    DEFAULT_MAX_SOURCE_POSITIONS,
    DEFAULT_MAX_TARGET_POSITIONS,
    TransformerEncoder,
    TransformerModel,
)
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from fairseq.modules import LayerNorm, MultiheadAttention, PositionalEmbedding
from torch.utils.checkpoint import checkpoint

from hmm_nmt.hmm import iohmm
from hmm_nmt.models.chain_output_decoder import IOHMMOutputDecoder
from hmm_nmt.options import nonnegative_int, positive_int, set_default


@register_model("transformer_iohmm")
class TransformerIOHMMModel(FairseqEncoderDecoderModel):
    """Transformer encoder + IOHMM decoder (see the module docstring)."""

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument("--iohmm-states", type=positive_int, metavar="N", help="number of IOHMM states n")
        parser.add_argument("--iohmm-output-dim", type=positive_int, metavar="D",
                            help="hidden size of each output network O_j (= decoder-embed-dim to tie embeddings)")
        parser.add_argument("--iohmm-state-hidden", type=nonnegative_int, metavar="H",
                            help="hidden units of each state network N_j (0: linear softmax layer)")
        parser.add_argument("--iohmm-graph", choices=["ergodic", "left-to-right"],
                            help="admissible transitions: all, or j -> j..j+2 (Bakis)")
        parser.add_argument("--iohmm-chunk-elements", type=positive_int, metavar="E",
                            help="largest positions x states x vocab block computed at once (chain decoder)")
        parser.add_argument("--iohmm-decoder", choices=["transformer", "chain"],
                            help="transformer (default): the IOHMM is the output structure over a "
                                 "--decoder-layers transformer decoder (chain_output_decoder.py); chain: the "
                                 "IOHMM is the decoder's only memory (this module's IOHMMDecoder)")

    @classmethod
    def build_model(cls, args, task):
        transformer_iohmm(args)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        # the chain-only decoder has always ignored --share-all-embeddings; honouring it there would change
        # how its existing checkpoints load
        if getattr(args, "share_all_embeddings", False) and args.iohmm_decoder == "transformer":
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings requires a joined dictionary")
            if args.encoder_embed_dim != args.decoder_embed_dim:
                raise ValueError("--share-all-embeddings requires --encoder-embed-dim == --decoder-embed-dim")
            encoder_embed = TransformerModel.build_embedding(args, src_dict, args.encoder_embed_dim,
                                                             args.encoder_embed_path)
            decoder_embed = encoder_embed
            args.share_decoder_input_output_embed = True
        else:
            encoder_embed = TransformerModel.build_embedding(args, src_dict, args.encoder_embed_dim,
                                                             args.encoder_embed_path)
            decoder_embed = TransformerModel.build_embedding(args, tgt_dict, args.decoder_embed_dim,
                                                             args.decoder_embed_path)
        encoder = TransformerEncoder(args, src_dict, encoder_embed)
        if args.iohmm_decoder == "transformer":
            decoder = IOHMMOutputDecoder(args, tgt_dict, decoder_embed)
        else:
            decoder = IOHMMDecoder(args, tgt_dict, decoder_embed)
        return cls(encoder, decoder)


class IOHMMDecoder(FairseqIncrementalDecoder):
    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(dictionary)
        d = embed_tokens.embedding_dim
        n = args.iohmm_states
        if n < 1:
            raise ValueError(f"--iohmm-states must be >= 1, got {n}")
        self.n_states = n
        self.padding_idx = dictionary.pad()
        self.max_target_positions = args.max_target_positions
        self.chunk_elements = args.iohmm_chunk_elements
        self.dropout = nn.Dropout(args.dropout)
        self.embed_tokens = embed_tokens
        self.embed_scale = d ** 0.5
        self.embed_positions = (
            None if args.no_token_positional_embeddings
            else PositionalEmbedding(args.max_target_positions, d, self.padding_idx, learned=args.decoder_learned_pos)
        )
        self.query_norm = LayerNorm(d)
        self.attention = MultiheadAttention(d, args.decoder_attention_heads, kdim=args.encoder_embed_dim,
                                            vdim=args.encoder_embed_dim, dropout=args.attention_dropout,
                                            encoder_decoder_attention=True)
        u_dim = 2 * d  # u_t = [embedding of e_{t-1} ; cross-attention context]
        graph = iohmm.left_to_right_graph(n, 2) if args.iohmm_graph == "left-to-right" else None
        self.state_networks = iohmm.StateNetworks(n, u_dim, hidden_dim=args.iohmm_state_hidden, graph=graph)
        self.zeta0_logits = nn.Parameter(torch.zeros(n))
        # output networks O_j: state-specific hidden layer, shared output embedding
        self.output_dim = args.iohmm_output_dim
        self.output_hidden = nn.Linear(u_dim, n * self.output_dim)
        if args.share_decoder_input_output_embed:
            if self.output_dim != d:
                raise ValueError("--share-decoder-input-output-embed needs --iohmm-output-dim == decoder-embed-dim")
            self.output_embed = None
        else:
            self.output_embed = nn.Parameter(torch.randn(len(dictionary), self.output_dim) * self.output_dim ** -0.5)
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary)))

    # ---------------------------------------------------------------------------------------------
    def _out_weight(self):
        return self.embed_tokens.weight if self.output_embed is None else self.output_embed

    def _rows_per_chunk(self):
        return max(1, self.chunk_elements // (self.n_states * len(self.dictionary)))

    def _chunked(self, fn, *tensors):
        """Apply ``fn`` to row chunks of ``tensors`` (first dim), checkpointed when training."""
        outs = []
        rows = self._rows_per_chunk()
        for s in range(0, tensors[0].shape[0], rows):
            part = [x[s:s + rows] for x in tensors]
            if torch.is_grad_enabled() and any(x.requires_grad for x in part):
                outs.append(checkpoint(fn, *part, use_reentrant=False))
            else:
                outs.append(fn(*part))
        return torch.cat(outs, 0) if outs else tensors[0].new_zeros(0)

    def _logits(self, h):
        # (N, n, d_out) -> (N, n, V) scores of the output networks
        return F.linear(h, self._out_weight(), self.output_bias)

    def _log_eta_of(self, h, tokens):
        """``log eta_jt(tokens_t)`` (N, n) for hidden layers ``h`` (N, n, d_out)."""
        def fn(h_, tok):
            lognorm = torch.logsumexp(self._logits(h_), -1)
            w = self._out_weight()[tok]
            score = (h_ * w.unsqueeze(1)).sum(-1) + self.output_bias[tok].unsqueeze(1)
            return score - lognorm
        return self._chunked(fn, h, tokens)

    def _mixture(self, h, log_zeta):
        """``log sum_i zeta_i eta_i(v)`` (N, V) for ``h`` (N, n, d_out) and ``log_zeta`` (N, n)."""
        def fn(h_, lz):
            return torch.logsumexp(torch.log_softmax(self._logits(h_), -1) + lz.unsqueeze(-1), 1)
        return self._chunked(fn, h, log_zeta)

    def log_zeta0(self):
        return torch.log_softmax(self.zeta0_logits, 0)

    def inputs(self, prev_output_tokens, encoder_out, incremental_state=None):
        """``u_t`` (B, T, 2d) and the attention weights (B, T, S); incremental: last position only."""
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        emb = self.embed_tokens(prev_output_tokens)
        query = emb * self.embed_scale
        if positions is not None:
            query = query + positions
        query = self.query_norm(query)
        enc = encoder_out["encoder_out"][0]  # (S, B, C)
        pad = encoder_out["encoder_padding_mask"][0] if len(encoder_out.get("encoder_padding_mask", [])) else None
        ctx, attn = self.attention(query=query.transpose(0, 1), key=enc, value=enc, key_padding_mask=pad,
                                   static_kv=True, need_weights=True)
        u = torch.cat([self.dropout(emb), self.dropout(ctx.transpose(0, 1))], -1)
        return u, attn

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **kwargs):
        if features_only:
            raise NotImplementedError("the IOHMM decoder has no single feature vector per position")
        u, attn = self.inputs(prev_output_tokens, encoder_out, incremental_state)
        B, T = u.shape[:2]
        n, V = self.n_states, len(self.dictionary)
        log_phi = self.state_networks(u)  # (B, T, n, n)
        h = self.dropout(torch.tanh(self.output_hidden(u))).view(B, T, n, self.output_dim)
        # small enough: build log eta (B, T, n, V) once; otherwise two chunked, checkpointed passes
        log_eta = torch.log_softmax(self._logits(h), -1) if B * T * n * V <= self.chunk_elements else None
        if incremental_state is None:
            log_zeta = self._teacher_forced_states(prev_output_tokens, log_phi, h, log_eta)
        else:
            log_zeta = self._incremental_states(prev_output_tokens, log_phi, h, incremental_state)
        if log_eta is not None:
            lprobs = torch.logsumexp(log_eta + log_zeta.unsqueeze(-1), 2)
        else:
            lprobs = self._mixture(h.reshape(B * T, n, -1), log_zeta.reshape(B * T, n)).view(B, T, -1)
        return lprobs, {"attn": [attn], "zeta": log_zeta, "inner_states": None}

    def _teacher_forced_states(self, prev_output_tokens, log_phi, h, log_eta=None):
        """Predictive states for every position: the forward recursion over the observed prefix."""
        B, T, n = log_phi.shape[:3]
        mask = prev_output_tokens.ne(self.padding_idx)
        # log_f[t] = log eta_t(e_t), the word observed at t = the decoder input at t + 1; the last
        # position's observation does not influence any predictive state, it is left at f = 1
        log_f = log_phi.new_zeros(B, T, n)
        if T > 1:
            nxt = prev_output_tokens[:, 1:]
            if log_eta is not None:
                seen = log_eta[:, :-1].gather(-1, nxt[:, :, None, None].expand(B, T - 1, n, 1)).squeeze(-1)
            else:
                seen = self._log_eta_of(h[:, :-1].reshape(-1, n, self.output_dim), nxt.reshape(-1))
            seen = seen.view(B, T - 1, n).masked_fill(nxt.eq(self.padding_idx).unsqueeze(-1), 0.0)
            log_f = torch.cat([seen, log_f[:, :1]], 1)
        filt = iohmm.forward_filter(log_phi, log_f, self.log_zeta0().to(log_phi), mask)
        return filt.log_zeta

    def _incremental_states(self, prev_output_tokens, log_phi, h, incremental_state):
        cache = self.get_incremental_state(incremental_state, "iohmm")
        B, n = log_phi.shape[0], self.n_states
        if cache is None:  # first step: x_0 ~ zeta_0, nothing observed yet
            log_alpha = self.log_zeta0().to(log_phi).expand(B, n)
        else:  # observe e_{t-1} under the previous step's output networks, then move on
            log_f = self._log_eta_of(cache["h"], prev_output_tokens[:, -1])
            log_alpha, _ = iohmm.observe(cache["log_zeta"], log_f)
        log_zeta = iohmm.log_matvec(log_phi[:, 0].exp(), log_alpha).unsqueeze(1)
        self.set_incremental_state(incremental_state, "iohmm", {"log_zeta": log_zeta[:, 0], "h": h[:, 0]})
        return log_zeta

    def reorder_incremental_state(self, incremental_state, new_order):
        cache = self.get_incremental_state(incremental_state, "iohmm")
        if cache is not None:
            cache = {k: v.index_select(0, new_order) for k, v in cache.items()}
            self.set_incremental_state(incremental_state, "iohmm", cache)

    def max_positions(self):
        if self.embed_positions is None:
            return self.max_target_positions
        return min(self.max_target_positions, self.embed_positions.max_positions)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        # net_output[0] already holds log p(e_t | e_<t, f); renormalising is a no-op except after
        # sequence_generator's in-place temperature division
        lp = net_output[0]
        return utils.log_softmax(lp, dim=-1) if log_probs else utils.softmax(lp, dim=-1)


@register_model_architecture("transformer_iohmm", "transformer_iohmm")
def transformer_iohmm(args):
    # checkpoints of the chain-only decoder predate the option: load them with
    # --model-overrides "{'iohmm_decoder': 'chain'}"
    args.iohmm_decoder = getattr(args, "iohmm_decoder", None) or "transformer"
    set_default(args, "iohmm_states", 16)
    set_default(args, "iohmm_state_hidden", 0)
    args.iohmm_graph = getattr(args, "iohmm_graph", None) or "ergodic"
    set_default(args, "iohmm_chunk_elements", 2 ** 24)
    transformer_base_architecture(args)
    if getattr(args, "max_source_positions", None) is None:
        args.max_source_positions = DEFAULT_MAX_SOURCE_POSITIONS
    if getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = DEFAULT_MAX_TARGET_POSITIONS
    set_default(args, "iohmm_output_dim", args.decoder_embed_dim)
