"""The direct HMM's two largest elementwise products, a cache-sized block at a time, their intermediates recomputed.

Two layers of the transformer-based direct HMM form a tensor d times larger than their output:

* the first-order alignment's trilinear energy (Eq. 11-12, :class:`~hmm_nmt.models.first_order_alignment.FirstOrderAlignment`),

      log p(j | j', i) = log_softmax_j( base_ij + jump_j'j + sum_d q_id p_j'd r_jd ),

  where the product q_i * p_j' is a (B, I, J', d) tensor;
* the cross-attention of Eq. 6 (:class:`~hmm_nmt.models.dhmm_layers.DHMMCrossAttention`), per head,

      c_i = sum_j alpha_ij ReLU(v_j + t_i),

  where ReLU(v_j + t_i) is a (I, B, H, J, D) tensor.

Under autograd each of them is written to memory, read back by the next operation, kept for the backward pass
and read again there, with the gradient of the same size beside it: on a CPU, where these layers run far below
the matmul rate, that traffic is where their time goes. :func:`trilinear_log_softmax` and
:func:`relu_weighted_sum` compute the same numbers a block of sentences (or of target positions) at a time, the
block's intermediate small enough to stay in the core's cache, and keep only their inputs and output: the
backward pass forms each block again. The arithmetic is that of the unblocked expressions (checked against them
in float64 by tests/hmm/test_blocked.py, gradients included); on a GPU one block holds the whole batch.
"""
from typing import Optional

import torch
from torch import Tensor

# bytes of a block's largest intermediate on a CPU: about a core's L2 cache, so that it stays there
CPU_BLOCK_BYTES = 2 << 20


def _rows(total: int, row_bytes: int, device: torch.device, block_bytes: Optional[int]) -> int:
    """Rows of ``row_bytes`` each per block: all of them on a GPU (one kernel per operation is what it wants),
    else as many as fit in ``block_bytes`` (at least one)."""
    if block_bytes is None:
        block_bytes = CPU_BLOCK_BYTES if device.type == "cpu" else 0
    if block_bytes <= 0:
        return max(1, total)
    return max(1, min(total, block_bytes // max(1, row_bytes)))


class _TrilinearLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, base, jump, q, p, r, block_bytes):
        bsz, tgt_len, dim = q.shape
        src_len = p.size(1)
        out = torch.empty(bsz, tgt_len, src_len, r.size(1), dtype=q.dtype, device=q.device)
        step = _rows(bsz, tgt_len * src_len * dim * q.element_size(), q.device, block_bytes)
        r_t = r.transpose(1, 2)
        energy = out.new_empty((min(step, bsz),) + out.shape[1:])  # one block's scratch, reused
        for b in range(0, bsz, step):
            e = slice(b, b + step)
            qp = (q[e, :, None, :] * p[e, None, :, :]).flatten(1, 2)  # (b, I x J', d)
            blk = torch.add(base[e, :, None, :], jump[e, None, :, :], out=energy[:qp.size(0)])  # (b, I, J', J)
            flat = blk.view(qp.size(0), -1, blk.size(-1))
            torch.baddbmm(flat, qp, r_t[e], out=flat)  # the out= form: FlopCounterMode counts it, not baddbmm_
            torch._log_softmax(blk, -1, False, out=out[e])  # aten's log-softmax into the output: no copy
        ctx.block_bytes = block_bytes
        ctx.save_for_backward(q, p, r, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, p, r, out = ctx.saved_tensors
        bsz, tgt_len, dim = q.shape
        src_len = p.size(1)
        grad_base = q.new_empty(out.shape[:2] + out.shape[3:])  # (B, I, J)
        grad_jump = q.new_empty(out.shape[0:1] + out.shape[2:])  # (B, J', J)
        grad_q, grad_p, grad_r = torch.empty_like(q), torch.empty_like(p), torch.empty_like(r)
        step = _rows(bsz, tgt_len * src_len * dim * q.element_size(), q.device, ctx.block_bytes)
        for b in range(0, bsz, step):
            e = slice(b, b + step)
            g = grad[e].to(out.dtype)
            # the log-softmax's backward, g - softmax * sum_j g, in aten's one fused pass
            ge = torch._log_softmax_backward_data(g, out[e], -1, out.dtype)  # (b, I, J', J)
            torch.sum(ge, dim=2, out=grad_base[e])
            torch.sum(ge, dim=1, out=grad_jump[e])
            rows = ge.size(0)
            ge = ge.view(rows, -1, ge.size(-1))  # (b, I x J', J)
            qp = q[e, :, None, :] * p[e, None, :, :]  # (b, I, J', d)
            torch.bmm(ge.transpose(1, 2), qp.view(rows, -1, dim), out=grad_r[e])
            gqp = torch.bmm(ge, r[e]).view(rows, tgt_len, src_len, dim)  # (b, I, J', d)
            torch.sum(qp.copy_(gqp).mul_(p[e, None, :, :]), dim=2, out=grad_q[e])
            torch.sum(gqp.mul_(q[e, :, None, :]), dim=1, out=grad_p[e])
        return grad_base, grad_jump, grad_q, grad_p, grad_r, None


def trilinear_log_softmax(base: Tensor, jump: Tensor, q: Tensor, p: Tensor, r: Tensor,
                          block_bytes: Optional[int] = None) -> Tensor:
    """log_softmax_j(base[b, i, j] + jump[b, j', j] + sum_d q[b, i, d] p[b, j', d] r[b, j, d]), (B, I, J', J).

    ``base`` (B, I, J), ``jump`` (B, J', J) (source padding folded in as a large negative), ``q`` (B, I, d),
    ``p`` (B, J', d), ``r`` (B, J, d), all of one floating dtype. ``block_bytes``: the size of a block's
    (b, I, J', d) product (default: :data:`CPU_BLOCK_BYTES` on a CPU, the whole batch elsewhere).
    """
    dtype = torch.promote_types(torch.promote_types(base.dtype, jump.dtype), q.dtype)
    dtype = torch.promote_types(torch.promote_types(dtype, p.dtype), torch.promote_types(r.dtype, torch.float32))
    with torch.autocast(q.device.type, enabled=False):  # the log-softmax's sums stay in float32 (or float64)
        return _TrilinearLogSoftmax.apply(*(x.to(dtype) for x in (base, jump, q, p, r)), block_bytes)


def reference_trilinear_log_softmax(base: Tensor, jump: Tensor, q: Tensor, p: Tensor, r: Tensor) -> Tensor:
    """:func:`trilinear_log_softmax` as plain autograd expressions over the whole batch (the unblocked layer: tests
    and benchmarks/blocked.py compare against it)."""
    bsz, tgt_len, dim = q.shape
    src_len = p.size(1)
    qp = (q[:, :, None, :] * p[:, None, :, :]).view(bsz, tgt_len * src_len, dim)  # (B, I x J', d)
    bias = base[:, :, None, :] + jump[:, None]  # (B, I, J', J)
    energy = torch.baddbmm(bias.view(bsz, tgt_len * src_len, -1), qp, r.transpose(1, 2))
    return torch.log_softmax(energy.view(bsz, tgt_len, src_len, -1), dim=-1)


class _ReluWeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha, v, t, block_bytes):
        tgt_len, bsz, heads, dim = t.shape
        src_len = v.size(2)
        out = t.new_empty(t.shape)
        step = _rows(tgt_len, bsz * heads * src_len * dim * t.element_size(), t.device, block_bytes)
        w = alpha.permute(2, 0, 1, 3)  # (T, B, H, S)
        for s in range(0, tgt_len, step):
            e = slice(s, s + step)
            u = (v[None] + t[e, :, :, None, :]).relu_()  # (t, B, H, S, D)
            rows = u.size(0) * bsz * heads
            torch.bmm(w[e].reshape(rows, 1, src_len), u.view(rows, src_len, dim), out=out[e].view(rows, 1, dim))
        ctx.block_bytes = block_bytes
        ctx.save_for_backward(alpha, v, t)
        return out

    @staticmethod
    def backward(ctx, grad):
        alpha, v, t = ctx.saved_tensors
        tgt_len, bsz, heads, dim = t.shape
        src_len = v.size(2)
        grad = grad.to(t.dtype)
        grad_alpha = alpha.new_empty(tgt_len, bsz, heads, src_len)
        grad_v = torch.zeros_like(v)
        grad_t = torch.empty_like(t)
        step = _rows(tgt_len, bsz * heads * src_len * dim * t.element_size(), t.device, ctx.block_bytes)
        w = alpha.permute(2, 0, 1, 3)  # (T, B, H, S)
        for s in range(0, tgt_len, step):
            e = slice(s, s + step)
            u = (v[None] + t[e, :, :, None, :]).relu_()  # (t, B, H, S, D)
            rows = u.size(0) * bsz * heads
            g = grad[e]  # (t, B, H, D)
            torch.bmm(u.view(rows, src_len, dim), g.reshape(rows, dim, 1),
                      out=grad_alpha[e].view(rows, src_len, 1))
            # d c / d u = alpha, through the ReLU where its input was positive
            outer = torch.bmm(w[e].reshape(rows, src_len, 1), g.reshape(rows, 1, dim)).view(u.shape)
            gu = torch.ops.aten.threshold_backward(outer, u, 0)  # (t, B, H, S, D)
            grad_v.add_(gu.sum(0))
            torch.sum(gu, dim=3, out=grad_t[e])
        return grad_alpha.permute(1, 2, 0, 3), grad_v, grad_t, None


def relu_weighted_sum(alpha: Tensor, v: Tensor, t: Tensor, block_bytes: Optional[int] = None) -> Tensor:
    """c[t, b, h] = sum_s alpha[b, h, t, s] ReLU(v[b, h, s] + t[t, b, h]), (T, B, H, D).

    ``alpha`` (B, H, T, S), ``v`` (B, H, S, D), ``t`` (T, B, H, D), one floating dtype. ``block_bytes``: the size
    of a block's (t, B, H, S, D) ReLU (default: :data:`CPU_BLOCK_BYTES` on a CPU, all target positions elsewhere).
    """
    dtype = torch.promote_types(torch.promote_types(alpha.dtype, v.dtype), t.dtype)
    with torch.autocast(t.device.type, enabled=False):  # one dtype inside: autocast would recast the bmm's inputs
        return _ReluWeightedSum.apply(*(x.to(dtype) for x in (alpha, v, t)), block_bytes)


def reference_relu_weighted_sum(alpha: Tensor, v: Tensor, t: Tensor) -> Tensor:
    """:func:`relu_weighted_sum` as plain autograd expressions over all target positions (the unblocked layer)."""
    tgt_len, bsz, heads, dim = t.shape
    u = (v[None] + t[:, :, :, None, :]).relu()  # (T, B, H, S, D)
    w = alpha.permute(2, 0, 1, 3).reshape(-1, 1, u.size(3))  # (T x B x H, 1, S)
    return torch.bmm(w, u.reshape(-1, u.size(3), dim)).view(tgt_len, bsz, heads, dim)
