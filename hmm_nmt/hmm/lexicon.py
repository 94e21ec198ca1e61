"""Memory-bounded lexicon kernels for the direct HMM.

The lexicon of the direct HMM is a softmax over the vocabulary V for every target position i and every
source position j (Wang et al. 2021, Eq. 7):

    p(e | j, e_<i, f) = softmax_e(W t_ij + b),   t_ij = ReLU(W5 h_j + W6 s_i)

Materialising the logits for a whole batch costs batch x I x J x V floats, far beyond any memory for real
vocabularies. Training only needs three numbers per row (i, j): the gold logit, the log-normaliser and the
vocabulary mean of the logits (for label smoothing). :class:`LexiconScores` computes them chunk by chunk and
recomputes each chunk's logits in backward, so peak memory is O(chunk x V) whatever the sentence lengths.

Decoding needs the whole next-token distribution, the mixture over source positions (Eq. 9);
:func:`log_mixture` computes it in chunks of rows as well.

No fairseq import here: the functions take plain tensors. (Over 400 lines on purpose: the training kernel
and the decoding mixture share the chunked-logits workspace and precision rules; split, each half would
import the other's internals.)
"""
import contextlib
import functools
import threading
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from hmm_nmt.hmm.precision import LEXICON_DTYPES, accumulation_dtype, upcast  # noqa: F401 (LEXICON_DTYPES: re-export)


def _underflow_floor(dtype: torch.dtype) -> float:
    """Smallest mixture probability that :func:`log_mixture`'s probability-space sum still gets right.

    Terms exp(logit - max) below the smallest normal number flush to (or lose digits as) denormals; each
    contributes at most ``tiny`` to the sum, so a sum of at least tiny * 2^24 is exact to K * 2^-24 relative.
    """
    return torch.finfo(dtype).tiny * 2.0 ** 24


class _Workspace(threading.local):
    """Scratch buffers for the chunk logits, kept between calls on CPU (one set per thread).

    A fresh (chunk, V) tensor per call is paid again in page faults: the allocator gives large blocks back
    to the OS, and re-touching 25 MB cost more than the conversion or the exp over it (decoding calls the
    mixture once per target step). On CUDA the caching allocator already reuses blocks. What stays
    allocated is one chunk x V buffer per dtype; :func:`release_workspace` frees it.
    """

    def __init__(self):
        self.buffers: Dict[Tuple[str, torch.dtype], Tensor] = {}

    def get(self, name: str, rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        if device.type != "cpu":
            return torch.empty(rows, cols, dtype=dtype, device=device)
        buf = self.buffers.get((name, dtype))
        if buf is None or buf.numel() < rows * cols:
            buf = self.buffers[name, dtype] = torch.empty(rows * cols, dtype=dtype)
        return buf[: rows * cols].view(rows, cols)


_WORKSPACE = _Workspace()


def release_workspace() -> None:
    """Free the CPU scratch buffers of this thread (they are re-created on the next call)."""
    _WORKSPACE.buffers.clear()


def _own_precision(fn):
    """Run a kernel with autocast off: ``dtype`` (``--lexicon-dtype``) decides its matmul precision and its
    ``out=`` buffers are float32, which autocast would otherwise recast. Half-precision inputs (what linear
    layers return under ``--bf16``/``--amp`` autocast) are taken to float32 first."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with contextlib.ExitStack() as stack:
            for device in ("cpu", "cuda"):
                if torch.is_autocast_enabled(device):
                    stack.enter_context(torch.autocast(device, enabled=False))
            args = [a.float() if isinstance(a, Tensor) and a.dtype in (torch.bfloat16, torch.float16) else a
                    for a in args]
            return fn(*args, **kwargs)
    return run


def _low(dtype: torch.dtype, like: Tensor) -> bool:
    return dtype != torch.float32 and like.dtype != torch.float64


class _ChunkLogits:
    """Logits of row chunks into buffers allocated once per call.

    A fresh (rows, V) tensor per chunk would cost more than the log-sum-exp itself: the allocator returns
    large blocks to the OS, and every new one is paid again in page faults. The matmul writes into ``out``
    (fp32) or into a bf16 buffer converted into ``out`` (the matmul may run in a lower precision; the
    products accumulate in fp32 inside it and everything after it is fp32). ``weight`` is converted to
    ``dtype`` once; the bias is fused into the fp32 matmul or added after the conversion.
    """

    def __init__(self, hidden: Tensor, weight: Tensor, bias: Optional[Tensor], dtype: torch.dtype, rows: int):
        self.low = _low(dtype, hidden)
        self.dtype = dtype if self.low else hidden.dtype
        self.weight = weight.to(self.dtype)
        self.bias = bias
        acc = accumulation_dtype(hidden.dtype)
        vocab = weight.size(0)
        self.out = _WORKSPACE.get("logits", rows, vocab, acc, hidden.device)
        self.low_out = _WORKSPACE.get("low", rows, vocab, dtype, hidden.device) if self.low else None

    def __call__(self, h: Tensor) -> Tensor:
        rows = h.size(0)
        out = self.out[:rows]
        if not self.low:
            if self.bias is not None:
                return torch.addmm(self.bias, h, self.weight.t(), out=out)
            return torch.mm(h, self.weight.t(), out=out)
        out.copy_(torch.mm(h.to(self.dtype), self.weight.t(), out=self.low_out[:rows]))
        return out.add_(self.bias) if self.bias is not None else out

    def softmax(self, logits: Tensor) -> Tensor:
        """Row softmax of ``logits`` (a view of ``out``) into a second buffer, ``logits`` left intact."""
        probs = _WORKSPACE.get("probs", logits.numel() // logits.size(-1), logits.size(-1), logits.dtype,
                               logits.device).view(logits.shape)
        return torch.ops.aten._softmax.out(logits, -1, False, out=probs)

    def low_precision(self, x: Tensor) -> Tensor:
        """``x`` (rows, V) in the matmul dtype (the bf16 buffer, free again once the logits are converted)."""
        return self.low_out[: x.size(0)].copy_(x) if self.low else x


def _logits(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    """fp32 logits (fresh tensor) of ``hidden``; see :class:`_ChunkLogits` for the precision."""
    if not _low(dtype, hidden):
        return torch.addmm(bias, hidden, weight.t()) if bias is not None else hidden @ weight.t()
    out = (hidden.to(dtype) @ weight.to(dtype).t()).float()
    return out.add_(bias) if bias is not None else out


def _logsumexp_(logits: Tensor) -> Tensor:
    """Row-wise log-sum-exp that overwrites ``logits`` (one buffer instead of torch.logsumexp's copies)."""
    m = logits.amax(dim=-1, keepdim=True)
    return logits.sub_(m).exp_().sum(-1).log_().add_(m.squeeze(-1))


class LexiconScores(torch.autograd.Function):
    """Per-row gold log-probability and vocabulary-mean log-probability, chunked, recomputed in backward.

    forward(hidden (N, d), weight (V, d), bias (V,) or None, target (N,), chunk_rows, dtype)
      -> (log p(target_n | row n),  mean_v log p(v | row n)), both (N,)

    With a = grad of the first output and b = grad of the second, the gradient of the logits of row n is
    G = a * onehot(target) + b / V - (a + b) * P, P the softmax. Only the P term needs a pass over a
    (chunk, V) buffer; the other two are gather/scatter and rank-one updates of the (chunk, d) and (V, d)
    sides, and the row scaling by (a + b) is applied to the (chunk, d) factors, not to P:

        grad_hidden = a * W[target] + (b / V) * sum_v W_v - (a + b) * (P @ W)
        grad_W      = scatter_add(target, a * h) + (1 / V) * sum_n b_n h_n - P^T @ ((a + b) * h)
        grad_bias   = scatter_add(target, a) + sum_n b_n / V - P^T @ (a + b)

    The vocabulary mean of the logits is h . mean_v(W_v) + mean(bias), a matrix-vector product. What is
    left per chunk besides the three matmuls (and the recomputation of the logits in backward) is one
    log-sum-exp in forward and P = exp(logits - logz) in backward, in buffers reused across chunks.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, chunk_rows, dtype, logz=None):
        if logz is None:  # otherwise known from lexicon_logz: forward then makes no pass over V
            logz = lexicon_logz(hidden, weight, bias, chunk_rows, dtype)
        gold = gold_logits(hidden, weight, bias, target)
        acc = gold.dtype
        mean = hidden.to(acc) @ weight.to(acc).mean(0)
        if bias is not None:
            mean = mean + bias.to(acc).mean()
        ctx.save_for_backward(hidden, weight, bias, target, logz)
        ctx.chunk_rows, ctx.dtype = chunk_rows, dtype
        return gold - logz, mean - logz

    @staticmethod
    @_own_precision
    def backward(ctx, g_gold, g_mean):
        hidden, weight, bias, target, logz = ctx.saved_tensors
        chunk_rows, dtype = ctx.chunk_rows, ctx.dtype
        n, vocab = hidden.size(0), weight.size(0)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        need_b = need_b and bias is not None
        acc = logz.dtype
        a, b = g_gold.to(acc), g_mean.to(acc)
        c = -(a + b)  # weight of the softmax term
        h_acc = hidden.to(acc)
        logits_of = _ChunkLogits(hidden, weight, bias, dtype, min(n, chunk_rows))
        w_mm = logits_of.weight
        # the softmax-free parts of G: gather/scatter and rank-one updates
        grad_h = grad_w = grad_b = None
        if need_h:
            w_acc = weight.to(acc)
            grad_h = a[:, None] * w_acc[target] + (b[:, None] / vocab) * w_acc.sum(0)
        if need_w:
            grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device)
            grad_w.index_add_(0, target, a[:, None] * h_acc)
            grad_w += (b @ h_acc / vocab)[None, :]
            part_w = torch.empty(weight.shape, dtype=logits_of.dtype, device=weight.device) if logits_of.low else None
        if need_b:
            grad_b = torch.zeros(vocab, dtype=acc, device=weight.device).index_add_(0, target, a)
            grad_b += b.sum() / vocab
        for s in range(0, n, chunk_rows):
            e = min(n, s + chunk_rows)
            p = logits_of(hidden[s:e]).sub_(logz[s:e, None]).exp_()  # softmax
            if need_b:
                grad_b.addmv_(p.t(), c[s:e])
            p_mm = logits_of.low_precision(p)
            c_s = c[s:e, None]
            if need_h:
                grad_h[s:e] += c_s * (p_mm @ w_mm).to(acc)
            if need_w:
                ch = (c_s * h_acc[s:e]).to(p_mm.dtype)
                if part_w is None:
                    grad_w.addmm_(p_mm.t(), ch)
                else:  # bf16 product, fp32 accumulation
                    grad_w += torch.mm(p_mm.t(), ch, out=part_w)
        if grad_h is not None:
            grad_h = grad_h.to(hidden.dtype)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None


def gold_logits(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor) -> Tensor:
    """The target word's logit of each row, (N,): a dot product per row (fp32 or fp64)."""
    acc = accumulation_dtype(hidden.dtype)
    gold = (hidden.to(acc) * weight[target].to(acc)).sum(-1)
    return gold + bias[target].to(acc) if bias is not None else gold


@torch.no_grad()
@_own_precision
def lexicon_logz(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], chunk_rows: int = 1024,
                 dtype: torch.dtype = torch.float32) -> Tensor:
    """log Z of each row of ``hidden`` (N,), chunked, without gradients.

    For callers that must know the normalisers before the rows they need gradients for are known (the
    first-order pruned forward selects step i's positions from the scores of step i-1): they pass these to
    ``lexicon_scores(..., logz=)``, whose forward then skips the pass over the vocabulary.
    """
    n = hidden.size(0)
    logz = torch.empty(n, dtype=accumulation_dtype(hidden.dtype),
                       device=hidden.device)
    if n == 0:
        return logz
    logits_of = _ChunkLogits(hidden, weight, bias, dtype, min(n, chunk_rows))
    for s in range(0, n, chunk_rows):
        e = min(n, s + chunk_rows)
        logz[s:e] = _logsumexp_(logits_of(hidden[s:e]))
    return logz


@_own_precision
def lexicon_scores(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                   chunk_rows: int = 1024, dtype: torch.dtype = torch.float32,
                   logz: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """(log p(target | row), mean_v log p(v | row)) for rows of ``hidden``; see :class:`LexiconScores`.

    ``logz``: the rows' log-normalisers if already known (:func:`lexicon_logz` with the same ``dtype``);
    forward then costs a dot product per row instead of a pass over the vocabulary.
    """
    if hidden.size(0) == 0:
        z = hidden.new_zeros(0, dtype=torch.float32)
        return z, z
    if logz is not None:
        logz = logz.detach()
    return LexiconScores.apply(hidden, weight, bias, target, max(1, int(chunk_rows)), dtype, logz)


def reference_lexicon_scores(hidden, weight, bias, target):
    """Unchunked reference (materialises N x V logits): for tests only."""
    logits = hidden @ weight.t()
    if bias is not None:
        logits = logits + bias
    lp = torch.log_softmax(upcast(logits), dim=-1)
    return lp.gather(1, target[:, None]).squeeze(1), lp.mean(-1)


@_own_precision
def log_mixture(src_feat: Tensor, tgt_feat: Tensor, log_align: Tensor, weight: Tensor, bias: Optional[Tensor],
                chunk_rows: int = 1024, dtype: torch.dtype = torch.float32,
                return_logz: bool = False, keep_idx: Optional[Tensor] = None):
    """log p(e | e_<i, f) = logsumexp_j [log p(j | i) + log softmax_e(W ReLU(src_feat_j + tgt_feat_i) + b)].

    src_feat (B, J, d) = W5 h_j + bias, tgt_feat (B, I, d) = W6 s_i, log_align (B, I, J) (-inf on padding).
    Returns (B, I, V) log-probabilities, and with ``return_logz`` also the lexicon log-normalisers (B, I, J).
    Rows (b, i) are processed in chunks of about ``chunk_rows`` (i, j) pairs, so memory is O(chunk x V);
    without gradients (decoding) a chunk also holds at most max(width, B x I) pairs, the output's own size.
    With ``keep_idx`` (B, I, K) only those source positions enter the mixture (their alignment weights must
    already be renormalised over them) and only B x I x K lexicon rows are computed; logz is then (B, I, K).
    """
    bsz, tgt_len, _ = tgt_feat.shape
    src_len = src_feat.size(1)
    vocab = weight.size(0)
    out = tgt_feat.new_empty(bsz, tgt_len, vocab, dtype=accumulation_dtype(tgt_feat.dtype))
    width = src_len if keep_idx is None else keep_idx.size(-1)
    logz_all = out.new_empty(bsz, tgt_len, width) if return_logz else None
    differentiable = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (src_feat, tgt_feat, log_align, weight, bias))
    # decoding: the chunk buffers also stay within the size of the output (B x I rows), so a decoding step
    # holds at most about as many vocabulary rows as the transformer's own (B x beam, V) logits
    rows_per_chunk = max(1, min(chunk_rows, chunk_rows if differentiable else bsz * tgt_len) // max(1, width))
    if differentiable:
        logits_of = None
    else:
        logits_of = _ChunkLogits(tgt_feat, weight, bias, dtype, min(bsz * tgt_len, rows_per_chunk) * width)
        floor = _underflow_floor(out.dtype)
    b_idx = torch.arange(bsz, device=tgt_feat.device).repeat_interleave(tgt_len)
    i_idx = torch.arange(tgt_len, device=tgt_feat.device).repeat(bsz)
    out_flat = out.view(bsz * tgt_len, vocab)
    for s in range(0, bsz * tgt_len, rows_per_chunk):
        e = min(bsz * tgt_len, s + rows_per_chunk)
        bb, ii = b_idx[s:e], i_idx[s:e]
        if keep_idx is None:
            feat, align = src_feat[bb], log_align[bb, ii]  # (c, J, d), (c, J)
        else:
            idx = keep_idx[bb, ii]
            feat, align = src_feat[bb[:, None], idx], log_align[bb, ii].gather(1, idx)  # (c, K, d), (c, K)
        t = torch.relu(feat + tgt_feat[bb, ii][:, None, :])
        if differentiable:  # out= and in-place ops are not differentiable: plain ops
            logits = _logits(t.reshape(-1, t.size(-1)), weight, bias, dtype).view(e - s, width, vocab)
            logz = torch.logsumexp(logits, dim=-1)
            if logz_all is not None:
                logz_all.view(bsz * tgt_len, width)[s:e] = logz
            out_flat[s:e] = torch.logsumexp(logits + (align - logz)[:, :, None], dim=1)
            continue
        logits = logits_of(t.reshape(-1, t.size(-1))).view(e - s, width, vocab)
        # probability space: sum_j p(j) p(e | j) as one batched matrix-vector product of the alignment
        # weights with the softmax rows; the fused softmax works row by row in cache, where max, exp and sum
        # as separate ops would each stream the whole (c x width, V) block through memory
        probs = logits_of.softmax(logits)
        mixed = torch.bmm(align.exp()[:, None, :], probs, out=out_flat[s:e, None, :]).squeeze(1)
        if logz_all is not None:  # log Z = max - log max_e softmax (max_e softmax >= 1 / V: no underflow)
            logz = logits.amax(-1).sub_(probs.amax(-1).log_())
            logz_all.view(bsz * tgt_len, width)[s:e] = logz
        # a word whose every kept term underflowed: redo those rows in log space (checked on the (c, V)
        # mixture, not on the K times larger logits)
        redo = (mixed.amin(-1) < floor).nonzero().squeeze(1)
        mixed.log_()
        if len(redo) > 0:
            lg = logits_of(t[redo].reshape(-1, t.size(-1))).view(len(redo), width, vocab)
            joint = torch.log_softmax(lg, -1).add_(align[redo, :, None])  # log p(j) + log p(e | j)
            mixed[redo] = torch.logsumexp(joint, dim=1)
    return (out, logz_all) if return_logz else out


def _mixture_chunk(src: Tensor, tgt: Tensor, align: Tensor, weight: Tensor, bias: Optional[Tensor],
                   dtype: torch.dtype):
    """(hidden (c, J, d), log p(v | j) (c, J, V), log sum_j p(j) p(v | j) (c, V)) of c target positions."""
    hidden = torch.relu(src + tgt[:, None, :])
    logits = _logits(hidden.reshape(-1, hidden.size(-1)), weight, bias, dtype).view(*hidden.shape[:2], -1)
    logp = torch.log_softmax(upcast(logits), dim=-1)
    return hidden, logp, torch.logsumexp(logp + align[:, :, None], dim=1)


class MixtureLogProbSum(torch.autograd.Function):
    """sum_v log P_i(v), P_i(v) = sum_j a_ij p(v | j), chunked over target positions; see
    :func:`mixture_log_prob_sum`. Nothing of size V is kept for backward: each chunk is recomputed, and with
    the responsibilities r_ijv = a_ij p(v | j) / P_i(v) (computed in log space, so <= 1) and R_ij = sum_v r_ijv

        d/d z_ijv = r_ijv - p(v | j) R_ij   (z: the lexicon logits),    d/d log a_ij = R_ij.
    """

    @staticmethod
    def forward(ctx, src_feat, tgt_feat, log_align, weight, bias, b, i, rows, dtype):
        out = torch.empty(len(b), dtype=accumulation_dtype(tgt_feat.dtype), device=tgt_feat.device)
        for s in range(0, len(b), rows):
            bb, ii = b[s:s + rows], i[s:s + rows]
            out[s:s + rows] = _mixture_chunk(src_feat[bb], tgt_feat[bb, ii], log_align[bb, ii], weight, bias,
                                             dtype)[2].sum(-1)
        ctx.save_for_backward(src_feat, tgt_feat, log_align, weight, bias, b, i)
        ctx.rows, ctx.dtype = rows, dtype
        return out

    @staticmethod
    @_own_precision
    def backward(ctx, grad):
        src_feat, tgt_feat, log_align, weight, bias, b, i = ctx.saved_tensors
        acc = grad.dtype
        g_src = torch.zeros(src_feat.shape, dtype=acc, device=grad.device)
        g_tgt = torch.zeros(tgt_feat.shape, dtype=acc, device=grad.device)
        g_align = torch.zeros(log_align.shape, dtype=acc, device=grad.device)
        g_w = torch.zeros(weight.shape, dtype=acc, device=grad.device)
        g_b = torch.zeros(weight.size(0), dtype=acc, device=grad.device)
        w = weight.to(acc)
        for s in range(0, len(b), ctx.rows):
            bb, ii = b[s:s + ctx.rows], i[s:s + ctx.rows]
            align = log_align[bb, ii].to(acc)
            hidden, logp, mix = _mixture_chunk(src_feat[bb], tgt_feat[bb, ii], align, weight, bias, ctx.dtype)
            r = (logp + align[:, :, None] - mix[:, None, :]).exp_()  # (c, J, V)
            big_r = r.sum(-1)  # (c, J)
            g = grad[s:s + ctx.rows, None]
            gz = r.sub_(logp.exp_().mul_(big_r[:, :, None])).mul_(g[:, :, None])  # (c, J, V), in place of r
            g_align.index_put_((bb, ii), g * big_r, accumulate=True)
            h2 = hidden.reshape(-1, hidden.size(-1)).to(acc)
            gz2 = gz.view(-1, gz.size(-1))
            g_w.addmm_(gz2.t(), h2)
            g_b += gz2.sum(0)
            g_hidden = (gz2 @ w).view(hidden.shape).mul_(hidden > 0)
            g_src.index_add_(0, bb, g_hidden)
            g_tgt.index_put_((bb, ii), g_hidden.sum(1), accumulate=True)
        return (g_src.to(src_feat.dtype), g_tgt.to(tgt_feat.dtype), g_align.to(log_align.dtype),
                g_w.to(weight.dtype), None if bias is None else g_b.to(bias.dtype), None, None, None, None)


@_own_precision
def mixture_log_prob_sum(src_feat: Tensor, tgt_feat: Tensor, log_align: Tensor, weight: Tensor,
                         bias: Optional[Tensor], tgt_mask: Tensor, chunk_rows: int = 1024,
                         dtype: torch.dtype = torch.float32) -> Tensor:
    """sum_v log p(v | e_<i, f) per target position (B, I), 0 where ``tgt_mask`` is False; differentiable.

    p(v | e_<i, f) = sum_j p(j | i) p(v | j) is the decoder's output distribution (the mixture of Eq. 9), and
    this sum is what fairseq's label smoothing of an output distribution needs (its ``smooth_loss``).
    src_feat (B, J, d) = W5 h_j + b5, tgt_feat (B, I, d) = W6 s_i, log_align (B, I, J) (MASKED on padding).
    Target positions go in chunks of about ``chunk_rows`` (i, j) pairs, recomputed in backward
    (:class:`MixtureLogProbSum`), so memory stays O(chunk_rows x V) as in :func:`lexicon_scores`.
    """
    b, i = tgt_mask.nonzero(as_tuple=True)
    rows = max(1, chunk_rows // max(1, src_feat.size(1)))
    sums = MixtureLogProbSum.apply(src_feat, tgt_feat, log_align, weight, bias, b, i, rows, dtype)
    return sums.new_zeros(tgt_mask.shape).index_put((b, i), sums)
