r"""Decoders in which a hidden chain is the output structure over a small transformer decoder.

The first HNMC / IOHMM decoders (``--hnmc-decoder chain``, ``--iohmm-decoder chain``) make the chain the
decoder's only memory: its inputs are the previous word and one attention context, so nothing but the
N-state vector remembers what has been translated (docs/translation.md). Here (``--hnmc-decoder transformer``,
``--iohmm-decoder transformer``, the defaults) a fairseq transformer decoder of ``--decoder-layers``
layers reads the target prefix and the source, and the chain sits on top of it:

* ``s_t`` (B, T, d): the transformer decoder's output at position t (it has seen e_<t and, through its
  cross-attention, the source); ``ctx_t = sum_j a_tj h_j``: the source context under its last layer's
  cross-attention (averaged over heads, also returned as ``attn`` for ``--print-alignment``);
* transition networks read ``u_t = [s_t ; ctx_t]``: the HNMC potential ``f(W u_t + U onehot(j) + c)_i``
  (:class:`hmm_nmt.hmm.hnmc.HNMCLayer`), or the IOHMM state networks ``phi_ij,t = softmax_i(...)``
  (:class:`hmm_nmt.hmm.iohmm.StateNetworks`);
* emission networks: ``eta_{t,i}(v) = softmax_v(E_v . s_t + b_v + B_i(v))``, the transformer's own
  output layer plus a per-state word preference ``B_i(v) = c tanh(S_i . E_v / c)`` (S: (N, d) state
  vectors, E the output embedding, c = :data:`BIAS_BOUND`), computed by
  :mod:`hmm_nmt.hmm.state_softmax` without an (B, T, N, V) tensor;
* the decoder's output is the exact mixture ``p(e_t | e_<t, f) = sum_i w_t(i) eta_{t,i}(e_t)``, where
  ``w_t`` is the chain's state distribution: the normalised entropic forward alpha_t of the HNMC
  (exact EFB forward over u_1..u_t), or the IOHMM predictive state zeta_t (exact forward filter over
  u_1..u_t and the observed e_<t: Bayes update with ``eta_{t-1,i}(e_{t-1})`` then ``Phi_t``). For the
  IOHMM the product over t is its likelihood (Eq. 6) of the target sentence.

With one state the decoder is a transformer with a word bias (``b + B_1``) in its output layer. EOS is an
ordinary word of the shared softmax: whether to stop is read from ``s_t``, which sees the whole prefix and
the source, and the states only move its log-probability by less than 2c. The incremental state is the transformer's own
plus the chain's (B, N) vector (the IOHMM also keeps ``log Z_{t-1}`` to score e_{t-1} when it arrives);
reordering it with the beam lets fairseq's stock ``SequenceGenerator`` decode (tested: step-by-step == full
forward).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import FairseqIncrementalDecoder
from fairseq.models.transformer import TransformerDecoder

from hmm_nmt.hmm import iohmm, state_softmax
from hmm_nmt.hmm.hnmc import HNMCLayer
from hmm_nmt.hmm.precision import upcast

BIAS_BOUND = 8.0  # c: |B_i(v)| < c; it also bounds the relative size of the smallest sum term (e^-2c)


class ChainOutputDecoder(FairseqIncrementalDecoder):
    """Transformer decoder states -> chain over ``n_states`` states -> mixture of state emissions.

    Subclasses implement :meth:`chain_full` and :meth:`chain_step` (log state weights w_t, (B, T, N)).
    """

    state_key = "chain"

    def __init__(self, args, dictionary, embed_tokens, n_states):
        super().__init__(dictionary)
        if n_states < 1:
            raise ValueError(f"the number of chain states must be >= 1, got {n_states}")
        self.n_states = n_states
        self.padding_idx = dictionary.pad()
        # the transformer's output projection is replaced by the state emissions below
        self.transformer = TransformerDecoder(args, dictionary, embed_tokens, no_encoder_attn=False,
                                              output_projection=nn.Identity())
        # else its state-dict upgrade re-adds an output projection (a copy of the embedding) on loading
        self.transformer.share_input_output_embed = False
        d = self.transformer.output_embed_dim
        self.u_dim = d + args.encoder_embed_dim
        self.embed_tokens = embed_tokens
        if args.share_decoder_input_output_embed:
            if d != embed_tokens.embedding_dim:
                raise ValueError("--share-decoder-input-output-embed needs decoder output dim == embed dim")
            self.output_weight = None
        else:
            self.output_weight = nn.Parameter(torch.randn(len(dictionary), d) * d ** -0.5)
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary)))
        # S_i . E_v starts with std about 1 (E has std d^-1/2): distinct but not dominant state preferences
        self.state_vectors = nn.Parameter(torch.randn(n_states, d))

    # ------------------------------------------------------------------ shared parts
    def _out_weight(self):
        return self.embed_tokens.weight if self.output_weight is None else self.output_weight

    def log_bias(self):
        """B (N, V): bounded per-state word preferences."""
        raw = F.linear(self.state_vectors, self._out_weight())
        return state_softmax.bounded_bias(raw, BIAS_BOUND)

    def features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """``s`` (B, T', d), ``u = [s ; ctx]`` (B, T', d + C), context logits (B, T', V), attention (B, T', S)."""
        s, extra = self.transformer.extract_features(prev_output_tokens, encoder_out=encoder_out,
                                                     incremental_state=incremental_state)
        attn = extra["attn"][0]
        enc = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, C)
        ctx = torch.bmm(attn.to(enc), enc)
        u = torch.cat([s, ctx], -1)
        logits = F.linear(s, self._out_weight(), self.output_bias)
        return u, logits, attn

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False, **unused):
        u, logits, attn = self.features(prev_output_tokens, encoder_out, incremental_state)
        logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        log_bias = self.log_bias().to(logits)
        log_z = state_softmax.log_normalizers(logits, log_bias)  # (B, T', N)
        if incremental_state is None:
            log_w = self.chain_full(prev_output_tokens, u, logits, log_bias, log_z)
        else:
            log_w = self.chain_step(prev_output_tokens, u, log_bias, log_z, incremental_state)
        extra = {"attn": [attn], "inner_states": None, "log_states": log_w}
        if features_only:
            return log_w, extra
        return state_softmax.mixture_log_probs(logits, log_bias, log_w.to(logits) - log_z), extra

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        # net_output[0] already is log p(e_t | e_<t, f); log_softmax is the identity on it but keeps the
        # generator's temperature (it divides net_output[0]) meaningful
        out = upcast(net_output[0])
        return utils.log_softmax(out, dim=-1) if log_probs else utils.softmax(out, dim=-1)

    def reorder_incremental_state(self, incremental_state, new_order):
        # the transformer's attention caches are reordered by their own modules
        cache = self.get_incremental_state(incremental_state, self.state_key)
        if cache is not None:
            cache = {k: v.index_select(0, new_order) for k, v in cache.items()}
            self.set_incremental_state(incremental_state, self.state_key, cache)

    def max_positions(self):
        return self.transformer.max_positions()

    def _cache(self, incremental_state):
        return self.get_incremental_state(incremental_state, self.state_key)

    def _set_cache(self, incremental_state, **tensors):
        self.set_incremental_state(incremental_state, self.state_key, tensors)


class HNMCOutputDecoder(ChainOutputDecoder):
    """HNMC over transformer states: w_t = normalised entropic forward alpha_t over u_1..u_t."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens, args.hnmc_states)
        self.hnmc = HNMCLayer(self.u_dim, args.hnmc_states, args.hnmc_activation)

    def chain_full(self, prev_output_tokens, u, logits, log_bias, log_z):
        return self.hnmc.forward_only(u, prev_output_tokens.ne(self.padding_idx))

    def chain_step(self, prev_output_tokens, u, log_bias, log_z, incremental_state):
        cache = self._cache(incremental_state)
        prev = cache["log_alpha"] if cache is not None else self.hnmc.initial_log_alpha(u.size(0), u)
        log_alpha = self.hnmc.step(u[:, 0], prev)
        self._set_cache(incremental_state, log_alpha=log_alpha)
        return log_alpha.unsqueeze(1)


class IOHMMOutputDecoder(ChainOutputDecoder):
    """IOHMM over transformer states: w_t = zeta_t = P(x_t | u_1..u_t, e_<t) (Bengio & Frasconi, Eq. 2)."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens, args.iohmm_states)
        n = args.iohmm_states
        graph = iohmm.left_to_right_graph(n, 2) if args.iohmm_graph == "left-to-right" else None
        self.state_networks = iohmm.StateNetworks(n, self.u_dim, hidden_dim=args.iohmm_state_hidden, graph=graph)
        self.zeta0_logits = nn.Parameter(torch.zeros(n))

    def log_zeta0(self):
        return torch.log_softmax(self.zeta0_logits, 0)

    def chain_full(self, prev_output_tokens, u, logits, log_bias, log_z):
        B, T = prev_output_tokens.shape
        n = self.n_states
        log_phi = self.state_networks(u)  # (B, T, n, n)
        # log_f[t] = log eta_{t,i}(e_t), e_t = the decoder input at t + 1; the last position's word
        # influences no predictive state and stays at f = 1 (as do padded ones)
        log_f = log_phi.new_zeros(B, T, n)
        if T > 1:
            nxt = prev_output_tokens[:, 1:]
            seen = state_softmax.log_emission(logits[:, :-1], log_bias, log_z[:, :-1], nxt).to(log_f)
            seen = seen.masked_fill(nxt.eq(self.padding_idx).unsqueeze(-1), 0.0)
            log_f = torch.cat([seen, log_f[:, :1]], 1)
        mask = prev_output_tokens.ne(self.padding_idx)
        return iohmm.forward_filter(log_phi, log_f, self.log_zeta0().to(log_phi), mask).log_zeta

    def chain_step(self, prev_output_tokens, u, log_bias, log_z, incremental_state):
        cache = self._cache(incremental_state)
        B = u.size(0)
        log_phi = self.state_networks(u)[:, 0]  # (B, n, n)
        if cache is None:  # x_0 ~ zeta_0, nothing observed yet
            log_alpha = self.log_zeta0().to(log_phi).expand(B, self.n_states)
        else:  # observe e_{t-1}; the state-independent l_{t-1}(e_{t-1}) cancels in the Bayes update
            log_f = log_bias.transpose(0, 1)[prev_output_tokens[:, -1]].to(log_phi) - cache["log_z"]
            log_alpha, _ = iohmm.observe(cache["log_zeta"], log_f)
        log_zeta = iohmm.log_matvec(log_phi.exp(), log_alpha)
        self._set_cache(incremental_state, log_zeta=log_zeta, log_z=log_z[:, 0].to(log_zeta))
        return log_zeta.unsqueeze(1)

