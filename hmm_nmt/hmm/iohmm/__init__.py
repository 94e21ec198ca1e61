"""Input/output hidden Markov model (Bengio & Frasconi, "An Input Output HMM Architecture", NIPS 1994).

An IOHMM maps an input sequence ``u_1..u_T`` to an output sequence ``y_1..y_T`` through a discrete
hidden state ``x_t in {1..n}``.  Notation (the paper's):

* **state networks** ``N_j``: ``phi_ij,t = P(x_t = i | x_{t-1} = j, u_t)``, a softmax over the
  successors ``S_j`` of state ``j`` (``phi_ij,t = 0`` for ``i`` not in ``S_j``, so transition graphs
  can be constrained);
* **output networks** ``O_j``: ``eta_jt``, the parameter of the output density ``f_Y(y_t; eta_jt)`` given
  ``x_t = j`` and ``u_t`` (softmax outputs for a multinomial, linear outputs for a Gaussian mean);
* **internal state** ``zeta_t`` with ``zeta_it = P(x_t = i | u_1^t)``:
  ``zeta_t = sum_j zeta_{j,t-1} phi_j,t`` (Eq. 2), and the **output** ``eta_t = sum_j zeta_jt eta_jt``
  (Eq. 3), the expected position parameter of ``y_t``;
* **forward** ``alpha_it = P(y_1^t, x_t = i | u_1^t)`` and **backward**
  ``beta_it = P(y_t^T | x_t = i, u_t^T)`` (Eq. 10-11)::

      alpha_it = f_Y(y_t; eta_it) sum_l phi_il(u_t) alpha_{l,t-1}
      beta_it  = f_Y(y_t; eta_it) sum_l phi_li(u_{t+1}) beta_{l,t+1}

* **likelihood** ``L = prod_p P(y_1^T | u_1^T) = prod_p sum_i alpha_iT`` (Eq. 6);
* **posteriors** ``zeta_hat_it = P(x_t = i | u_1^T, y_1^T)`` and
  ``h_ij,t = P(x_t = i, x_{t-1} = j | u_1^T, y_1^T) = beta_it alpha_{j,t-1} phi_ij(u_t) / sum_i alpha_iT``;
* **auxiliary function** (Eq. 9)
  ``Q = sum_p sum_t sum_i [zeta_hat_it log f_Y(y_t; eta_it) + sum_j h_ij,t log phi_ij,t]``.

Targets may be *intermittent* (given only at some steps, e.g. only at the end of a sequence for
classification): a step without a target contributes ``f_Y = 1``, i.e. ``log_f = 0``, and there the
forward recursion is exactly Eq. 2.  Generally the forward pass computes the predictive state
``zeta_t = P(x_t | u_1^t, y_<t)`` (Eq. 2 conditioned on the targets seen so far) and
``P(y_t | y_<t, u_1^t) = sum_i zeta_it f_Y(y_t; eta_it)`` (Eq. 3 as a density), whose product over ``t``
is the likelihood (6).

Conventions of this module: tensors are batched, time runs from ``t = 1..T`` as array index ``0..T-1``
and ``x_0`` is the non-emitting initial state with distribution ``zeta_0``; ``log_phi[b, t, i, j]`` is
``log phi_ij,t`` (successor ``i`` first); ``log_f[b, t, i]`` is ``log f_Y(y_t; eta_it)`` (0 where no
target); ``mask[b, t]`` is True on real (not padded) steps, sequences right padded.  Everything is
computed in log space with per-step normalisation (the scaled forward-backward algorithm), so long
sequences neither underflow nor overflow; forbidden transitions are ``-inf`` in ``log_phi`` and get
exactly zero mass and zero (never NaN) gradient.

Training (all three are here): (a) autograd on :func:`forward_filter`'s log-likelihood (its gradient
with respect to ``log_phi`` / ``log_f`` *is* ``h`` / ``zeta_hat``: posteriors as gradients of the
log-partition); (b) GEM (:func:`gem_step`): E-step posteriors as fixed targets and gradient ascent on
``Q`` (Eq. 13-14) with backtracking so that ``Q``, hence ``L``, never decreases; (c) exact EM
(:func:`em_step`, Eq. 12) for lookup-table networks addressed by quantized inputs.
"""
from hmm_nmt.hmm.iohmm.dp import (  # noqa: F401
    NEG_INF,
    Filter,
    Posteriors,
    backward_scaled,
    filter_step,
    forward_filter,
    log_alpha,
    log_beta,
    log_likelihood,
    log_matvec,
    observe,
    posteriors,
    q_function,
    safe_log,
    state_distribution,
    viterbi,
)
from hmm_nmt.hmm.iohmm.model import IOHMM, em_step, gem_step  # noqa: F401
from hmm_nmt.hmm.iohmm.networks import (  # noqa: F401
    GaussianOutputs,
    LookupMultinomialOutputs,
    LookupStateNetworks,
    MultinomialOutputs,
    StateNetworks,
    left_to_right_graph,
)
