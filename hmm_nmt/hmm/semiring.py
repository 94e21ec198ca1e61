"""Semirings for the chain recursions of :mod:`hmm_nmt.hmm.chain` (in the spirit of torch-struct).

A semiring fixes the two operations of a dynamic programme over a chain: the ⊕-reduction over states
(:meth:`Semiring.sum`) and the vector-matrix products ``matvec`` (forward: ``out(i) = ⊕_j v(j) ⊗ M(j, i)``) and
``rmatvec`` (backward: ``out(j) = ⊕_i M(j, i) ⊗ w(i)``), ⊗ being + on log values. The same recursion gives
the log-partition and marginals under :data:`LOG` and the best path score and max-marginals under
:data:`MAX` (Viterbi).

* :data:`LOG`: ``torch.logsumexp``; inputs must use the finite :data:`~hmm_nmt.hmm.logspace.MASKED` for
  impossible entries wherever gradients flow (the fast path of the cores).
* :data:`LOG_SAFE`: a logsumexp that also takes all -inf rows without NaN gradients (the direct HMM, whose
  forward-only callers may pass -inf).
* :data:`MAX`: max-product in log space.
* :class:`ProbLog`: the log semiring with the matrices given as *probabilities*, so the products run as
  matmuls (the IOHMM, whose transition matrices are softmax outputs); ``successor_first`` says the matrices
  are stored ``[i, j]`` (the IOHMM paper's phi_ij) instead of ``[j, i]``.
"""
import torch
from torch import Tensor

from hmm_nmt.hmm.logspace import log_matvec, masked_logsumexp

__all__ = ["Semiring", "LOG", "LOG_SAFE", "MAX", "ProbLog"]


class Semiring:
    name = "log"
    is_max = False

    def sum(self, x: Tensor, dim: int) -> Tensor:
        return torch.logsumexp(x, dim=dim)

    def matvec(self, v: Tensor, m: Tensor) -> Tensor:
        """``out(..., i) = ⊕_j v(..., j) ⊗ m(..., j, i)``."""
        return self.sum(v.unsqueeze(-1) + m, dim=-2)

    def rmatvec(self, m: Tensor, w: Tensor) -> Tensor:
        """``out(..., j) = ⊕_i m(..., j, i) ⊗ w(..., i)``."""
        return self.sum(m + w.unsqueeze(-2), dim=-1)

    def __repr__(self):
        return f"<semiring {self.name}>"


class _SafeLog(Semiring):
    name = "log_safe"

    def sum(self, x, dim):
        return masked_logsumexp(x, dim)


class _Max(Semiring):
    name = "max"
    is_max = True

    def sum(self, x, dim):
        return x.amax(dim=dim)


class ProbLog(Semiring):
    """Log semiring over log vectors and *probability* matrices (products as matmuls)."""

    name = "prob_log"

    def __init__(self, successor_first: bool = False):
        self.successor_first = successor_first

    def matvec(self, v, m):
        return log_matvec(m, v, transpose=not self.successor_first)

    def rmatvec(self, m, w):
        return log_matvec(m, w, transpose=self.successor_first)


LOG = Semiring()
LOG_SAFE = _SafeLog()
MAX = _Max()
