"""The IOHMM: state networks + output networks + initial state, and its training procedures (autograd on the
likelihood, GEM on Eq. 9 with backtracking, exact EM for lookup tables)."""
import torch
import torch.nn as nn

from hmm_nmt.hmm.iohmm.dp import Posteriors, log_likelihood, posteriors, q_function, state_distribution, viterbi
from hmm_nmt.hmm.logspace import NEG_INF, safe_log


class IOHMM(nn.Module):
    """State networks + output networks + initial state distribution ``zeta_0``.

    ``initial``: ``"learned"`` (softmax parameters, re-estimated by EM), ``"uniform"`` or ``"first"``
    (``x_0 = 1`` surely).  Every method takes the state-network input ``u`` and optionally a separate
    output-network input ``u_out`` (default ``u``).  ``y`` holds the targets; ``target_mask`` (B, T)
    marks the steps that have one (intermittent targets; default: every real step); ``mask`` (B, T)
    marks real steps of right-padded sequences.
    """

    def __init__(self, state_networks, output_networks, initial="learned"):
        super().__init__()
        self.state_networks = state_networks
        self.output_networks = output_networks
        n = state_networks.n_states
        if output_networks.n_states != n:
            raise ValueError("state and output networks disagree on the number of states")
        self.n_states = n
        self.initial = initial
        if initial == "learned":
            self.zeta0_logits = nn.Parameter(torch.zeros(n))
        elif initial == "uniform":
            self.register_buffer("fixed_log_zeta0", torch.full((n,), -torch.log(torch.tensor(float(n)))))
        elif initial == "first":
            self.register_buffer("fixed_log_zeta0", torch.full((n,), NEG_INF).index_fill_(0, torch.tensor([0]), 0.0))
        else:
            raise ValueError(f"initial must be learned, uniform or first, not {initial!r}")

    def log_zeta0(self):
        return torch.log_softmax(self.zeta0_logits, 0) if self.initial == "learned" else self.fixed_log_zeta0

    def _masks(self, y, mask, target_mask):
        B, T = y.shape[:2]
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=y.device)
        target_mask = mask if target_mask is None else (target_mask.bool() & mask.bool())
        return mask.bool(), target_mask

    def potentials(self, u, y, target_mask=None, mask=None, u_out=None):
        """``(log_phi, log_f, log_zeta0, mask)``: the inputs of the dynamic programme."""
        mask, target_mask = self._masks(y, mask, target_mask)
        log_phi = self.state_networks(u)
        log_f = self.output_networks.log_density(u if u_out is None else u_out, y)
        log_f = torch.where(target_mask[:, :, None], log_f, torch.zeros_like(log_f))  # no target: f = 1
        return log_phi, log_f, self.log_zeta0().to(log_f), mask

    def log_likelihood(self, u, y, target_mask=None, mask=None, u_out=None):
        """Per-sequence ``log P(y | u)`` (B,), differentiable (training method (a))."""
        return log_likelihood(*self.potentials(u, y, target_mask, mask, u_out))

    def posteriors(self, u, y, target_mask=None, mask=None, u_out=None) -> Posteriors:
        with torch.no_grad():
            return posteriors(*self.potentials(u, y, target_mask, mask, u_out))

    def q_function(self, u, y, post, target_mask=None, mask=None, u_out=None):
        """``Q(Theta; Theta_hat)`` summed over the batch (Eq. 9), differentiable in ``Theta``."""
        log_phi, log_f, log_zeta0, mask = self.potentials(u, y, target_mask, mask, u_out)
        return q_function(log_phi, log_f, log_zeta0, post, mask).sum()

    def predict(self, u, mask=None, u_out=None):
        """Eq. 2 and 3 without targets: ``zeta`` (B, T, n) and the output ``eta_t = sum_j zeta_jt eta_jt``
        (class probabilities of a multinomial, the mean of a Gaussian)."""
        log_phi = self.state_networks(u)
        B, T = log_phi.shape[:2]
        if mask is None:
            mask = torch.ones(B, T, dtype=torch.bool, device=log_phi.device)
        zeta = state_distribution(log_phi, self.log_zeta0().to(log_phi), mask).exp()
        eta_j = self.output_networks.mean(u if u_out is None else u_out, (B, T))
        return zeta, torch.einsum("btj,btjc->btc", zeta, eta_j)

    def viterbi(self, u, y=None, target_mask=None, mask=None, u_out=None):
        """The most probable state path ``(log P(y, x* | u) (B,), x* (B, T))`` given the targets ``y``, or given
        the inputs alone when ``y`` is None (then ``log P(x* | u)``); -1 on padded steps."""
        if y is None:
            log_phi = self.state_networks(u)
            B, T = log_phi.shape[:2]
            log_f = log_phi.new_zeros(B, T, self.n_states)
            return viterbi(log_phi, log_f, self.log_zeta0().to(log_phi), mask)
        return viterbi(*self.potentials(u, y, target_mask, mask, u_out))


def em_step(model: IOHMM, u, y, target_mask=None, mask=None, u_out=None):
    """One exact EM iteration for lookup-table networks (Eq. 12); returns the log-likelihood (B,) of the
    parameters *before* the update (the E-step computes it anyway)."""
    for name, net in (("state", model.state_networks), ("output", model.output_networks)):
        if not hasattr(net, "em_update"):
            raise TypeError(f"exact EM needs lookup-table {name} networks, got {type(net).__name__}")
    mask_, target_mask_ = model._masks(y, mask, target_mask)
    post = model.posteriors(u, y, target_mask_, mask_, u_out)
    model.state_networks.em_update(u, post, mask_)
    model.output_networks.em_update(u if u_out is None else u_out, y, post, target_mask_)
    if model.initial == "learned":
        with torch.no_grad():
            model.zeta0_logits.copy_(safe_log(post.zeta0_hat.sum(0) / post.zeta0_hat.shape[0]))
    return post.log_likelihood


def gem_step(model: IOHMM, u, y, target_mask=None, mask=None, u_out=None, lr=0.1, inner_steps=1,
             max_halvings=30):
    """One GEM iteration (Eq. 13-14): E-step posteriors as fixed targets, then ``inner_steps`` gradient
    ascent steps on ``Q``, each step halved until ``Q`` does not decrease (so ``L`` does not either:
    ``L(new) - L(old) >= Q(new; old) - Q(old; old)``).  Returns the log-likelihood (B,) before the step."""
    post = model.posteriors(u, y, target_mask, mask, u_out)
    params = [p for p in model.parameters() if p.requires_grad]
    for _ in range(inner_steps):
        q0 = model.q_function(u, y, post, target_mask, mask, u_out)
        grads = torch.autograd.grad(q0, params, allow_unused=True)
        old = [p.detach().clone() for p in params]
        step = lr
        accepted = False
        for _ in range(max_halvings):
            with torch.no_grad():
                for p, o, g in zip(params, old, grads):
                    if g is not None:
                        p.copy_(o + step * torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0))
                q1 = model.q_function(u, y, post, target_mask, mask, u_out)
            if q1 >= q0.detach():
                accepted = True
                break
            step /= 2
        if not accepted:
            with torch.no_grad():
                for p, o in zip(params, old):
                    p.copy_(o)
            break
    return post.log_likelihood
