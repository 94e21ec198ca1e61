"""Sentence likelihood of the direct HMM by dynamic programming over alignments (Wang et al. 2021).

Notation (the paper's): target words e_1..e_I, source positions j = 1..J, alignment b_i = j.

* lexicon score  L(i, j) = log p(e_i | j, e_<i, f)   (or its label-smoothed version ls(i, j)),
* zero order     log p(j | e_<i, f)           =: A(i, j)            (Eq. 5, 8),
* first order    log p(j | j', e_<i, f)       =: T(i, j', j), and the start distribution
                 log p(j | start, f)          =: A0(j) used at i = 1 (Eq. 11).

Forward recursion (Eq. 13-14), in log space:

    Q(1, j) = A0(j) + L(1, j)
    Q(i, j) = L(i, j) + logsumexp_j' [ T(i, j', j) + Q(i-1, j') ]
    log p(E | F) = logsumexp_j Q(I, j)

Zero order is the special case T(i, j', j) = A(i, j): the sum factorises per position.
Target padding (mask False) leaves Q unchanged, so padded positions never change a sentence's likelihood.
Source padding must carry MASKED (or -inf in forward-only use) in A / A0 / T on the padded j.

The alignment posterior p(b_i = j | E, F) is the gradient of log p(E | F) with respect to L(i, j)
(torch-struct's view); :func:`posteriors` computes it that way and :func:`forward_backward` by an explicit
backward recursion, which the tests compare. The first order's likelihood (training) and
:func:`scaled_posteriors` (aligning) run the scaled recursion in probability space instead
(:mod:`hmm_nmt.hmm.scaled`): one matrix-vector product per step, a closed-form backward, and an error bound
per sentence with the log-space recursion where the bound is not met.

Links as evidence: for sets C_i of allowed source positions on some target positions,
p(b_i in C_i for those i | E, F) = Z_C / Z, where Z_C is the same forward run with L(i, j) masked outside C_i
(:func:`link_log_posterior`). Its negative log trains a model toward given links without a second backward
pass, and with one link per position it is the posterior itself.
"""
import torch
from torch import Tensor

from hmm_nmt.hmm import chain, scaled
from hmm_nmt.hmm.logspace import MASKED
from hmm_nmt.hmm.semiring import LOG_SAFE

__all__ = ["MASKED", "zero_order_log_likelihood", "first_order_forward", "first_order_log_likelihood",
           "log_likelihood", "posteriors", "forward_backward", "topk_mask", "first_order_topk_paths",
           "first_order_pruned_log_likelihood", "first_order_pruned_filter_log_likelihood", "restriction",
           "link_log_posterior", "scaled_posteriors"]


def zero_order_log_likelihood(log_align: Tensor, lex: Tensor, tgt_mask: Tensor) -> Tensor:
    """log p(E | F) per sentence (B,) from A (B, I, J), L (B, I, J) and the target mask (B, I)."""
    per_pos = torch.logsumexp(log_align + lex, dim=-1)
    return per_pos.masked_fill(~tgt_mask, 0.0).sum(-1)


def first_order_forward(log_init: Tensor, log_trans: Tensor, lex: Tensor, tgt_mask: Tensor) -> Tensor:
    """Forward variables Q (B, I, J) of the first-order direct HMM.

    log_init (B, J): A0; log_trans (B, I, J', J): T (the slice i = 0 is unused); lex (B, I, J): L;
    tgt_mask (B, I) True on real target positions (right padding; a padded step copies Q forward).
    The shared chain forward (:func:`hmm_nmt.hmm.chain.forward`, unnormalised: Q is the joint log-probability)
    with A0 as the start, T as the potentials and L as the emissions; one (B, J', J) log-matrix product per step.
    """
    return chain.forward(log_trans, mask=tgt_mask, log_emit=lex, log_start=log_init, semiring=LOG_SAFE,
                         normalize=False).log_alpha


def first_order_log_likelihood(log_init: Tensor, log_trans: Tensor, lex: Tensor, tgt_mask: Tensor) -> Tensor:
    """log p(E | F) per sentence (B,) of the first-order direct HMM (Eq. 14), by the scaled recursion in
    probability space and its closed-form gradient (:mod:`hmm_nmt.hmm.scaled`); :func:`first_order_forward`
    is the log-space recursion."""
    return scaled.log_likelihood(log_init, log_trans, lex, tgt_mask)


def log_likelihood(lex: Tensor, tgt_mask: Tensor, log_align: Tensor = None, log_init: Tensor = None,
                   log_trans: Tensor = None) -> Tensor:
    """Dispatch on the order: zero order needs ``log_align``, first order ``log_init`` and ``log_trans``."""
    if log_trans is None:
        return zero_order_log_likelihood(log_align, lex, tgt_mask)
    return first_order_log_likelihood(log_init, log_trans, lex, tgt_mask)


def posteriors(lex: Tensor, tgt_mask: Tensor, **alignment) -> Tensor:
    """p(b_i = j | E, F) (B, I, J) as the gradient of log p(E | F) w.r.t. the lexicon scores."""
    with torch.enable_grad():
        lex = lex.detach().requires_grad_(True)
        alignment = {k: v.detach() for k, v in alignment.items() if v is not None}
        ll = log_likelihood(lex, tgt_mask, **alignment)
        (grad,) = torch.autograd.grad(ll.sum(), lex)
    return grad


def restriction(allowed: Tensor) -> Tensor:
    """Additive lexicon scores (B, I, J) that confine b_i to the True entries of ``allowed`` (B, I, J) on every
    target position that has one: MASKED elsewhere on such a row, 0 on it and on rows with none (free)."""
    bound = allowed.any(-1, keepdim=True) & ~allowed
    return torch.zeros(allowed.shape, dtype=torch.get_default_dtype(), device=allowed.device).masked_fill(bound, MASKED)


def link_log_posterior(lex: Tensor, tgt_mask: Tensor, allowed: Tensor, log_z: Tensor = None,
                       **alignment) -> Tensor:
    """log p(b_i in C_i for every target position i with an allowed source position | E, F) per sentence (B,),
    C_i the True entries of ``allowed[:, i]``: log Z_C - log Z (<= 0; 0 for a sentence without links).
    ``log_z``: :func:`log_likelihood` of the same arguments, when the caller has it."""
    if log_z is None:
        log_z = log_likelihood(lex, tgt_mask, **alignment)
    return log_likelihood(lex + restriction(allowed).to(lex.dtype), tgt_mask, **alignment) - log_z


def forward_backward(lex: Tensor, tgt_mask: Tensor, log_align: Tensor = None, log_init: Tensor = None,
                     log_trans: Tensor = None) -> Tensor:
    """Explicit forward-backward posteriors p(b_i = j | E, F) (B, I, J); zero on padded target positions."""
    bsz, tgt_len, src_len = lex.shape
    if log_trans is None:  # zero order: positions are independent given E, F
        post = torch.softmax(log_align + lex, dim=-1)
        return post * tgt_mask[..., None]
    q = first_order_forward(log_init, log_trans, lex, tgt_mask)
    beta = chain.backward(log_trans, tgt_mask, log_emit=lex, semiring=LOG_SAFE, normalize=False)
    lengths = tgt_mask.sum(-1)
    log_z = torch.logsumexp(q.gather(1, (lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, src_len)).squeeze(1), -1)
    post = (q + beta - log_z[:, None, None]).exp()
    return post * tgt_mask[..., None]


def topk_mask(log_align: Tensor, valid: Tensor, k: int) -> Tensor:
    """(..., J) mask of the k most probable valid source positions (all valid ones if k >= their number)."""
    scores = log_align.masked_fill(~valid, float("-inf"))
    idx = scores.topk(min(k, scores.size(-1)), dim=-1).indices
    return torch.zeros_like(valid).scatter(-1, idx, True) & valid


def first_order_topk_paths(log_init: Tensor, log_trans: Tensor, gold, tgt_mask: Tensor, src_valid: Tensor, k: int):
    """The kept alignment positions of the first-order pruned forward (a beam over positions), no gradients.

    Step i keeps the k best j of the predicted alignment p(b_i = j | e_<i, f) = sum_j' p(j | j') q_{i-1}(j'),
    q_{i-1} the normalised forward vector of the pruned recursion with the exact lexicon. ``gold(i, keep)``
    returns log p(e_i | j) (B, J) at the entries where ``keep`` (B, J) is True (those of real target
    positions are all it needs to compute), so only B x k lexicon rows per step are scored.

    Returns (keep (B, I, J), the restricted path sum with the exact lexicon (B,), the predicted mass kept at
    each step m_i (B, I), 0 on target padding). :func:`first_order_pruned_log_likelihood` (or
    :func:`first_order_pruned_filter_log_likelihood`) is then the differentiable forward over the kept
    positions, with the lexicon scored in one batch.
    """
    with torch.no_grad():
        keeps, masses, q = [], [], None
        for i in range(tgt_mask.size(1)):
            if i == 0:
                pred = log_init
            else:
                pred = LOG_SAFE.matvec(torch.log_softmax(q, dim=-1), log_trans[:, i])
            keep = topk_mask(pred, src_valid, k) & tgt_mask[:, i, None]
            masses.append((pred.exp() * keep).sum(-1))
            lex = gold(i, keep)
            new = lex + (log_init if i == 0 else LOG_SAFE.matvec(q, log_trans[:, i]))
            new = new.masked_fill(~keep, MASKED)
            q = new if i == 0 else torch.where(tgt_mask[:, i, None], new, q)
            keeps.append(keep)
        return torch.stack(keeps, dim=1), torch.logsumexp(q, -1), torch.stack(masses, dim=1)


def first_order_pruned_log_likelihood(log_init: Tensor, log_trans: Tensor, lex: Tensor, keep: Tensor,
                                      tgt_mask: Tensor) -> Tensor:
    """log of the sum over the alignment paths inside ``keep`` (B, I, J) of the first-order direct HMM.

    Dropped paths only remove non-negative terms: a lower bound of :func:`first_order_log_likelihood`,
    equal to it when ``keep`` holds every source position. ``lex`` is only read where ``keep``.
    """
    return first_order_log_likelihood(log_init, log_trans, lex.masked_fill(~keep, MASKED), tgt_mask)


def first_order_pruned_filter_log_likelihood(log_init: Tensor, log_trans: Tensor, lex: Tensor, keep: Tensor,
                                             tgt_mask: Tensor) -> Tensor:
    """log-likelihood (B,) of the pruned first-order model that decoding with ``--lexicon-topk`` uses.

    At step i the predicted alignment p(b_i = j | e_<i, f) = sum_j' p(j | j') q_{i-1}(j') is renormalised
    over the kept positions S_i (``keep`` (B, I, J)): p~_i(j); the step's probability of e_i is
    c_i = sum_{j in S_i} p~_i(j) p(e_i | j), and the filtered state is q_i(j) = p~_i(j) p(e_i | j) / c_i.
    log p(E | F) = sum_i log c_i. The restricted path sum (:func:`first_order_pruned_log_likelihood`) is
    this plus sum_i log m_i, m_i the predicted mass on S_i: the same filter, but with a reward for moving
    alignment mass into the kept set.
    """
    ll = lex.new_zeros(lex.size(0))
    q = None
    for i in range(lex.size(1)):
        pred = log_init if i == 0 else LOG_SAFE.matvec(q, log_trans[:, i])
        pred = torch.log_softmax(pred.masked_fill(~keep[:, i], MASKED), dim=-1)
        joint = (pred + lex[:, i]).masked_fill(~keep[:, i], MASKED)
        c = torch.logsumexp(joint, dim=-1)
        real = tgt_mask[:, i]
        ll = ll + c * real
        new = joint - c[:, None]
        q = new if q is None else torch.where(real[:, None], new, q)
    return ll



def scaled_posteriors(lex: Tensor, tgt_mask: Tensor, log_align: Tensor = None, log_init: Tensor = None,
                      log_trans: Tensor = None) -> Tensor:
    """:func:`forward_backward`'s posteriors; first order by the scaled recursion in probability space
    (:func:`hmm_nmt.hmm.scaled.posteriors`: within 1e-6 of the exact ones, several times faster)."""
    if log_trans is None:
        return forward_backward(lex, tgt_mask, log_align=log_align)
    return scaled.posteriors(lex, tgt_mask, log_init, log_trans)
