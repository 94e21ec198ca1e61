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

No fairseq import here: the functions take plain tensors.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

LEXICON_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _low(dtype: torch.dtype, like: Tensor) -> bool:
    return dtype != torch.float32 and like.dtype != torch.float64


def _logits(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    """fp32 logits of one chunk; the matmul may run in a lower precision (bf16), accumulation stays fp32.

    ``weight`` should already be in ``dtype`` (converted once per call, not per chunk). The bias is fused
    into the matmul (fp32) or added in place (bf16), so a chunk allocates one (rows, V) buffer.
    """
    if not _low(dtype, hidden):
        return torch.addmm(bias, hidden, weight.t()) if bias is not None else hidden @ weight.t()
    out = (hidden.to(dtype) @ weight.t()).float()
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
    a * onehot(target) + b / V - (a + b) * softmax, formed chunk by chunk without keeping the logits.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, chunk_rows, dtype):
        n = hidden.size(0)
        gold = hidden.new_empty(n, dtype=torch.float32 if hidden.dtype != torch.float64 else hidden.dtype)
        logz = torch.empty_like(gold)
        mean = torch.empty_like(gold)
        w_mm = weight.to(dtype) if _low(dtype, hidden) else weight
        for s in range(0, n, chunk_rows):
            e = min(n, s + chunk_rows)
            logits = _logits(hidden[s:e], w_mm, bias, dtype)
            gold[s:e] = logits.gather(1, target[s:e, None]).squeeze(1)
            mean[s:e] = logits.mean(dim=-1)
            logz[s:e] = _logsumexp_(logits)
        ctx.save_for_backward(hidden, weight, bias, target, logz)
        ctx.chunk_rows, ctx.dtype = chunk_rows, dtype
        return gold - logz, mean - logz

    @staticmethod
    def backward(ctx, g_gold, g_mean):
        hidden, weight, bias, target, logz = ctx.saved_tensors
        chunk_rows, dtype = ctx.chunk_rows, ctx.dtype
        n, vocab = hidden.size(0), weight.size(0)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=logz.dtype, device=weight.device) if need_w else None
        grad_b = torch.zeros(vocab, dtype=logz.dtype, device=weight.device) if need_b and bias is not None else None
        low = _low(dtype, hidden)
        w_mm = weight.to(dtype) if low else weight
        for s in range(0, n, chunk_rows):
            e = min(n, s + chunk_rows)
            a, b = g_gold[s:e, None], g_mean[s:e, None]
            g = _logits(hidden[s:e], w_mm, bias, dtype)
            # softmax in place, then a * onehot + b / V - (a + b) * softmax
            g.sub_(logz[s:e, None]).exp_().mul_(-(a + b)).add_(b / vocab)
            g.scatter_add_(1, target[s:e, None], a)
            if low:
                g_mm, h_mm = g.to(dtype), hidden[s:e].to(dtype)
            else:
                g_mm, h_mm = g, hidden[s:e]
            if need_h:
                grad_h[s:e] = (g_mm @ w_mm).to(hidden.dtype)
            if need_w:
                grad_w += (g_mm.t() @ h_mm).to(grad_w.dtype)
            if grad_b is not None:
                grad_b += g.sum(0)
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None


def lexicon_scores(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                   chunk_rows: int = 1024, dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    """(log p(target | row), mean_v log p(v | row)) for rows of ``hidden``; see :class:`LexiconScores`."""
    if hidden.size(0) == 0:
        z = hidden.new_zeros(0, dtype=torch.float32)
        return z, z
    return LexiconScores.apply(hidden, weight, bias, target, max(1, int(chunk_rows)), dtype)


def reference_lexicon_scores(hidden, weight, bias, target):
    """Unchunked reference (materialises N x V logits): for tests only."""
    logits = hidden @ weight.t()
    if bias is not None:
        logits = logits + bias
    lp = torch.log_softmax(logits.float() if logits.dtype != torch.float64 else logits, dim=-1)
    return lp.gather(1, target[:, None]).squeeze(1), lp.mean(-1)


def log_mixture(src_feat: Tensor, tgt_feat: Tensor, log_align: Tensor, weight: Tensor, bias: Optional[Tensor],
                chunk_rows: int = 1024, dtype: torch.dtype = torch.float32,
                return_logz: bool = False, keep_idx: Optional[Tensor] = None):
    """log p(e | e_<i, f) = logsumexp_j [log p(j | i) + log softmax_e(W ReLU(src_feat_j + tgt_feat_i) + b)].

    src_feat (B, J, d) = W5 h_j + bias, tgt_feat (B, I, d) = W6 s_i, log_align (B, I, J) (-inf on padding).
    Returns (B, I, V) log-probabilities, and with ``return_logz`` also the lexicon log-normalisers (B, I, J).
    Rows (b, i) are processed in chunks of about ``chunk_rows`` (i, j) pairs, so memory is O(chunk x V).
    With ``keep_idx`` (B, I, K) only those source positions enter the mixture (their alignment weights must
    already be renormalised over them) and only B x I x K lexicon rows are computed; logz is then (B, I, K).
    """
    bsz, tgt_len, _ = tgt_feat.shape
    src_len = src_feat.size(1)
    vocab = weight.size(0)
    out = tgt_feat.new_empty(bsz, tgt_len, vocab, dtype=torch.float32 if tgt_feat.dtype != torch.float64 else tgt_feat.dtype)
    width = src_len if keep_idx is None else keep_idx.size(-1)
    logz_all = out.new_empty(bsz, tgt_len, width) if return_logz else None
    rows_per_chunk = max(1, chunk_rows // max(1, width))
    if _low(dtype, tgt_feat):
        weight = weight.to(dtype)
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
        logits = _logits(t.reshape(-1, t.size(-1)), weight, bias, dtype).view(e - s, width, vocab)
        logz = torch.logsumexp(logits, dim=-1)
        if logz_all is not None:
            logz_all.view(bsz * tgt_len, width)[s:e] = logz
        weights = (align - logz)[:, :, None]
        out_flat[s:e] = torch.logsumexp(logits + weights, dim=1)
    return (out, logz_all) if return_logz else out
