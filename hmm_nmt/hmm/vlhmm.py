r"""Very large neural HMMs (VL-HMM): Chiu & Rush, "Scaling Hidden Markov Models" (paper text in
``shared/papers/scaling-hmms.txt``).

Notation (the paper's)
----------------------
Tokens x_t in the vocabulary X, states z_t in Z, z_0 = epsilon the start:

    p(x, z) = prod_t p(x_t | z_t) p(z_t | z_{t-1}),   p(z_t | z_{t-1}) ∝ exp psi_{z_{t-1} z_t},
    p(x | z) ∝ 1(z in C_x) exp phi_{x z}                                      (Eq. 1, 2, 8)

* **Factored neural parameterization** (Sec. 4.1, Eq. 3-8): state embeddings [E_pi ; E_Z] (a partition
  embedding of size h/2 shared by the k states of a partition, and a per-state embedding of size h/2),
  E_in / E_out / E_emit = f_in / f_out / f_emit of them, psi = E_out f_psi(E_in)^T / sqrt(h) (the 1/sqrt(h) is
  ours: both factors leave a LayerNorm), phi = E_x f_phi(E_emit)^T,
  every f a residual MLP f(E) = LayerNorm(ReLU(D W2) + D), D = ReLU(E W1). The start scores are
  psi_{epsilon z} = e_start . f_psi(E_in)_z. ``scalar``: psi (|Z| x |Z|), start (|Z|) and phi (|X| x k, one
  per support entry) are free parameters.
* **Blocked emissions** (Sec. 4.2): a word partition rho (Brown clusters) and a state partition pi with k
  states per cluster; C_x = {z : pi(z) = rho(x)}. The forward then only runs over the k states of the
  current token's cluster: T products of k x k blocks. The emission is normalised over the words of a
  state's cluster (they are the only words it may emit), so the |X| x |Z| matrix is never formed; the
  transition rows are normalised over all states in use by a chunked log-sum-exp that recomputes its
  chunks in backward, so the |Z| x |Z| matrix is never stored either. ``uniform`` (the paper's ablation):
  each C_x is an independent uniform random k-subset of Z (no word partition; its emission path forms
  E_x f_phi(E_emit)^T over the states in use, it is the ablation, not the fast path).
* **State dropout** (Sec. 4.3, Algorithm 1): per batch a mask b over states keeps n of the k states of
  every partition; the parameters are computed only for the kept states (transitions and emissions are
  renormalised over them, Eq. 10) and inference runs on the reduced n x n blocks. Under the uniform
  constraint (no partition) a random (1 - p) |Z| states are kept and each C_x shrinks to its kept members.

Inference is the shared log-space chain of :mod:`hmm_nmt.hmm.efb`: the per-step log-potentials
G_t(i, j) = log p(z_t = C_t[j] | z_{t-1} = C_{t-1}[i]) + log p(x_t | C_t[j]) (B, T, n, n) go to
:func:`~hmm_nmt.hmm.efb.chain_forward` (log p(x) = its log_Z) and :func:`~hmm_nmt.hmm.efb.chain_posteriors`
(explicit forward-backward); the posteriors are also the gradient of log p(x) w.r.t. the emission scores
(:func:`autograd_posteriors`). Memory per batch grows with B T n^2, never with |Z|^2.

No fairseq import here.
"""
from typing import NamedTuple, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from hmm_nmt.hmm.direct import MASKED
from hmm_nmt.hmm.efb import chain_forward, chain_posteriors

__all__ = [
    "read_word_clusters", "Constraints", "Restriction", "ResidualMLP", "NeuralParameters", "ScalarParameters",
    "VLHMM", "row_logsumexp", "normalize_emissions", "autograd_posteriors",
]


# ------------------------------------------------------------------------------------------------
# word partitions
def read_word_clusters(path: str, symbols: Sequence[str], never: Sequence[int] = ()):
    """Word partition rho from a file of ``word cluster`` lines (Brown clusters; the cluster is any string).

    Returns ``(word_cluster (V,) long, num_clusters)``; the symbols listed in ``never`` (padding, BOS) get
    -1 (never emitted); symbols absent from the file are spread over the clusters round robin (so the
    special symbols and words the clustering did not see are still emittable). A malformed line raises
    ``ValueError`` naming the file and line.
    """
    cluster_of, names = {}, {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'word cluster', got {line.rstrip()!r}")
            word, name = parts
            cluster_of[word] = names.setdefault(name, len(names))
    if not names:
        raise ValueError(f"{path}: no 'word cluster' lines")
    never = set(int(i) for i in never)
    out, spill = [], 0
    for i, sym in enumerate(symbols):
        if i in never:
            out.append(-1)
        elif sym in cluster_of:
            out.append(cluster_of[sym])
        else:
            out.append(spill % len(names))
            spill += 1
    return torch.tensor(out, dtype=torch.long), len(names)


class Restriction(NamedTuple):
    """The states one batch uses (all of them without dropout).

    kept (N,) global state ids (sorted); pos (G, n) positions inside the support rows that survive; local
    (G, n) index of those states in ``kept``; valid (G, n) False on padding of variable-size sets.
    """
    kept: Tensor
    pos: Tensor
    local: Tensor
    valid: Tensor


class Constraints(nn.Module):
    """Emission support sets C_x, as ``support`` (G, k) global state ids per word group and ``word_group``
    (V,) (-1: the symbol is never emitted). Brown: the groups are the clusters, C_c = the k states c k ..
    c k + k - 1 (``blocked``). Uniform: every word is its own group with a random k-subset.
    Buffers, so a checkpoint carries the partition it was trained with.
    """

    def __init__(self, support: Tensor, word_group: Tensor, num_states: int, blocked: bool):
        super().__init__()
        self.register_buffer("support", support.long())
        self.register_buffer("word_group", word_group.long())
        self.num_states = num_states
        self.blocked = blocked
        # emittable words sorted by group, and the group sizes (blocked emissions)
        emittable = torch.nonzero(word_group >= 0).flatten()
        order = emittable[torch.sort(word_group[emittable], stable=True).indices]
        self.register_buffer("word_order", order)
        self.group_sizes = torch.bincount(word_group[emittable], minlength=support.size(0)).tolist()

    def grouped_words(self):
        return self.word_order, self.group_sizes

    @property
    def k(self):
        return self.support.size(1)

    @classmethod
    def brown(cls, word_cluster: Tensor, num_clusters: int, states_per_cluster: int):
        k = states_per_cluster
        support = torch.arange(num_clusters * k).view(num_clusters, k)
        return cls(support, word_cluster, num_clusters * k, blocked=True)

    @classmethod
    def uniform(cls, emittable: Tensor, num_states: int, support_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        idx = torch.nonzero(emittable).flatten()
        support = torch.stack([torch.randperm(num_states, generator=g)[:support_size].sort().values
                               for _ in range(len(idx))]) if len(idx) else torch.zeros(0, support_size)
        word_group = torch.full((emittable.numel(),), -1, dtype=torch.long)
        word_group[idx] = torch.arange(len(idx))
        return cls(support, word_group, num_states, blocked=False)

    def state_partition(self) -> Tensor:
        """pi: the partition of every state (Brown: its cluster; uniform: z // k, used only to share the
        partition half of the factored embeddings)."""
        return torch.arange(self.num_states, device=self.support.device) // self.k

    def restrict(self, dropout: float = 0.0, generator: Optional[torch.Generator] = None) -> Restriction:
        """All states (``dropout`` 0) or a state-dropout sample (Algorithm 1)."""
        dev = self.support.device
        G, k = self.support.shape
        if dropout <= 0:
            pos = torch.arange(k, device=dev).expand(G, k)
            return Restriction(torch.arange(self.num_states, device=dev), pos, self.support,
                               torch.ones(G, k, dtype=torch.bool, device=dev))
        if not 0 < dropout < 1:
            raise ValueError(f"state dropout must be in [0, 1), got {dropout}")
        if self.blocked:
            n = max(1, int(round(k * (1 - dropout))))
            pos = torch.rand(G, k, generator=generator).argsort(1)[:, :n].sort(1).values.to(dev)
            kept = self.support.gather(1, pos).flatten()
            local = torch.arange(G * n, device=dev).view(G, n)
            return Restriction(kept, pos, local, torch.ones(G, n, dtype=torch.bool, device=dev))
        N = max(1, int(round(self.num_states * (1 - dropout))))
        kept = torch.randperm(self.num_states, generator=generator)[:N].sort().values.to(dev)
        to_local = torch.full((self.num_states,), -1, dtype=torch.long, device=dev)
        to_local[kept] = torch.arange(N, device=dev)
        loc = to_local[self.support]  # (G, k)
        valid = loc >= 0
        n = max(1, int(valid.sum(1).max()))
        order = torch.sort((~valid).to(torch.int8), dim=1, stable=True).indices[:, :n]  # kept members first
        pos = order
        valid = valid.gather(1, order)
        local = loc.gather(1, order).clamp(min=0)
        return Restriction(kept, pos, local, valid)


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


# ------------------------------------------------------------------------------------------------
class VLHMM(nn.Module):
    """The VL-HMM over a vocabulary of ``num_words`` symbols (see the module docstring)."""

    def __init__(self, constraints: Constraints, num_words: int, dim: int = 256, parameterization: str = "neural",
                 chunk: int = 512):
        super().__init__()
        self.constraints = constraints
        if parameterization == "neural":
            self.params = NeuralParameters(constraints, num_words, dim, chunk)
        elif parameterization == "scalar":
            self.params = ScalarParameters(constraints, num_words)
        else:
            raise ValueError(f"unknown parameterization {parameterization!r} (neural, scalar)")

    def restrict(self, dropout=0.0, generator=None) -> Restriction:
        return self.constraints.restrict(dropout, generator)

    def _groups(self, x: Tensor, mask: Tensor) -> Tensor:
        g = self.constraints.word_group[x]
        if bool(((g < 0) & mask).any()):
            bad = x[(g < 0) & mask][0].item()
            raise ValueError(f"symbol {bad} cannot be emitted (it has no support states: padding/BOS?)")
        return g.masked_fill(~mask, 0).clamp(min=0)

    def potentials(self, x: Tensor, mask: Tensor, r: Restriction, bp: Optional[BatchParameters] = None,
                   extra: Optional[Tensor] = None):
        """Log-potentials (B, T, n, n) of the blocked chain, and the emission scores (B, T, n) inside them.

        G[:, 0, i, j] = log p(C_1[j] | start) + log p(x_1 | C_1[j]) (only row i = 0 is read, see
        :meth:`log_likelihood`); G[:, t, i, j] = log p(C_t[j] | C_{t-1}[i]) + log p(x_t | C_t[j]).
        Transition blocks are computed once per distinct (C_{t-1}, C_t) pair of the batch. ``extra`` (B, T, n)
        is added to the emission scores (the tagger's log p(y_t | C_t[j])).
        """
        bp = self.params(r) if bp is None else bp
        g = self._groups(x, mask)
        B, T = x.shape
        emit = bp.log_emit[x]  # (B, T, n), MASKED off the support
        if extra is not None:
            emit = emit + extra
        valid = r.valid[g]
        n = r.local.size(1)
        first = (bp.log_start[r.local[g[:, 0]]].masked_fill(~valid[:, 0], MASKED) + emit[:, 0])
        steps = [first[:, None, None, :].expand(B, 1, n, n)]
        if T > 1:
            G = r.local.size(0)
            keys = g[:, :-1] * G + g[:, 1:]
            uniq, inv = torch.unique(keys, return_inverse=True)
            src, dst = uniq // G, uniq % G
            blocks = bp.trans_block(r.local[src], r.local[dst])
            pair_valid = r.valid[src][:, :, None] & r.valid[dst][:, None, :]
            blocks = blocks.masked_fill(~pair_valid, MASKED)
            steps.append(blocks[inv] + emit[:, 1:, None, :])
        return torch.cat(steps, dim=1), emit

    @staticmethod
    def _init(log_G):
        n = log_G.size(-1)
        init = log_G.new_full((n,), MASKED)
        init[0] = 0.0
        return init

    def log_likelihood(self, x: Tensor, mask: Tensor, r: Optional[Restriction] = None, bp=None,
                       extra=None) -> Tensor:
        """log p(x) (B,) of right-padded token sequences (mask (B, T) True on real tokens)."""
        r = self.restrict() if r is None else r
        log_G, _ = self.potentials(x, mask, r, bp, extra)
        return chain_forward(log_G, self._init(log_G), mask)[1]

    def conditionals(self, x: Tensor, mask: Tensor, r: Optional[Restriction] = None, bp=None) -> Tensor:
        """log p(x_t | x_<t) (B, T) of right-padded sequences (0 at padding): the per-step normalisers of
        the forward filter, O(T n^2), summing over t to :meth:`log_likelihood`. They are the gold entries
        of :meth:`predictive`. Stream mode rests on them: the conditionals of a block's tokens in a forward
        over (context + block) are log p(block | context), the state at the block start being the one
        carried through the context."""
        r = self.restrict() if r is None else r
        log_G, _ = self.potentials(x, mask, r, bp)
        return chain_forward(log_G, self._init(log_G), mask, return_steps=True)[2]

    def posteriors(self, x, mask, r=None, bp=None, extra=None):
        """Explicit forward-backward: (log p(z_t = C_t[j] | x) (B, T, n), log p(x) (B,))."""
        r = self.restrict() if r is None else r
        log_G, _ = self.potentials(x, mask, r, bp, extra)
        return chain_posteriors(log_G, self._init(log_G), mask)

    @torch.no_grad()
    def predictive(self, x: Tensor, mask: Tensor, r: Optional[Restriction] = None) -> Tensor:
        """log p(x_t = v | x_<t) (B, T, V) for every vocabulary symbol v: the whole next-token
        distribution (what ``fairseq-eval-lm`` gathers the gold from), from the filtered state of the
        support of x_{t-1}, the transition rows of those states to every kept state, and the emissions.
        """
        r = self.restrict() if r is None else r
        bp = self.params(r)
        B, T = x.shape
        V, n = bp.log_emit.shape
        N = r.kept.numel()
        log_G, _ = self.potentials(x, mask, r, bp)
        log_alpha = chain_forward(log_G, self._init(log_G), mask)[0]  # filtered, normalised (B, T, n)
        g = self._groups(x, mask)
        wg = self.constraints.word_group
        rows = torch.nonzero(wg >= 0).flatten()
        st = r.local[wg[rows]]  # (V', n) states that may emit each emittable word
        e = bp.log_emit[rows].exp() * r.valid[wg[rows]]  # (V', n) p(v | state)
        pred = x.new_zeros(B, T, N, dtype=log_G.dtype)
        pred[:, 0] = bp.log_start.exp()
        if T > 1:
            prev = g[:, :-1]
            a = log_alpha[:, :-1].exp().masked_fill(~r.valid[prev], 0.0)  # (B, T-1, n)
            for grp in torch.unique(prev).tolist():
                sel = prev == grp
                trans = bp.trans_rows(r.local[grp]).exp().masked_fill(~r.valid[grp][:, None], 0.0)  # (n, N)
                pred[:, 1:][sel] = a[sel] @ trans
        # p(v | history) = sum_j pred(st[v, j]) p(v | st[v, j]): |X| n products per position, never a
        # |X| x |Z| matrix. Blocked: one (positions x n)(n x W_c) product per cluster; uniform: gathers.
        flat = pred.reshape(-1, N)
        out = flat.new_zeros(flat.size(0), V)
        if self.constraints.blocked:
            order, sizes = self.constraints.grouped_words()
            start = 0
            for grp, size in enumerate(sizes):
                words = order[start:start + size]
                start += size
                if size:
                    out[:, words] = flat[:, r.local[grp]] @ bp.log_emit[words].exp().t()
        else:
            step = max(1, (1 << 22) // max(1, st.numel()))
            for s in range(0, flat.size(0), step):
                out[s:s + step, rows] = (flat[s:s + step, st] * e).sum(-1)
        out = out.reshape(B, T, V)
        return out.clamp_min(torch.finfo(out.dtype).tiny).log()

    # -------------------------------------------------------------------------------- test oracles
    def dense(self, r: Optional[Restriction] = None):
        """Dense (log start (N,), log transition (N, N), log emission (V, N)) over the kept states with the
        constraint as a mask (-inf off the support): the unblocked model, for tests on small sizes."""
        r = self.restrict() if r is None else r
        bp = self.params(r)
        N = r.kept.numel()
        log_trans = bp.trans_rows(torch.arange(N, device=r.kept.device))
        V = bp.log_emit.size(0)
        emit = bp.log_emit.new_full((V, N), float("-inf"))
        wg = self.constraints.word_group
        for v in range(V):
            if wg[v] >= 0:
                ok = r.valid[wg[v]]
                emit[v, r.local[wg[v]][ok]] = bp.log_emit[v][ok]
        return bp.log_start, log_trans, emit


def dense_log_likelihood(log_start: Tensor, log_trans: Tensor, log_emit: Tensor, x: Tensor) -> Tensor:
    """log p(x) of one unpadded sequence by the plain forward over all states (O(T N^2))."""
    a = log_start + log_emit[x[0]]
    for t in range(1, x.numel()):
        a = torch.logsumexp(a[:, None] + log_trans, dim=0) + log_emit[x[t]]
    return torch.logsumexp(a, dim=0)


def autograd_posteriors(model: VLHMM, x: Tensor, mask: Tensor, r: Restriction) -> Tensor:
    """p(z_t = C_t[j] | x) (B, T, n) as the gradient of log p(x) w.r.t. the emission scores."""
    with torch.enable_grad():
        log_G, emit = model.potentials(x, mask, r)
        extra = torch.zeros_like(emit, requires_grad=True)
        log_G = log_G + extra[:, :, None, :]
        ll = chain_forward(log_G, model._init(log_G), mask)[1]
        (grad,) = torch.autograd.grad(ll.sum(), extra)
    return grad * mask[..., None]


def num_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())

