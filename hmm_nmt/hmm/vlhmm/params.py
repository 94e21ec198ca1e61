"""VL-HMM parameterizations: the factored neural one (Chiu & Rush, Sec. 4.1, Eq. 3-8) and free scalars,
computed per batch for the kept states only (notation in :mod:`hmm_nmt.hmm.vlhmm`)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from hmm_nmt.hmm.logspace import MASKED
from hmm_nmt.hmm.vlhmm.constraints import Constraints, Restriction


# ------------------------------------------------------------------------------------------------
# chunked log-sum-exp of a product, recomputed in backward
class _RowLogsumexp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, chunk):
        out = q.new_empty(q.size(0))
        for s in range(0, q.size(0), chunk):
            out[s:s + chunk] = torch.logsumexp(q[s:s + chunk] @ k.t(), dim=-1)
        ctx.save_for_backward(q, k, out)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, out = ctx.saved_tensors
        gq, gk = torch.zeros_like(q), torch.zeros_like(k)
        for s in range(0, q.size(0), ctx.chunk):
            p = (q[s:s + ctx.chunk] @ k.t() - out[s:s + ctx.chunk, None]).exp_() * grad[s:s + ctx.chunk, None]
            gq[s:s + ctx.chunk] = p @ k
            gk += p.t() @ q[s:s + ctx.chunk]
        return gq, gk, None


def row_logsumexp(q: Tensor, k: Tensor, chunk: int = 512) -> Tensor:
    """logsumexp_j (q k^T)[i, j] (R,) with O(chunk x N) memory in forward and backward."""
    return _RowLogsumexp.apply(q, k, chunk)


def normalize_emissions(logits: Tensor, states: Tensor, valid: Tensor, num_states: int) -> Tensor:
    """log p(x | z) from logits phi (V, n) of the support entries (states (V, n) their local state ids,
    valid (V, n)): each state's scores are normalised over the words that may emit it (Eq. 8/10)."""
    logits = logits.masked_fill(~valid, float("-inf"))
    flat_s, flat_l = states.reshape(-1), logits.reshape(-1)
    m = torch.full((num_states,), float("-inf"), dtype=logits.dtype, device=logits.device)
    m = m.scatter_reduce(0, flat_s, flat_l.detach(), reduce="amax")
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    s = torch.zeros(num_states, dtype=logits.dtype, device=logits.device)
    s = s.index_add(0, flat_s, (flat_l - m[flat_s]).exp())
    lse = s.clamp_min(torch.finfo(logits.dtype).tiny).log() + m
    return (logits - lse[states]).masked_fill(~valid, MASKED)


# ------------------------------------------------------------------------------------------------
# parameterizations
class ResidualMLP(nn.Module):
    """The paper's f(E) = LayerNorm(ReLU(D W2) + D), D = ReLU(E W1) (footnote 2)."""

    def __init__(self, dim):
        super().__init__()
        self.w1 = nn.Linear(dim, dim)
        self.w2 = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, e):
        d = F.relu(self.w1(e))
        return self.norm(F.relu(self.w2(d)) + d)


class BatchParameters:
    """Distributional parameters of one batch for the kept states (local indices 0..N-1)."""

    log_start: Tensor  # (N,)
    log_emit: Tensor  # (V, n): log p(x | state local[group[x], j]); MASKED off the support

    def trans_block(self, src: Tensor, dst: Tensor) -> Tensor:  # (U, n), (U, n) -> (U, n, n) log-probs
        raise NotImplementedError

    def trans_rows(self, src: Tensor) -> Tensor:  # (R,) -> (R, N) log-probs
        raise NotImplementedError


def _emission_table(c: Constraints, r: Restriction, logits_fn):
    """(V, n) normalised log-emissions; ``logits_fn(groups, words_valid)`` gives the (V, n) logits."""
    wg = c.word_group
    g = wg.clamp(min=0)
    states, valid = r.local[g], r.valid[g] & (wg >= 0)[:, None]
    logits = logits_fn(g, valid)
    return normalize_emissions(logits, states, valid, r.kept.numel())


class _NeuralBatch(BatchParameters):
    def __init__(self, out, inn, log_start, log_emit, chunk, emit_features):
        self.out, self.inn, self.log_start, self.log_emit = out, inn, log_start, log_emit
        self.emit_features = emit_features  # f_phi(E_emit) of the kept states (N, h), for other emissions
        self.lse = row_logsumexp(out, inn, chunk)

    def trans_block(self, src, dst):
        return torch.bmm(self.out[src], self.inn[dst].transpose(1, 2)) - self.lse[src][..., None]

    def trans_rows(self, src):
        return self.out[src] @ self.inn.t() - self.lse[src][:, None]


class NeuralParameters(nn.Module):
    """Factored neural parameterization (Eq. 3-8); only the kept states' embeddings are computed."""

    def __init__(self, constraints: Constraints, num_words: int, dim: int, chunk: int = 512):
        super().__init__()
        if dim % 2:
            raise ValueError(f"--hmm-embed-dim must be even (partition and state halves), got {dim}")
        self.constraints = constraints
        partitions = int(constraints.state_partition().max()) + 1
        self.partition_embed = nn.Parameter(torch.randn(partitions, dim // 2) * dim ** -0.5)
        self.state_embed = nn.Parameter(torch.randn(constraints.num_states, dim // 2) * dim ** -0.5)
        self.word_embed = nn.Parameter(torch.randn(num_words, dim) * dim ** -0.5)
        self.start_embed = nn.Parameter(torch.randn(dim) * dim ** -0.5)
        self.f_in, self.f_out, self.f_emit = ResidualMLP(dim), ResidualMLP(dim), ResidualMLP(dim)
        self.f_psi, self.f_phi = ResidualMLP(dim), ResidualMLP(dim)
        self.chunk = chunk
        # both factors of psi leave a LayerNorm (entries of unit variance): without 1/sqrt(h) the initial
        # transition logits have standard deviation sqrt(h) and every row starts as a near one-hot
        self.scale = dim ** -0.5

    def forward(self, r: Restriction) -> BatchParameters:
        c = self.constraints
        e = torch.cat([self.partition_embed[c.state_partition()[r.kept]], self.state_embed[r.kept]], dim=-1)
        out = self.f_out(e) * self.scale
        inn = self.f_psi(self.f_in(e))
        emit = self.f_phi(self.f_emit(e))
        log_start = torch.log_softmax(inn @ self.start_embed, dim=-1)

        def logits(g, valid):
            if c.blocked:  # one (W_c, h) x (h, n) product per cluster: |X| n h, never the |X| x |Z| matrix
                order, sizes = c.grouped_words()
                parts = self.word_embed[order].split(sizes)
                blocks = torch.cat([p @ emit[r.local[i]].t() for i, p in enumerate(parts)])
                return blocks.new_zeros(g.numel(), blocks.size(1)).index_copy(0, order, blocks)
            return (self.word_embed @ emit.t()).gather(1, r.local[g])

        return _NeuralBatch(out, inn, log_start, _emission_table(c, r, logits), self.chunk, emit)


class _ScalarBatch(BatchParameters):
    def __init__(self, log_trans, log_start, log_emit):
        self.log_trans, self.log_start, self.log_emit = log_trans, log_start, log_emit

    def trans_block(self, src, dst):
        return self.log_trans[src[:, :, None], dst[:, None, :]]

    def trans_rows(self, src):
        return self.log_trans[src]


class ScalarParameters(nn.Module):
    """One free parameter per distributional parameter: psi (|Z|, |Z|), start (|Z|), phi (|X|, k)."""

    def __init__(self, constraints: Constraints, num_words: int, init_std: float = 0.1):
        super().__init__()
        self.constraints = constraints
        Z = constraints.num_states
        self.trans = nn.Parameter(torch.randn(Z, Z) * init_std)
        self.start = nn.Parameter(torch.randn(Z) * init_std)
        self.emit = nn.Parameter(torch.randn(num_words, constraints.k) * init_std)

    def forward(self, r: Restriction) -> BatchParameters:
        c = self.constraints
        log_trans = torch.log_softmax(self.trans[r.kept][:, r.kept], dim=-1)
        log_start = torch.log_softmax(self.start[r.kept], dim=-1)
        log_emit = _emission_table(c, r, lambda g, valid: self.emit.gather(1, r.pos[g]))
        return _ScalarBatch(log_trans, log_start, log_emit)
