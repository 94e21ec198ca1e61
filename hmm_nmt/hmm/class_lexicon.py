"""Class-factored lexicon of the direct HMM: an exact, normalised softmax that costs about 2 d sqrt(V) per row.

Every word e has one class c(e) (a fixed partition of the vocabulary, Goodman 2001; Mikolov et al. 2011):

    p(e | j) = p(c(e) | j) p(e | c(e), j)
    p(c | j)     = softmax_c(U t_ij + u)                       over the C classes
    p(e | c, j)  = softmax_{e in c}(W t_ij + b)                 over the words of class c only

with t_ij the lexicon hidden of (target position i, source position j), U (C, d) and u (C,) the class layer
and W (V, d), b (V,) the word layer (the softmax lexicon's own, shared with the embeddings). Summed over V it is
sum_c p(c | j) sum_{e in c} p(e | c, j) = 1: a distribution, so the DP, the posteriors and the brute-force
sums over alignments stay exact. Scoring one word costs d x (C + |c(e)|) instead of d x V.

Training scores rows grouped by target position: every source position j of target position i scores the
same word e_i, so the class's rows of W are gathered once per group and multiplied with its J hidden rows
(:func:`class_lexicon_scores`). Decoding needs p(v | j) for every v (:func:`class_log_mixture`), V per row as
the softmax lexicon.

The classes come from :func:`frequency_classes` (frequency binning of the cumulative sqrt-count mass, with
every class at most 2V/C words). :class:`ClassLayout` is the padded (C, M) member table the kernels gather
with. No fairseq import here: the functions take plain tensors.
"""
import math
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from hmm_nmt.hmm.lexicon import _own_precision
from hmm_nmt.hmm.precision import accumulation_dtype

NEG_INF = float("-inf")


def frequency_classes(counts: Sequence[float], num_classes: int) -> Tensor:
    """The class of each word (V,) long, classes numbered 0..C'-1 by decreasing frequency, C' <= num_classes.

    Frequency binning (Mikolov et al. 2011, the sqrt variant): words sorted by count (ties by index), each gets
    the bin of F(k) = (S_k / S + k / V) / 2, where S_k is the sqrt-count mass of the k words before it and k / V
    its rank; bins are [c / C, (c + 1) / C). The mass term gives frequent words small classes; the rank term
    bounds every class to 2V/C words (F grows by at least 1 / (2V) per word), so the padded member table the
    training kernel gathers is at most 2V/C wide even for a Zipfian tail. Bins left empty (a word with more
    than 2/C of the mass) are dropped, so every class has a word and p(c | j) never puts mass on nothing.
    """
    counts = torch.as_tensor(counts, dtype=torch.float64).clamp(min=0.0)
    vocab = counts.numel()
    if vocab == 0:
        raise ValueError("frequency_classes: empty vocabulary")
    num_classes = max(1, min(int(num_classes), vocab))
    order = sorted(range(vocab), key=lambda v: (-float(counts[v]), v))
    mass = counts[order].sqrt()
    total = float(mass.sum())
    before = torch.cumsum(mass, 0) - mass
    frac = before / total if total > 0 else torch.zeros(vocab, dtype=torch.float64)
    rank = torch.arange(vocab, dtype=torch.float64) / vocab
    bins = torch.floor(num_classes * (frac + rank) / 2).long().clamp(max=num_classes - 1)
    _, dense = torch.unique_consecutive(bins, return_inverse=True)  # bins are non-decreasing: drop the empty ones
    class_of = torch.empty(vocab, dtype=torch.long)
    class_of[torch.tensor(order)] = dense
    return class_of


def default_num_classes(vocab: int) -> int:
    """round(sqrt(V)): the C that minimises C + V / C, the cost of a row with classes of equal size."""
    return max(1, int(round(math.sqrt(vocab))))


class ClassLayout:
    """The member table of a class map: ``members`` (C, M) word ids padded with 0, ``valid`` (C, M),
    ``sizes`` (C,), ``position`` (V,) each word's column in its class's row, ``class_of`` (V,)."""

    def __init__(self, class_of: Tensor):
        class_of = class_of.long()
        vocab = class_of.numel()
        num_classes = int(class_of.max()) + 1 if vocab else 0
        sizes = torch.bincount(class_of, minlength=num_classes)
        width = int(sizes.max()) if vocab else 0
        order = torch.sort(class_of, stable=True).indices  # words of each class, by index
        start = torch.cumsum(sizes, 0) - sizes
        position = torch.empty_like(class_of)
        position[order] = torch.arange(vocab, device=class_of.device) - start[class_of[order]]
        members = torch.zeros(num_classes, width, dtype=torch.long, device=class_of.device)
        members[class_of, position] = torch.arange(vocab, device=class_of.device)
        self.class_of, self.sizes, self.position, self.members = class_of, sizes, position, members
        self.valid = torch.arange(width, device=class_of.device)[None, :] < sizes[:, None]
        self.num_classes, self.width, self.vocab = num_classes, width, vocab


def _chunk_groups(rows: int, layout: ClassLayout, dim: int, chunk_rows: int) -> int:
    """Groups per chunk: a chunk holds about as many floats as ``chunk_rows`` rows of V logits would."""
    budget = max(1, chunk_rows) * max(layout.vocab, 1)
    per_group = max(1, rows * (layout.num_classes + layout.width) + layout.width * dim)
    return max(1, budget // per_group)


def _chunk_terms(hidden, cls, pos, class_weight, class_bias, weight, bias, layout):
    """Recomputed per chunk: class log-probs (g, R, C), in-class log-probs (g, R, M) (-inf on padding), the
    gathered word rows (g, M, d) and the member ids (g, M)."""
    acc = hidden.dtype
    class_logits = torch.matmul(hidden, class_weight.to(acc).t())
    if class_bias is not None:
        class_logits = class_logits + class_bias.to(acc)
    log_class = torch.log_softmax(class_logits, dim=-1)
    ids = layout.members[cls]  # (g, M)
    w_rows = weight.to(acc)[ids]  # (g, M, d)
    word_logits = torch.bmm(hidden, w_rows.transpose(1, 2))  # (g, R, M)
    if bias is not None:
        word_logits = word_logits + bias.to(acc)[ids][:, None, :]
    word_logits = word_logits.masked_fill(~layout.valid[cls][:, None, :], NEG_INF)
    log_word = torch.log_softmax(word_logits, dim=-1)
    return log_class, log_word, w_rows, ids


def _smoothing_mean(log_class: Tensor, log_word: Tensor, valid: Tensor, sizes: Tensor) -> Tensor:
    """mean_c log p(c | j) + mean over the gold class's words of log p(v | c, j)  (g, R)."""
    in_class = log_word.masked_fill(~valid[:, None, :], 0.0).sum(-1) / sizes[:, None].to(log_word.dtype)
    return log_class.mean(-1) + in_class


class ClassLexiconScores(torch.autograd.Function):
    """Gold log-probability and class-level smoothing mean of grouped rows, chunked, recomputed in backward.

    forward(hidden (G, R, d), target (G,), class_weight (C, d), class_bias (C,) or None, weight (V, d),
            bias (V,) or None, layout, chunk_rows) -> (log p(target_g | row), smoothing mean), both (G, R)

    Per row, with a, b the gradients of the two outputs, P the class softmax and Q the in-class softmax:
    d/d class logits = a onehot(c) + b / C - (a + b) P, d/d in-class logits = a onehot(e) + b / |c| - (a + b) Q
    (zero outside the class). Nothing of size R x (C + M) is kept between forward and backward.
    """

    @staticmethod
    def forward(ctx, hidden, target, class_weight, class_bias, weight, bias, layout, chunk_rows):
        groups, rows, dim = hidden.shape
        acc = accumulation_dtype(hidden.dtype)
        cls, pos = layout.class_of[target], layout.position[target]
        gold = hidden.new_empty(groups, rows, dtype=acc)
        mean = hidden.new_empty(groups, rows, dtype=acc)
        step = _chunk_groups(rows, layout, dim, chunk_rows)
        with torch.no_grad():
            for s in range(0, groups, step):
                c, p = cls[s:s + step], pos[s:s + step]
                log_class, log_word, _, _ = _chunk_terms(hidden[s:s + step].to(acc), c, p, class_weight,
                                                         class_bias, weight, bias, layout)
                n = len(c)
                gold[s:s + step] = (log_class.gather(-1, c.view(n, 1, 1).expand(n, rows, 1)).squeeze(-1)
                                    + log_word.gather(-1, p.view(n, 1, 1).expand(n, rows, 1)).squeeze(-1))
                mean[s:s + step] = _smoothing_mean(log_class, log_word, layout.valid[c], layout.sizes[c])
        ctx.save_for_backward(hidden, target, class_weight, class_bias, weight, bias)
        ctx.layout, ctx.step = layout, step
        return gold, mean

    @staticmethod
    @_own_precision
    def backward(ctx, g_gold, g_mean):
        hidden, target, class_weight, class_bias, weight, bias = ctx.saved_tensors
        layout, step = ctx.layout, ctx.step
        groups, rows, dim = hidden.shape
        acc = g_gold.dtype
        cls, pos = layout.class_of[target], layout.position[target]
        need_h, _, need_cw, need_cb, need_w, need_b = ctx.needs_input_grad[:6]
        need_cb = need_cb and class_bias is not None
        need_b = need_b and bias is not None
        grad_h = torch.empty(hidden.shape, dtype=acc, device=hidden.device) if need_h else None
        grad_cw = torch.zeros(class_weight.shape, dtype=acc, device=hidden.device) if need_cw else None
        grad_cb = torch.zeros(layout.num_classes, dtype=acc, device=hidden.device) if need_cb else None
        grad_w = torch.zeros(weight.shape, dtype=acc, device=hidden.device) if need_w else None
        grad_b = torch.zeros(weight.size(0), dtype=acc, device=hidden.device) if need_b else None
        cw = class_weight.to(acc)
        for s in range(0, groups, step):
            c, p = cls[s:s + step], pos[s:s + step]
            n = len(c)
            h = hidden[s:s + step].to(acc)
            log_class, log_word, w_rows, ids = _chunk_terms(h, c, p, class_weight, class_bias, weight, bias, layout)
            a, b = g_gold[s:s + step].to(acc)[:, :, None], g_mean[s:s + step].to(acc)[:, :, None]
            d_class = log_class.exp_().mul_(-(a + b)).add_(b / layout.num_classes)
            d_class.scatter_add_(-1, c.view(n, 1, 1).expand(n, rows, 1), a)
            valid = layout.valid[c][:, None, :].to(acc)
            d_word = log_word.exp_().mul_(-(a + b)).add_(valid * (b / layout.sizes[c].to(acc)[:, None, None]))
            d_word.scatter_add_(-1, p.view(n, 1, 1).expand(n, rows, 1), a)
            if need_h:
                grad_h[s:s + step] = torch.matmul(d_class, cw) + torch.bmm(d_word, w_rows)
            if need_cw:
                grad_cw.addmm_(d_class.reshape(-1, d_class.size(-1)).t(), h.reshape(-1, dim))
            if need_cb:
                grad_cb += d_class.sum((0, 1))
            if need_w:  # padded columns carry a zero gradient (Q = 0 and valid = 0 there)
                grad_w.index_add_(0, ids.reshape(-1), torch.bmm(d_word.transpose(1, 2), h).reshape(-1, dim))
            if need_b:
                grad_b.index_add_(0, ids.reshape(-1), d_word.sum(1).reshape(-1))
        cast = lambda g, like: None if g is None else g.to(like.dtype)  # noqa: E731
        return (cast(grad_h, hidden), None, cast(grad_cw, class_weight), cast(grad_cb, class_bias),
                cast(grad_w, weight), cast(grad_b, bias), None, None)


@_own_precision
def class_lexicon_scores(hidden: Tensor, target: Tensor, class_weight: Tensor, class_bias: Optional[Tensor],
                         weight: Tensor, bias: Optional[Tensor], layout: ClassLayout,
                         chunk_rows: int = 1024) -> Tuple[Tensor, Tensor]:
    """(log p(target_g | row), smoothing mean) (G, R) for hidden rows (G, R, d) grouped by their target word.

    The smoothing mean is what label smoothing mixes with eps (the criterion's ``mean``): class-level and
    within the gold class, mean_c log p(c | j) + mean_{v in c(e)} log p(v | c(e), j), so that it costs no more
    than the gold score (the mean of log p(v | j) over all of V would cost V per row).
    A chunk holds about as many floats as ``chunk_rows`` rows of V logits (``--lexicon-chunk-size``).
    """
    if hidden.size(0) == 0 or hidden.size(1) == 0:
        z = hidden.new_zeros(hidden.shape[:2], dtype=accumulation_dtype(hidden.dtype))
        return z, z
    return ClassLexiconScores.apply(hidden, target, class_weight, class_bias, weight, bias, layout,
                                    max(1, int(chunk_rows)))


def class_log_probs(hidden: Tensor, class_weight: Tensor, class_bias: Optional[Tensor], weight: Tensor,
                    bias: Optional[Tensor], layout: ClassLayout) -> Tensor:
    """log p(v | row) for every v: (..., d) -> (..., V), materialised (differentiable; decoding, tests).

    The in-class normaliser of each class is a scatter log-sum-exp over its words: one pass over V.
    """
    acc = accumulation_dtype(hidden.dtype)
    h = hidden.to(acc)
    log_class = torch.log_softmax(torch.nn.functional.linear(h, class_weight.to(acc),
                                                             None if class_bias is None else class_bias.to(acc)), -1)
    logits = torch.nn.functional.linear(h, weight.to(acc), None if bias is None else bias.to(acc))
    shape = logits.shape[:-1] + (layout.num_classes,)
    index = layout.class_of.expand(logits.shape)
    with torch.no_grad():  # the max only stabilises the exp: its gradient cancels
        peak = logits.new_full(shape, NEG_INF).scatter_reduce(-1, index, logits, "amax", include_self=True)
    total = logits.new_zeros(shape).scatter_add(-1, index, (logits - peak.gather(-1, index)).exp())
    log_z = total.log() + peak  # (..., C) in-class log-normalisers
    return logits + (log_class - log_z).gather(-1, index)


@torch.no_grad()
@_own_precision
def class_log_mixture(src_feat: Tensor, tgt_feat: Tensor, log_align: Tensor, class_weight: Tensor,
                      class_bias: Optional[Tensor], weight: Tensor, bias: Optional[Tensor], layout: ClassLayout,
                      chunk_rows: int = 1024, keep_idx: Optional[Tensor] = None) -> Tensor:
    """log p(e | e_<i, f) = logsumexp_j [log p(j | i) + log p(c(e) | j) + log p(e | c(e), j)], (B, I, V).

    The decoding mixture of :func:`hmm_nmt.hmm.lexicon.log_mixture` for the class lexicon: the same shapes and
    ``keep_idx`` (B, I, K) for ``--lexicon-topk``, computed in log space in chunks of about ``chunk_rows``
    (i, j) pairs (and at most B x I of them, the output's own size), without gradients.
    """
    bsz, tgt_len, _ = tgt_feat.shape
    out = tgt_feat.new_empty(bsz, tgt_len, layout.vocab, dtype=accumulation_dtype(tgt_feat.dtype))
    width = src_feat.size(1) if keep_idx is None else keep_idx.size(-1)
    rows_per_chunk = max(1, min(chunk_rows, bsz * tgt_len) // max(1, width))
    b_idx = torch.arange(bsz, device=tgt_feat.device).repeat_interleave(tgt_len)
    i_idx = torch.arange(tgt_len, device=tgt_feat.device).repeat(bsz)
    out_flat = out.view(bsz * tgt_len, layout.vocab)
    for s in range(0, bsz * tgt_len, rows_per_chunk):
        bb, ii = b_idx[s:s + rows_per_chunk], i_idx[s:s + rows_per_chunk]
        if keep_idx is None:
            feat, align = src_feat[bb], log_align[bb, ii]
        else:
            idx = keep_idx[bb, ii]
            feat, align = src_feat[bb[:, None], idx], log_align[bb, ii].gather(1, idx)
        t = torch.relu(feat + tgt_feat[bb, ii][:, None, :])  # (c, width, d)
        logp = class_log_probs(t, class_weight, class_bias, weight, bias, layout)  # (c, width, V)
        out_flat[s:s + rows_per_chunk] = torch.logsumexp(logp.add_(align.to(logp.dtype)[:, :, None]), dim=1)
    return out


def reference_class_scores(hidden: Tensor, target: Tensor, class_weight, class_bias, weight, bias,
                           layout: ClassLayout) -> Tuple[Tensor, Tensor]:
    """Materialised reference of :func:`class_lexicon_scores` (plain autograd over (G, R, V)): for tests."""
    logp = class_log_probs(hidden, class_weight, class_bias, weight, bias, layout)
    gold = logp.gather(-1, target.view(-1, 1, 1).expand(*hidden.shape[:2], 1)).squeeze(-1)
    acc = logp.dtype
    log_class = torch.log_softmax(torch.nn.functional.linear(hidden.to(acc), class_weight.to(acc),
                                                             None if class_bias is None else class_bias.to(acc)), -1)
    cls = layout.class_of[target]
    in_class = (layout.class_of[None, :] == cls[:, None]).to(acc)  # (G, V)
    log_word = logp - log_class.gather(-1, layout.class_of.expand(logp.shape))
    mean = log_class.mean(-1) + (log_word * in_class[:, None, :]).sum(-1) / in_class.sum(-1)[:, None]
    return gold, mean
