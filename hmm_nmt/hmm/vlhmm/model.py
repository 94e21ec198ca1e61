"""The VL-HMM: potentials of the blocked chain over the shared chain module, the next-token distribution,
Viterbi, and the test oracles (dense forward, autograd posteriors)."""
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.chain import chain_forward, chain_posteriors
from hmm_nmt.hmm.logspace import MASKED
from hmm_nmt.hmm.vlhmm.constraints import Constraints, Restriction
from hmm_nmt.hmm.vlhmm.params import BatchParameters, NeuralParameters, ScalarParameters


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

    def viterbi(self, x: Tensor, mask: Tensor, r: Optional[Restriction] = None, bp=None, extra=None):
        """The most probable state path: ``(log p(x, z*) (B,), j* (B, T))``, j*_t the index of z*_t in the
        support C_t of x_t (its state is ``r.local[group(x_t), j*_t]``), -1 on padding."""
        r = self.restrict() if r is None else r
        log_G, _ = self.potentials(x, mask, r, bp, extra)
        return chain.viterbi(log_G, self._init(log_G), mask)

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
