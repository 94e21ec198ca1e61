"""First-order alignment model p(j | j', e_<i, f) of the transformer-based direct HMM (Eq. 11-12)."""
from typing import Dict

import torch
import torch.nn as nn
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.blocked import trilinear_log_softmax
from hmm_nmt.hmm.precision import upcast
from hmm_nmt.models.dhmm_layers import Linear, _CachedSourceMixin


@with_incremental_state
class FirstOrderAlignment(_CachedSourceMixin, nn.Module):
    """First-order alignment model log p(j | j', e_<i, f) (Eq. 11-12), with a start predecessor.

    Eq. 12 scores j against the pair [h_j ; h_j'] from s_i^(L-1). With a plain dot-product energy
    q_i . (U h_j + U' h_j') the j'-only part is constant over j and cancels in the softmax over j, so such
    a model cannot depend on the predecessor at all (a likely cause of the "forgetting" the paper reports).
    We use an energy in which j' survives the softmax:

        E(i, j', j) = [ q_i . k_j + (q_i * p_j') . r_j ] / sqrt(d) + b(bucket(j - j'))

    with q_i = Wq s_i^(L-1), k_j = Wk h_j, p_j' = Wp h_j', r_j = Wr h_j: the trilinear term couples query,
    predecessor and candidate, and b is a learned jump-width bias over the clipped jump j - j'
    (-m..m, Vogel et al. 1996 style). Jumps use positions counted from the first non-pad source token, so
    left and right padding give the same model. The first target position uses a learned start
    predecessor: p_start in place of p_j' and a separate bias b0 over the clipped absolute position of j.
    Only (B, I, J, J) log-probabilities are kept; the (B, I, J', d) product is formed a block at a time.
    """

    def __init__(self, query_dim, key_dim, dim, max_jump=16):
        super().__init__()
        self.dim, self.max_jump = dim, max_jump
        self.q_proj = Linear(query_dim, dim)
        self.k_proj = Linear(key_dim, dim)
        self.p_proj = Linear(key_dim, dim)
        self.r_proj = Linear(key_dim, dim, bias=False)
        self.p_start = nn.Parameter(torch.randn(dim) * dim ** -0.5)
        self.jump_bias = nn.Embedding(2 * max_jump + 1, 1)
        self.start_bias = nn.Embedding(max_jump + 1, 1)
        nn.init.zeros_(self.jump_bias.weight)
        nn.init.zeros_(self.start_bias.weight)

    def source_features(self, h: Tensor, src_pad: Tensor) -> Dict[str, Tensor]:
        """h (B, J, C) -> projections and the start/jump biases, independent of the target position."""
        pos = torch.cumsum((~src_pad).long(), dim=1) - 1  # position among real tokens
        jump = (pos[:, None, :] - pos[:, :, None]).clamp(-self.max_jump, self.max_jump) + self.max_jump
        return {
            "k": self.k_proj(h), "p": self.p_proj(h), "r": self.r_proj(h),
            "jump": self.jump_bias(jump).squeeze(-1),  # (B, J', J)
            "start": self.start_bias(pos.clamp(0, self.max_jump)).squeeze(-1),  # (B, J)
            "mask": src_pad,
        }

    def forward(self, s: Tensor, src: Dict[str, Tensor]):
        """s (B, I, D) = s^(L-1) -> log_init (B, I, J), log_trans (B, I, J', J)."""
        scale = self.dim ** -0.5
        q = self.q_proj(s) * scale  # (B, I, d)
        base = q @ src["k"].transpose(1, 2)  # (B, I, J)
        r_t = src["r"].transpose(1, 2)  # (B, d, J)
        mask = src["mask"]
        # source padding folded into the jump bias; the (B, I, J', d) product q_i * p_j' is formed a cache-sized
        # block at a time and never kept (hmm_nmt.hmm.blocked)
        jump = src["jump"].masked_fill(mask[:, None, :], direct.MASKED)
        log_trans = trilinear_log_softmax(base, jump, q, src["p"], src["r"])
        start = (q * self.p_start) @ r_t + base + src["start"][:, None, :]  # (B, I, J)
        log_init = torch.log_softmax(upcast(start).masked_fill(mask[:, None, :], direct.MASKED), -1)
        return log_init, log_trans

    def reorder_incremental_state(self, incremental_state, new_order):
        self._reorder_cache(incremental_state, new_order, "src", source_only=True)
        return self._reorder_cache(incremental_state, new_order, "state")
