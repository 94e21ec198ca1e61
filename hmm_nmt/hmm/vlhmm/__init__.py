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

Inference is the shared log-space chain of :mod:`hmm_nmt.hmm.chain`: the per-step log-potentials
G_t(i, j) = log p(z_t = C_t[j] | z_{t-1} = C_{t-1}[i]) + log p(x_t | C_t[j]) (B, T, n, n) go to
:func:`~hmm_nmt.hmm.chain.chain_forward` (log p(x) = its log_Z), :func:`~hmm_nmt.hmm.chain.chain_posteriors`
(explicit forward-backward) and :func:`~hmm_nmt.hmm.chain.viterbi` (the best state path); the posteriors are also the gradient of log p(x) w.r.t. the emission scores
(:func:`autograd_posteriors`). Memory per batch grows with B T n^2, never with |Z|^2.

Modules: :mod:`.constraints` (word partitions, the blocked/uniform constraint, state dropout),
:mod:`.params` (the factored neural and the scalar parameterization), :mod:`.model` (the model and its
test oracles). No fairseq import here.
"""
from hmm_nmt.hmm.vlhmm.constraints import Constraints, Restriction, read_word_clusters
from hmm_nmt.hmm.vlhmm.model import VLHMM, autograd_posteriors, dense_log_likelihood, num_parameters
from hmm_nmt.hmm.vlhmm.params import (
                                      BatchParameters,
                                      NeuralParameters,
                                      ResidualMLP,
                                      ScalarParameters,
                                      normalize_emissions,
                                      row_logsumexp,
)

__all__ = [
    "read_word_clusters", "Constraints", "Restriction", "ResidualMLP", "NeuralParameters", "ScalarParameters",
    "BatchParameters", "VLHMM", "row_logsumexp", "normalize_emissions", "autograd_posteriors",
    "dense_log_likelihood", "num_parameters",
]
