"""Transformer encoder + hidden neural Markov chain (HNMC) decoder, ``--arch transformer_hnmc``.

Two decoders, chosen by ``--hnmc-decoder``: ``transformer`` (default) puts the HNMC on top of a small
transformer decoder as its output structure (:mod:`hmm_nmt.models.chain_output_decoder`); ``chain``, this
module's :class:`HNMCDecoder`, makes the HNMC the decoder's only memory, as follows.

The chain-only decoder is an HNMC (:class:`hmm_nmt.hmm.hnmc.HNMCLayer`) over ``--hnmc-states`` N hidden states,
run left to right: only the entropic *forward* exists causally (the backward needs the future targets), so
the decoder state after step t is the normalised entropic forward

    alpha_t(i) ∝ sum_j alpha_{t-1}(j) f(W o_t + U onehot(j) + c)_i,   alpha_{-1} uniform,

whose observation ``o_t = [x_t ; ctx_t]`` joins the embedding of the previous target word (plus its
position), ``x_t``, with a cross-attention context ``ctx_t`` over the encoder output queried by ``x_t``.
``alpha_t`` is p(state_t | y_<t, source) and the next word is predicted by mixing per-state emission
distributions::

    p(y_t = w | y_<t, source) = sum_i alpha_t(i) softmax_w(S_i . E_w + b_w)

(``S`` (N, d) state vectors, ``E`` the output embedding, shared with the input embedding under
``--share-decoder-input-output-embed``). The decoder returns these log-probabilities as its "logits"
(log-softmax leaves them unchanged), ``features_only`` returns log alpha (B, T, N), and ``extra["attn"]``
carries the cross-attention weights for ``--print-alignment``.

Incremental decoding: the incremental state is the vector log alpha_{t-1} (B, N) (plus the attention's
cached keys/values); ``reorder_incremental_state`` reorders it with the beam, so fairseq's stock
``SequenceGenerator`` (``fairseq-generate``, any beam) works. Step by step equals the full forward
(tested).

Cost: with the default ``--hnmc-activation exp`` (one of the paper's positive activations) the potential
factorises (``exp(W o_t + c)_i exp(U_ij)``, an HMM with transition weights exp(U)) and each step is one
(B, N) x (N, N) product, which allows hundreds of states (default N = 128); with ``melu`` or ``sigmoid``
every step builds an (N, N) potential matrix per sentence, so training holds (B, T, N, N) tensors.

Limits: the attention query is the previous target word and its position only, so the decoder has no
alignment/coverage state besides alpha, and the emission mixture has at most N distinct word
distributions, a bottleneck for real vocabularies (docs/translation.md).
"""
import math
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import FairseqIncrementalDecoder, register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import FairseqDropout, MultiheadAttention, PositionalEmbedding
from torch import Tensor

from hmm_nmt.hmm.hnmc import HNMCLayer
from hmm_nmt.hmm.precision import upcast
from hmm_nmt.models.chain_output_decoder import HNMCOutputDecoder
from hmm_nmt.options import positive_int, set_default


class HNMCDecoder(FairseqIncrementalDecoder):
    """HNMC decoder; see the module docstring."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(dictionary)
        dim = embed_tokens.embedding_dim
        self.padding_idx = embed_tokens.padding_idx
        self.max_target_positions = args.max_target_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if args.no_scale_embedding else math.sqrt(dim)
        self.embed_positions = (
            PositionalEmbedding(args.max_target_positions, dim, self.padding_idx, learned=args.decoder_learned_pos)
            if not args.no_token_positional_embeddings else None
        )
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)
        self.attn = MultiheadAttention(dim, args.decoder_attention_heads, kdim=args.encoder_embed_dim,
                                       vdim=args.encoder_embed_dim, dropout=args.attention_dropout,
                                       encoder_decoder_attention=True)
        self.attn_norm = nn.LayerNorm(dim)
        self.hnmc = HNMCLayer(2 * dim, args.hnmc_states, args.hnmc_activation)
        # emission logits S_i . E_w start with a standard deviation of about 4 (E has std dim^-1/2): distinct,
        # peaked word distributions per state. With near-uniform emissions the mixture does not depend on
        # alpha, no gradient reaches the chain and attention, and training stalls at a target-side LM
        # (measured on the toy corpus: valid nll 3.4 nats after 15 epochs with std dim^-1/2, 0.5 after 6)
        self.state_vectors = nn.Parameter(torch.randn(args.hnmc_states, dim) * 4.0)
        if args.share_decoder_input_output_embed:
            self.output_weight = None
        else:
            self.output_weight = nn.Parameter(torch.randn(len(dictionary), dim) * dim ** -0.5)
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary)))

    # ------------------------------------------------------------------ observations
    def observations(self, prev_output_tokens, encoder_out, incremental_state=None):
        """o_t = [x_t ; ctx_t] (B, T', 2d) for the tokens to process (T' = 1 when incremental)."""
        positions = (self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
                     if self.embed_positions is not None else None)
        tokens = prev_output_tokens
        if incremental_state is not None:
            tokens = prev_output_tokens[:, -1:]
            positions = positions[:, -1:] if positions is not None else None
        x = self.embed_scale * self.embed_tokens(tokens)
        if positions is not None:
            x = x + positions
        x = self.dropout_module(x)
        enc = encoder_out["encoder_out"][0]  # (S, B, C)
        enc_pad = encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) > 0 else None
        ctx, attn = self.attn(query=self.attn_norm(x).transpose(0, 1), key=enc, value=enc, key_padding_mask=enc_pad,
                              incremental_state=incremental_state, static_kv=True, need_weights=True)
        ctx = self.dropout_module(ctx.transpose(0, 1))
        return torch.cat([x, ctx], dim=-1), tokens, attn

    # ------------------------------------------------------------------ the chain
    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **unused):
        """log alpha (B, T', N): the normalised entropic forward after each step, and extras."""
        obs, tokens, attn = self.observations(prev_output_tokens, encoder_out, incremental_state)
        if incremental_state is None:
            log_alpha = self.hnmc.forward_only(obs, tokens.ne(self.padding_idx))
        else:
            state = self.get_incremental_state(incremental_state, "hnmc_state")
            prev = (state["log_alpha"] if state is not None and "log_alpha" in state
                    else self.hnmc.initial_log_alpha(obs.size(0), obs))
            log_alpha = self.hnmc.step(obs[:, 0], prev).unsqueeze(1)
            self.set_incremental_state(incremental_state, "hnmc_state", {"log_alpha": log_alpha[:, 0]})
        return log_alpha, {"attn": [attn], "inner_states": None}

    def emission_log_probs(self):
        """(N, V) log p(w | state i)."""
        weight = self.embed_tokens.weight if self.output_weight is None else self.output_weight
        return F.log_softmax(upcast(F.linear(self.state_vectors, weight, self.output_bias)), dim=-1)

    def output_layer(self, log_alpha):
        """Mixture: log sum_i alpha_t(i) p(w | i) -> (B, T', V)."""
        log_emit = self.emission_log_probs()
        # logsumexp_i (log alpha_i + log e_iw) as a matmul: both factors are shifted by their maxima (over
        # states), so the largest term of every sum is exp(0 + 0)-scaled and nothing over/underflows unless
        # a word is e^-80 times less likely than both maxima (then clamped)
        la = upcast(log_alpha)
        a_max = la.max(dim=-1, keepdim=True).values  # (B, T', 1)
        m = log_emit.max(dim=0, keepdim=True).values  # (1, V)
        mixed = torch.matmul((la - a_max).exp(), (log_emit - m).exp())
        return torch.log(mixed.clamp(min=torch.finfo(mixed.dtype).tiny)) + a_max + m

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **unused):
        log_alpha, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if features_only:
            return log_alpha, extra
        return self.output_layer(log_alpha), extra

    def get_normalized_probs_scriptable(self, net_output, log_probs, sample=None):
        # net_output[0] already is log p(y_t | y_<t, source); log_softmax is the identity on it but keeps
        # the generator's temperature (it divides net_output[0]) meaningful
        out = upcast(net_output[0])
        return utils.log_softmax(out, dim=-1) if log_probs else utils.softmax(out, dim=-1)

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor):
        state = self.get_incremental_state(incremental_state, "hnmc_state")
        if state is not None and state.get("log_alpha") is not None:
            state["log_alpha"] = state["log_alpha"].index_select(0, new_order)
            self.set_incremental_state(incremental_state, "hnmc_state", state)

    def max_positions(self):
        return self.max_target_positions


@register_model("transformer_hnmc")
class TransformerHNMCModel(TransformerModel):
    """fairseq's transformer encoder with the HNMC decoder of this module."""

    @classmethod
    def hub_models(cls):
        return {}

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument("--hnmc-states", type=positive_int, metavar="N", help="hidden states of the HNMC decoder")
        parser.add_argument("--hnmc-activation", choices=["melu", "exp", "sigmoid"],
                            help="positive last activation of the HNMC network")
        parser.add_argument("--hnmc-decoder", choices=["transformer", "chain"],
                            help="transformer (default): the chain is the output structure over a "
                                 "--decoder-layers transformer decoder (chain_output_decoder.py); chain: the "
                                 "chain is the decoder's only memory (this module's HNMCDecoder)")

    @classmethod
    def build_model(cls, args, task):
        transformer_hnmc(args)
        if args.hnmc_states < 1:
            raise ValueError(f"--hnmc-states must be positive, got {args.hnmc_states}")
        return super().build_model(args, task)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        if args.hnmc_decoder == "transformer":
            return HNMCOutputDecoder(args, tgt_dict, embed_tokens)
        return HNMCDecoder(args, tgt_dict, embed_tokens)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens=True,
                features_only=False, alignment_layer=None, alignment_heads=None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only)


@register_model_architecture("transformer_hnmc", "transformer_hnmc")
def transformer_hnmc(args):
    # checkpoints of the chain-only decoder predate the option: load them with
    # --model-overrides "{'hnmc_decoder': 'chain'}"
    args.hnmc_decoder = getattr(args, "hnmc_decoder", None) or "transformer"
    set_default(args, "hnmc_states", 32 if args.hnmc_decoder == "transformer" else 128)
    args.hnmc_activation = getattr(args, "hnmc_activation", None) or "exp"
    base_architecture(args)
