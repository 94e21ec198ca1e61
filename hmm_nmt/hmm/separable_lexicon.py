"""Separable lexicon of the direct HMM: the softmax lexicon without its ReLU, exact at the cost of matmuls over V.

The softmax lexicon (Eq. 7) scores word e at (target position i, source position j) with
W ReLU(W5 h_j + W6 s_i) + b, so each of the I x J rows needs its own d x V product. Without the ReLU the
logit splits into a source part and a target part,

    p(e | j, e_<i, f) = exp(a_je + b_ie) / Z_ij,   a_j = W (W5 h_j + b5) + b,   b_i = W (W6 s_i)
    Z_ij = sum_v exp(a_jv) exp(b_iv)

(a product of experts: a translation table row of source position j times a target-side language model).
The logits cost (I + J) x d x V, the transformer's output layer on both sides, and all I x J normalisers
are one (I x V) by (V x J) matmul of exponentials: the d factor is gone from the J x I x V term. Label
smoothing's mean over V is exact and free: mean_v a_jv + mean_v b_iv - log Z_ij.

The exponentials are shifted by their row maxima (exp(a_jv - max_v a_jv) <= 1). A normaliser or mixture
entry below :func:`_floor` has lost digits to underflow (the two experts disagree on every word); those
entries are recomputed exactly with a log-sum-exp over V (over j for the mixture), so the result is
exact whatever the logits. No fairseq import here: the functions take plain tensors.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from hmm_nmt.hmm.lexicon import _own_precision
from hmm_nmt.hmm.precision import accumulation_dtype


def _floor(dtype: torch.dtype) -> float:
    """A sum of shifted exponentials at least this large is exact to about 2^-24 relative (see lexicon.py)."""
    return torch.finfo(dtype).tiny * 2.0 ** 24


def _linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """x W^T (+ b) in the accumulation dtype of ``x``."""
    acc = accumulation_dtype(x.dtype)
    return torch.nn.functional.linear(x.to(acc), weight.to(acc), None if bias is None else bias.to(acc))


def separable_logits(src_feat: Tensor, tgt_feat: Tensor, weight: Tensor, bias: Optional[Tensor]):
    """(a (B, J, V), b (B, I, V)): the source and target halves of the logits, in the accumulation dtype."""
    return _linear(src_feat, weight, bias), _linear(tgt_feat, weight)


def _shifted_exp(x: Tensor) -> Tuple[Tensor, Tensor]:
    """(exp(x - m), m) with m the row max, detached: log Z does not depend on the shift, nor its gradient."""
    m = x.detach().amax(-1, keepdim=True)
    if x.requires_grad and torch.is_grad_enabled():
        return (x - m).exp(), m
    return torch.sub(x, m).exp_(), m  # decoding: one (rows, V) buffer, not two


def _grouped_bmm(x: Tensor, y: Tensor, owner: Optional[Tensor], out: Optional[Tensor] = None) -> Tensor:
    """bmm(x, y[owner]) (B, I, N) for x (B, I, K) and y (U, K, N), without gathering y when every row of y serves
    the same number of rows of x (the beams of one sentence): one (beam x I, K) by (K, N) product per row of y.
    ``out``: a contiguous (B, I, N) buffer to write into (no gradients), used where the product allows."""
    if owner is None:
        return torch.bmm(x, y) if out is None else torch.bmm(x, y, out=out)
    counts = torch.bincount(owner, minlength=y.size(0))
    k = int(counts[0]) if counts.numel() else 0
    if counts.numel() != y.size(0) or k == 0 or not bool((counts == k).all()):
        return torch.bmm(x, y[owner])
    rows, tgt_len, inner = x.shape
    if bool((owner[1:] >= owner[:-1]).all()):  # fairseq's layout, a sentence's beams side by side: no reordering
        flat = x.reshape(y.size(0), k * tgt_len, inner)
        if out is not None:
            return torch.bmm(flat, y, out=out.view(y.size(0), k * tgt_len, -1)).view(rows, tgt_len, -1)
        return torch.bmm(flat, y).view(rows, tgt_len, -1)
    order = torch.argsort(owner, stable=True)
    out = torch.bmm(x[order].reshape(y.size(0), k * tgt_len, inner), y).view(rows, tgt_len, -1)
    return out.new_empty(out.shape).index_copy_(0, order, out)


def separable_logz(a: Tensor, b: Tensor, source_exp: Optional[Tuple[Tensor, Tensor]] = None,
                   owner: Optional[Tensor] = None, keep_exp: bool = False):
    """log Z_ij = log sum_v exp(a_jv + b_iv), (B, I, J), differentiable; exact also where the sum underflows.

    ``source_exp``: (exp(a - m), m) when the caller has them (decoding keeps them per sentence). ``owner`` (B,):
    ``a`` holds one row per distinct source and ``owner[r]`` is row r's (decoding: the beams share theirs).
    ``keep_exp``: return (log Z, exp(b - max b)), the latter a buffer the caller may overwrite.
    """
    ea, ma = source_exp if source_exp is not None else _shifted_exp(a)
    eb, mb = _shifted_exp(b)
    s = _grouped_bmm(eb, ea.transpose(1, 2), owner)  # (B, I, J)
    floor = _floor(s.dtype)
    ma_t = ma.transpose(1, 2) if owner is None else ma.transpose(1, 2)[owner]
    # clamped: the log of an underflowed entry must not send inf * 0 = nan into the gradient it no longer gets
    logz = s.clamp(min=floor).log() + mb + ma_t
    small = s.detach() < floor
    if bool(small.any()):
        bb, ii, jj = small.nonzero(as_tuple=True)
        src_rows = bb if owner is None else owner[bb]
        logz = logz.index_put((bb, ii, jj), torch.logsumexp(a[src_rows, jj] + b[bb, ii], dim=-1))
    return (logz, eb) if keep_exp else logz


class _SeparableScores(torch.autograd.Function):
    """(log p(e_i | j), mean_v log p(v | j)) of the separable lexicon, with the logits inside.

    The same numbers as :func:`separable_logits` then :func:`separable_logz` under autograd, in fewer passes
    over (rows, V): the logits are exponentiated in place (a and b are not kept, only exp(a - max a) and
    exp(b - max b), which the normalisers need anyway), and backward forms each gradient of the logits once.
    With g1, g2 the gradients of the two outputs and c = -(g1 + g2),

        dL/da_jv = ea_jv sum_i (c_ij / s_ij) eb_iv + sum_i g1_ij [v = e_i] + (1 / V) sum_i g2_ij
        dL/db_iv = eb_iv sum_j (c_ij / s_ij) ea_jv + [v = e_i] sum_j g1_ij + (1 / V) sum_j g2_ij

    (s_ij = sum_v ea_jv eb_iv, the shifted normaliser): two bmm and a scaling per side, where autograd makes
    separate (rows, V) tensors for the exponential's backward, the gather's scatter and the mean's expansion
    and then adds them up. Underflowed normalisers (below :func:`_floor`) are recomputed with a log-sum-exp
    over V from their own logit rows, in forward and in backward.
    """

    @staticmethod
    def forward(ctx, src_feat, tgt_feat, weight, bias, target):
        a, b = separable_logits(src_feat, tgt_feat, weight, bias)  # (B, J, V), (B, I, V)
        src_len, tgt_len = a.size(1), b.size(1)
        gold = a.gather(2, target[:, None, :].expand(-1, src_len, tgt_len)).transpose(1, 2) \
            + b.gather(2, target[:, :, None])  # a_j[e_i] + b_i[e_i], (B, I, J)
        mean = a.mean(-1)[:, None, :] + b.mean(-1, keepdim=True)
        ma, mb = a.amax(-1, keepdim=True), b.amax(-1, keepdim=True)
        ea, eb = a.sub_(ma).exp_(), b.sub_(mb).exp_()  # in place: the logits are not needed any more
        s = torch.bmm(eb, ea.transpose(1, 2))  # (B, I, J)
        floor = _floor(s.dtype)
        logz = s.clamp(min=floor).log_().add_(mb).add_(ma.transpose(1, 2))
        small = (s < floor).nonzero(as_tuple=True)
        if small[0].numel():
            bb, ii, jj = small
            logz[bb, ii, jj] = _pair_logits(src_feat, tgt_feat, weight, bias, small).logsumexp(-1)
        ctx.small = small
        ctx.save_for_backward(src_feat, tgt_feat, weight, bias, target, ea, eb, s)
        return gold - logz, mean - logz

    @staticmethod
    @_own_precision
    def backward(ctx, g_gold, g_mean):
        src_feat, tgt_feat, weight, bias, target, ea, eb, s = ctx.saved_tensors
        acc = s.dtype
        src, tgt, w = src_feat.to(acc), tgt_feat.to(acc), weight.to(acc)
        vocab = w.size(0)
        g_gold = torch.zeros_like(s) if g_gold is None else g_gold.to(acc)
        g_mean = None if g_mean is None else g_mean.to(acc)
        c = -g_gold if g_mean is None else -(g_gold + g_mean)
        gz = c / s
        small = ctx.small
        if small[0].numel():
            gz[small] = 0.0  # their normalisers came from the log-sum-exp: their gradient is added below
        grad_a = torch.bmm(gz.transpose(1, 2), eb).mul_(ea)  # (B, J, V)
        grad_b = torch.bmm(gz, ea).mul_(eb)  # (B, I, V)
        if small[0].numel():
            bb, ii, jj = small
            rows = _pair_logits(src_feat, tgt_feat, weight, bias, small).softmax(-1)
            rows.mul_(c[small][:, None])
            grad_a.index_put_((bb, jj), rows, accumulate=True)
            grad_b.index_put_((bb, ii), rows, accumulate=True)
        grad_a.scatter_add_(2, target[:, None, :].expand(-1, grad_a.size(1), -1), g_gold.transpose(1, 2))
        grad_b.scatter_add_(2, target[:, :, None], g_gold.sum(2, keepdim=True))
        if g_mean is not None:
            grad_a.add_(g_mean.sum(1)[:, :, None] / vocab)
            grad_b.add_(g_mean.sum(2, keepdim=True) / vocab)
        need_src, need_tgt, need_w, need_bias = ctx.needs_input_grad[:4]
        grad_src = (grad_a @ w).to(src_feat.dtype) if need_src else None
        grad_tgt = (grad_b @ w).to(tgt_feat.dtype) if need_tgt else None
        grad_w = grad_bias = None
        if need_w:
            dim = w.size(1)
            # as (X^T G)^T: G^T X reads the (rows, V) gradient across its rows, a third slower on a CPU
            grad_wt = torch.mm(src.reshape(-1, dim).t(), grad_a.reshape(-1, vocab))
            grad_wt.addmm_(tgt.reshape(-1, dim).t(), grad_b.reshape(-1, vocab))
            grad_w = grad_wt.t().contiguous().to(weight.dtype)
        if bias is not None and need_bias:
            grad_bias = grad_a.sum((0, 1)).to(bias.dtype)
        return grad_src, grad_tgt, grad_w, grad_bias, None


def _pair_logits(src: Tensor, tgt: Tensor, weight: Tensor, bias: Optional[Tensor], index) -> Tensor:
    """The logit rows a_j + b_i (n, V) of the (b, i, j) triples in ``index``, in the accumulation dtype."""
    acc = accumulation_dtype(src.dtype)
    bb, ii, jj = index
    return _linear(src[bb, jj].to(acc) + tgt[bb, ii].to(acc), weight, bias)


@_own_precision
def separable_scores(src_feat: Tensor, tgt_feat: Tensor, weight: Tensor, bias: Optional[Tensor],
                     target: Tensor) -> Tuple[Tensor, Tensor]:
    """(log p(e_i | j), mean_v log p(v | j)), both (B, I, J), for every (i, j), differentiable.

    ``src_feat`` (B, J, d) = W5 h_j + b5, ``tgt_feat`` (B, I, d) = W6 s_i, ``target`` (B, I).
    """
    return _SeparableScores.apply(src_feat, tgt_feat, weight, bias, target)


def reference_separable_scores(src_feat: Tensor, tgt_feat: Tensor, weight: Tensor, bias: Optional[Tensor],
                               target: Tensor) -> Tuple[Tensor, Tensor]:
    """:func:`separable_scores` by autograd through :func:`separable_logz`: for tests."""
    a, b = separable_logits(src_feat, tgt_feat, weight, bias)
    logz = separable_logz(a, b)
    tgt_len = target.size(1)
    gold_a = a.gather(2, target[:, None, :].expand(-1, a.size(1), tgt_len)).transpose(1, 2)  # a_j[e_i] (B, I, J)
    gold_b = b.gather(2, target[:, :, None])  # b_i[e_i] (B, I, 1)
    mean = a.mean(-1)[:, None, :] + b.mean(-1, keepdim=True) - logz
    return gold_a + gold_b - logz, mean


@torch.no_grad()
@_own_precision
def separable_log_mixture(src_feat: Tensor, tgt_feat: Tensor, log_align: Tensor, weight: Tensor,
                          bias: Optional[Tensor], keep_idx: Optional[Tensor] = None, chunk_rows: int = 1024,
                          source: Optional[Tuple[Tensor, Tensor, Tensor]] = None,
                          return_logz: bool = False, owner: Optional[Tensor] = None):
    """log p(e | e_<i, f) = b_ie + log sum_j p(j | i) exp(a_je) / Z_ij, (B, I, V), without gradients.

    The decoding mixture of :func:`hmm_nmt.hmm.lexicon.log_mixture` for the separable lexicon: one matmul of
    the weights p(j | i) / Z_ij with the source exponentials. ``keep_idx`` (B, I, K): ``--lexicon-topk``'s
    kept positions (``log_align`` already renormalised over them). ``source``: (a, exp(a - m), m) of
    :func:`source_terms`, which incremental decoding computes once per sentence. ``owner`` (B,): ``source``
    holds one row per distinct source sentence and ``owner[r]`` is hypothesis r's (:func:`_grouped_bmm`).
    ``return_logz``: also log Z (B, I, J), the first-order filter's normalisers.
    """
    a, ea, ma = source if source is not None else source_terms(src_feat, weight, bias)
    b = _linear(tgt_feat.to(a.dtype), weight)
    logz, eb = separable_logz(a, b, (ea, ma), owner, keep_exp=True)
    if owner is not None and keep_idx is not None:  # the kept rows differ per hypothesis: gather them
        a, ea, ma, owner = a[owner], ea[owner], ma[owner], None
    ma_t = ma.transpose(1, 2) if owner is None else ma.transpose(1, 2)[owner]
    coef = log_align.to(a.dtype) - logz + ma_t  # log of p(j | i) / Z_ij * exp(m_j)
    if keep_idx is not None:
        coef = coef.gather(-1, keep_idx)
    peak = coef.amax(-1, keepdim=True).clamp(min=torch.finfo(a.dtype).min)  # (B, I, 1)
    w = (coef - peak).exp()
    if keep_idx is None:
        # written over exp(b - max b), no longer needed: one fresh (B, I, V) buffer less per step
        mix = _grouped_bmm(w, ea, owner, out=eb if eb.is_contiguous() else None)  # (B, I, V)
    else:  # each (b, i) mixes its own K rows: chunks of target positions bound the (B, i, K, V) gather
        mix = b.new_empty(b.shape)
        batch = torch.arange(a.size(0), device=a.device)[:, None, None]
        step = max(1, chunk_rows // max(1, a.size(0) * keep_idx.size(-1)))
        for s in range(0, b.size(1), step):
            rows = ea[batch, keep_idx[:, s:s + step]]  # (B, i, K, V)
            mix[:, s:s + step] = torch.einsum("bik,bikv->biv", w[:, s:s + step], rows)
    floor = _floor(mix.dtype)
    if mix.numel() == 0 or bool(mix.amin() >= floor):  # the usual case: one reduction, then in place
        out = mix.log_().add_(peak).add_(b)
        return (out, logz) if return_logz else out
    out = mix.clamp(min=floor).log_().add_(peak).add_(b)
    small = mix < floor
    if bool(small.any()):  # every weighted source row is far below its own max at this word: exact over j
        bb, ii, vv = small.nonzero(as_tuple=True)
        src_rows = bb if owner is None else owner[bb]
        rows = a[src_rows, :, vv] if keep_idx is None else a[bb[:, None], keep_idx[bb, ii], vv[:, None]]
        cols = coef[bb, ii] - ma.transpose(1, 2)[src_rows, 0] if keep_idx is None else \
            coef[bb, ii] - ma[bb[:, None], keep_idx[bb, ii], 0]
        out[bb, ii, vv] = torch.logsumexp(rows + cols, dim=-1) + b[bb, ii, vv]
    return (out, logz) if return_logz else out


def source_terms(src_feat: Tensor, weight: Tensor, bias: Optional[Tensor] = None):
    """(a (B, J, V), exp(a - m), m (B, J, 1)) of the source positions: what decoding keeps per sentence."""
    a = _linear(src_feat, weight, bias)
    ea, ma = _shifted_exp(a)
    return a, ea, ma


def reference_separable_log_probs(src_feat: Tensor, tgt_feat: Tensor, weight: Tensor,
                                  bias: Optional[Tensor]) -> Tensor:
    """log p(v | j, i) (B, I, J, V), materialised (plain log_softmax): for tests."""
    acc = accumulation_dtype(src_feat.dtype)
    hidden = src_feat.to(acc)[:, None, :, :] + tgt_feat.to(acc)[:, :, None, :]
    logits = torch.nn.functional.linear(hidden, weight.to(acc), None if bias is None else bias.to(acc))
    return torch.log_softmax(logits, dim=-1)
