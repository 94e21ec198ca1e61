#!/usr/bin/env python3
"""CPU time of the HMM cores' dynamic programmes (forward + backward through autograd), one thread.

    python scripts/bench_cores.py [--cores direct_first_order iohmm] [--steps 5]

Prints the median process CPU time per step of each core (after one warm-up step).
"""
import argparse
import statistics
import sys
import time

CORES = ("direct_first_order", "efb_hmm", "hnmc_arch2", "iohmm", "vlhmm")


def _setup(core):
    import torch

    torch.manual_seed(0)
    if core == "direct_first_order":
        from hmm_nmt.hmm import direct

        B, I, J = 32, 24, 24
        init = torch.log_softmax(torch.randn(B, J), -1).requires_grad_()
        trans = torch.log_softmax(torch.randn(B, I, J, J), -1).requires_grad_()
        lex = torch.randn(B, I, J).requires_grad_()
        mask = torch.ones(B, I, dtype=torch.bool)
        return lambda: direct.first_order_log_likelihood(init, trans, lex, mask).sum(), (init, trans, lex)
    if core == "efb_hmm":
        from hmm_nmt.hmm import efb

        B, T, N = 32, 40, 24
        log_L = torch.log_softmax(torch.randn(B, T, N), -1).requires_grad_()
        log_pi = torch.log_softmax(torch.randn(N), -1)
        log_a = torch.log_softmax(torch.randn(N, N), -1).requires_grad_()
        return lambda: efb.efb_hmm(log_L, log_pi, log_a)[0].logsumexp(-1).sum(), (log_L, log_a)
    if core == "hnmc_arch2":
        from hmm_nmt.hmm.hnmc import make_architecture

        arch = make_architecture("hnmc", 2, 64, 17, hidden_size=32)
        y = torch.randn(32, 40, 64)
        return lambda: arch(y).sum(), tuple(arch.parameters())
    if core == "iohmm":
        from hmm_nmt.hmm import iohmm

        n, d = 16, 32
        model = iohmm.IOHMM(iohmm.StateNetworks(n, d), iohmm.MultinomialOutputs(n, 20, input_dim=d))
        u = torch.randn(32, 40, d)
        y = torch.randint(0, 20, (32, 40))
        return lambda: model.log_likelihood(u, y).sum(), tuple(model.parameters())
    if core == "vlhmm":
        from hmm_nmt.hmm.vlhmm import VLHMM, Constraints

        V, m, k = 2000, 64, 32
        wc = torch.arange(V) % m
        wc[0] = -1
        model = VLHMM(Constraints.brown(wc, m, k), V, dim=64)
        x = torch.randint(1, V, (32, 30))
        mask = torch.ones_like(x, dtype=torch.bool)
        return lambda: model.log_likelihood(x, mask).sum(), tuple(model.parameters())
    raise ValueError(core)


def time_core(core, steps):
    import torch

    torch.set_num_threads(1)
    fn, params = _setup(core)
    times = []
    for _ in range(steps + 1):
        for p in params:
            p.grad = None
        t0 = time.process_time()
        fn().backward()
        times.append(time.process_time() - t0)
    return statistics.median(times[1:])  # the first step is warm-up


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", nargs="+", default=list(CORES), choices=CORES)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run (after one warm-up step)")
    opts = ap.parse_args(argv)
    for core in opts.cores:
        print(f"{core:20s} {1e3 * time_core(core, opts.steps):9.1f} ms/step")
    return 0

if __name__ == "__main__":
    sys.exit(main())
