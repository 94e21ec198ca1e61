#!/usr/bin/env python3
"""Tomita's seven regular languages learned by an IOHMM (Bengio & Frasconi 1994, Section 5, Table 1).

The languages over {0, 1} (Tomita 1982); ``FSA min`` counts the states of the minimal complete DFA,
dead state included, as in the paper's Table 1:

1. ``1*``                                                              (FSA min 2)
2. ``(10)*``                                                           (3)
3. no odd-length block of 1s immediately followed by an odd-length block
   of 0s (blocks maximal: ``100`` is in, ``10`` and ``1000`` are not)   (5)
4. no more than two consecutive 0s (no ``000`` substring)              (4)
5. an even number of 0s and an even number of 1s                       (4)
6. (number of 0s - number of 1s) divisible by 3                        (3)
7. ``0*1*0*1*``                                                        (5)

Model (as in the paper): an IOHMM classifier with quantized inputs, lookup-table state networks
``w_ijk = P(x_t = i | x_{t-1} = j, u_t = k)`` over an ergodic (fully connected) transition graph, Moore
outputs ``eta_j = P(accept | x_T = j)`` (Bernoulli, no input to the output networks) and a target only
at the end of each string.  Each string is read after a start symbol (``u_1 = START``; ``x_0`` is state 1),
so the empty string is classified too.  Training: exact EM (Eq. 12, and the closed-form update of the
Bernoulli outputs), or GEM / plain likelihood gradient (``--algorithm``).

Protocol (the paper's): for every grammar and model size ``n``, 20 trials from different random
initialisations; a trial *converged* when it labels every training string correctly; ``n*`` is chosen
by the accuracy on 20 random held-out strings of length <= 12 (among the sizes with a converged trial,
the best mean over the converged trials; ties: more converged trials, then the smaller size); at
``n*`` the table reports the fraction of converged trials and the average / worst / best accuracy of the
converged trials on all 2^13 - 1 binary strings of length <= 12.  Trained models whose transition
probabilities are all near 0/1 (``--extract-threshold``) are turned into DFAs, minimised, and compared
with the grammar's minimal DFA by an exact equivalence check.

Tomita's original training sets are not reproduced here; each grammar's training set (``--data-seed``)
holds every string of length <= ``--short-len`` plus ``--n-pos`` accepted and ``--n-neg`` rejected
longer strings of length <= ``--train-max-len`` (fewer when the language has fewer), lengths first drawn
uniformly.  All trials of one (grammar, size) run at once as one batch: the trial index is folded into
the input symbol (trial ``r`` reads symbols ``3r .. 3r + 2``) and addresses its own output table, so the
trials are independent models trained by the same vectorised forward-backward.

    python examples/tomita/tomita.py --workers 2 --out tomita.json
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import time
from collections import deque

import torch

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "alignment")]  # this checkout's packages
from hmm_nmt.hmm import iohmm  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402

START = 2
PAPER = {  # Table 1 of the paper: n*, FSA min, convergence, average, worst, best, W&K best
    1: (2, 2, .600, 1.000, 1.000, 1.000, 1.000),
    2: (8, 3, .800, .965, .834, 1.000, 1.000),
    3: (7, 5, .150, .867, .775, 1.000, .783),
    4: (4, 4, .100, 1.000, 1.000, 1.000, .609),
    5: (4, 4, .100, 1.000, 1.000, 1.000, .668),
    6: (3, 3, .350, 1.000, 1.000, 1.000, .462),
    7: (3, 5, .450, .856, .815, 1.000, .557),
}

# ------------------------------------------------------------------------------------------------
# the languages: hand-written complete DFAs (state 0 starts), checked against plain predicates
# ------------------------------------------------------------------------------------------------


def _t3(s):
    blocks = []
    for c in s:
        if blocks and blocks[-1][0] == c:
            blocks[-1][1] += 1
        else:
            blocks.append([c, 1])
    return not any(a[0] == "1" and a[1] % 2 and b[0] == "0" and b[1] % 2 for a, b in zip(blocks, blocks[1:]))


def _t7(s):
    changes = sum(1 for a, b in zip(s, s[1:]) if a != b)
    return changes <= 3 - (1 if s.startswith("1") else 0)


PREDICATES = {
    1: lambda s: "0" not in s,
    2: lambda s: s == "10" * (len(s) // 2),
    3: _t3,
    4: lambda s: "000" not in s,
    5: lambda s: s.count("0") % 2 == 0 and s.count("1") % 2 == 0,
    6: lambda s: (s.count("0") - s.count("1")) % 3 == 0,
    7: _t7,
}

# (delta[state] = (next on 0, next on 1), accepting states)
DFAS = {
    1: ([(1, 0), (1, 1)], {0}),
    2: ([(2, 1), (0, 2), (2, 2)], {0}),
    # 0: clean, 1: odd 1-block, 2: odd 0s after odd 1s, 3: even (>0) 0s after odd 1s, 4: dead
    3: ([(0, 1), (2, 0), (3, 4), (2, 1), (4, 4)], {0, 1, 3}),
    4: ([(1, 0), (2, 0), (3, 0), (3, 3)], {0, 1, 2}),
    5: ([(1, 2), (0, 3), (3, 0), (2, 1)], {0}),
    6: ([(1, 2), (2, 0), (0, 1)], {0}),
    7: ([(0, 1), (2, 1), (2, 3), (4, 3), (4, 4)], {0, 1, 2, 3}),
}


def dfa_accepts(dfa, s):
    delta, acc = dfa
    q = 0
    for c in s:
        q = delta[q][int(c)]
    return q in acc


def minimize(dfa):
    """Moore's partition refinement on the reachable part; returns an equivalent minimal DFA."""
    delta, acc = dfa
    reach, todo = {0}, [0]
    while todo:
        q = todo.pop()
        for r in delta[q]:
            if r not in reach:
                reach.add(r)
                todo.append(r)
    states = sorted(reach)
    block = {q: int(q in acc) for q in states}
    while True:
        sig = {q: (block[q], block[delta[q][0]], block[delta[q][1]]) for q in states}
        ids = {}
        new = {q: ids.setdefault(sig[q], len(ids)) for q in states}
        if len(ids) == len(set(block.values())):
            break
        block = new
    block = new
    order = {}
    for q in [0] + states:  # number blocks with the start state's block first
        order.setdefault(block[q], len(order))
    m_delta = [None] * len(order)
    for q in states:
        m_delta[order[block[q]]] = (order[block[delta[q][0]]], order[block[delta[q][1]]])
    return m_delta, {order[block[q]] for q in states if q in acc}


def equivalent(a, b):
    """Exact language equivalence by a walk over the product automaton."""
    seen, todo = {(0, 0)}, deque([(0, 0)])
    while todo:
        p, q = todo.popleft()
        if (p in a[1]) != (q in b[1]):
            return False
        for c in (0, 1):
            nxt = (a[0][p][c], b[0][q][c])
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return True


def all_strings(max_len):
    out = [""]
    for L in range(1, max_len + 1):
        out += [format(i, f"0{L}b") for i in range(2 ** L)]
    return out


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------


def _draw(rng, pool_by_len, k):
    """``k`` distinct strings: a length uniformly among those still available, then a string of it."""
    pool = {L: list(v) for L, v in pool_by_len.items() if v}
    out = []
    while len(out) < k and pool:
        L = rng.choice(sorted(pool))
        s = pool[L].pop(rng.randrange(len(pool[L])))
        out.append(s)
        if not pool[L]:
            del pool[L]
    return out


def datasets(grammar, seed=0, n_pos=10, n_neg=10, train_max_len=10, short_len=3, n_valid=20, valid_max_len=12):
    """(train, valid, test) lists of (string, label); test = every string of length <= 12.

    train: every string of length <= ``short_len`` plus ``n_pos`` accepted and ``n_neg`` rejected longer
    strings of length <= ``train_max_len``; valid: ``n_valid`` random strings of length 1..12."""
    rng = random.Random(1000 * grammar + seed)
    acc = PREDICATES[grammar]
    train = [(s, int(acc(s))) for s in all_strings(short_len)]
    by_len = {True: {}, False: {}}
    for s in all_strings(train_max_len):
        if len(s) > short_len:
            by_len[acc(s)].setdefault(len(s), []).append(s)
    train += [(s, 1) for s in _draw(rng, by_len[True], n_pos)] + [(s, 0) for s in _draw(rng, by_len[False], n_neg)]
    rng.shuffle(train)
    valid = []
    for _ in range(n_valid):
        L = rng.randint(1, valid_max_len)
        s = "".join(rng.choice("01") for _ in range(L))
        valid.append((s, int(acc(s))))
    test = [(s, int(acc(s))) for s in all_strings(12)]
    return train, valid, test


def encode(strings, R):
    """Inputs for R trials at once: (R * S, T) state-network symbols (trial r reads 3r + {0, 1, START}),
    output-network symbols (the trial index), the real-step mask and the index of the last step."""
    S = len(strings)
    T = 1 + max(len(s) for s in strings)
    sym = torch.full((S, T), START, dtype=torch.long)
    for b, s in enumerate(strings):
        if s:
            sym[b, 1:1 + len(s)] = torch.tensor([int(c) for c in s])
    lengths = torch.tensor([1 + len(s) for s in strings])
    mask = torch.arange(T)[None] < lengths[:, None]
    r = torch.arange(R)[:, None, None]
    u = (3 * r + sym[None]).reshape(R * S, T)
    u_out = r.expand(R, S, T).reshape(R * S, T)
    return u, u_out, mask.repeat(R, 1), (lengths - 1).repeat(R)


# ------------------------------------------------------------------------------------------------
# a bank of R independent IOHMMs trained together
# ------------------------------------------------------------------------------------------------


def build_bank(n_states, R, seed, init_scale=1.0):
    torch.manual_seed(seed)
    return iohmm.IOHMM(iohmm.LookupStateNetworks(n_states, 3 * R, init_scale=init_scale),  # ergodic graph
                       iohmm.LookupMultinomialOutputs(n_states, 2, R, init_scale=init_scale),
                       initial="first").double()


def train_bank(model, train, R, algorithm="em", max_iter=300, tol=1e-6, lr=0.5):
    strings = [s for s, _ in train]
    u, u_out, mask, last = encode(strings, R)
    y = torch.tensor([lab for _, lab in train]).repeat(R)[:, None].expand_as(u).contiguous()
    target_mask = torch.zeros_like(mask)
    target_mask[torch.arange(len(last)), last] = True  # a target only at the end of the string
    prev = None
    opt = torch.optim.Adam(model.parameters(), lr=lr) if algorithm == "gradient" else None
    it = 0
    for it in range(1, max_iter + 1):
        if algorithm == "em":
            ll = iohmm.em_step(model, u, y, target_mask, mask, u_out)
        elif algorithm == "gem":
            ll = iohmm.gem_step(model, u, y, target_mask, mask, u_out, lr=lr, inner_steps=1)
        else:
            opt.zero_grad()
            ll = model.log_likelihood(u, y, target_mask, mask, u_out)
            (-ll.sum()).backward()
            opt.step()
        per_trial = ll.detach().view(R, -1).sum(1)
        if prev is not None and (per_trial - prev).abs().max() < tol:
            break
        prev = per_trial
    return it


@torch.no_grad()
def accept_prob(model, strings, R, chunk=1024):
    """``P(accept)`` = the output eta_T of Eq. 3 at the end of each string: (R, len(strings))."""
    out = []
    for s in range(0, len(strings), chunk):
        part = strings[s:s + chunk]
        u, u_out, mask, last = encode(part, R)
        _, eta = model.predict(u, mask, u_out)
        out.append(eta[torch.arange(len(last)), last, 1].view(R, len(part)))
    return torch.cat(out, 1)


def accuracy(model, data, R):
    p = accept_prob(model, [s for s, _ in data], R)
    y = torch.tensor([lab for _, lab in data], dtype=torch.bool)
    return ((p > 0.5) == y).double().mean(1)  # (R,)


@torch.no_grad()
def extract_dfa(model, r, threshold):
    """The DFA of trial ``r`` if every reachable transition has probability >= threshold, else None."""
    table = model.state_networks.log_table().exp()  # (3R, n, n) [k, i, j]
    eta = model.output_networks.log_probs(torch.tensor([[r]]), (1, 1))[0, 0].exp()  # (n, 2)
    start = table[3 * r + START, :, 0]
    if start.max() < threshold:
        return None
    states = [int(start.argmax())]
    index = {states[0]: 0}
    delta = []
    k = 0
    while k < len(states):
        j = states[k]
        row = []
        for c in (0, 1):
            col = table[3 * r + c, :, j]
            if col.max() < threshold:
                return None
            i = int(col.argmax())
            if i not in index:
                index[i] = len(states)
                states.append(i)
            row.append(index[i])
        delta.append(tuple(row))
        k += 1
    accept = {index[j] for j in states if eta[j, 1] > 0.5}
    return delta, accept


def format_dfa(dfa):
    delta, acc = dfa
    return "; ".join(f"q{q}{'*' if q in acc else ''}: 0->q{a} 1->q{b}" for q, (a, b) in enumerate(delta))


def run_grammar(job):
    """All sizes x trials of one grammar; returns a JSON-able summary."""
    grammar, a = job
    torch.set_num_threads(1)
    train, valid, test = datasets(grammar, a["data_seed"], a["n_pos"], a["n_neg"], a["train_max_len"], a["short_len"])
    target = minimize(DFAS[grammar])
    per_size = {}
    for n in a["sizes"]:
        t0 = time.time()
        model = build_bank(n, a["trials"], seed=a["seed"] + 7919 * grammar + 104729 * n, init_scale=a["init_scale"])
        iters = train_bank(model, train, a["trials"], a["algorithm"], a["max_iter"], a["tol"], a["lr"])
        tr, va, te = (accuracy(model, d, a["trials"]) for d in (train, valid, test))
        converged = tr == 1.0
        dfas = [extract_dfa(model, r, a["extract_threshold"]) if converged[r] else None for r in range(a["trials"])]
        exact = [d is not None and equivalent(minimize(d), target) for d in dfas]
        example = next((minimize(d) for d, e in zip(dfas, exact) if e), None)
        per_size[n] = {
            "iterations": iters, "seconds": round(time.time() - t0, 2),
            "train_acc": tr.tolist(), "valid_acc": va.tolist(), "test_acc": te.tolist(),
            "converged": converged.tolist(),
            "extracted": sum(d is not None for d in dfas), "extracted_exact": sum(exact),
            "example_dfa": format_dfa(example) if example else None,
        }
    # n*: best mean held-out accuracy of the converged trials of a size (sizes with a converged trial
    # first); ties -> more converged trials, then the smaller model
    def score(n):
        p = per_size[n]
        conv_va = [v for v, c in zip(p["valid_acc"], p["converged"]) if c]
        mean_va = sum(conv_va) / len(conv_va) if conv_va else sum(p["valid_acc"]) / a["trials"]
        return (bool(conv_va), round(mean_va, 12), sum(p["converged"]), -n)

    best = max(a["sizes"], key=score)
    ps = per_size[best]
    conv = [acc for acc, c in zip(ps["test_acc"], ps["converged"]) if c]
    return {
        "grammar": grammar, "n_star": best, "fsa_min": len(target[0]),
        "train_size": len(train), "train_pos": sum(lab for _, lab in train),
        "convergence": sum(ps["converged"]) / a["trials"],
        "average": sum(conv) / len(conv) if conv else None,
        "worst": min(conv) if conv else None, "best": max(conv) if conv else None,
        "extracted": ps["extracted"], "extracted_exact": ps["extracted_exact"], "example_dfa": ps["example_dfa"],
        "per_size": per_size,
    }


def format_table(results, trials):
    f = lambda x: "  -  " if x is None else f"{x:.3f}"  # noqa: E731
    lines = [
        f"{'':8}{'measured (this run, ' + str(trials) + ' trials per size)':^54}|{'paper (Table 1)':^46}",
        f"{'Grammar':8}{'n*':>3}{'FSA':>4}{'Conv':>7}{'Avg':>7}{'Worst':>7}{'Best':>7}{'Ext':>5}{'Exact':>6}{'':>8}|"
        f"{'n*':>3}{'FSA':>4}{'Conv':>7}{'Avg':>7}{'Worst':>7}{'Best':>7}{'W&K':>7}",
    ]
    for r in results:
        p = PAPER[r["grammar"]]
        lines.append(
            f"{r['grammar']:<8}{r['n_star']:>3}{r['fsa_min']:>4}{r['convergence']:>7.3f}{f(r['average']):>7}"
            f"{f(r['worst']):>7}{f(r['best']):>7}{r['extracted']:>5}{r['extracted_exact']:>6}{'':>8}|"
            f"{p[0]:>3}{p[1]:>4}{p[2]:>7.3f}{p[3]:>7.3f}{p[4]:>7.3f}{p[5]:>7.3f}{p[6]:>7.3f}")
    lines.append("Conv: fraction of trials labelling every training string correctly; Avg/Worst/Best: accuracy of "
                 "the converged trials on all 8191 strings of length <= 12; Ext: converged trials whose transition "
                 "probabilities are all near 0/1 (an automaton was extracted); Exact: extracted automata "
                 "equivalent to the grammar's minimal DFA; FSA: states of that minimal DFA.")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grammars", type=int, nargs="+", default=list(range(1, 8)), choices=range(1, 8))
    ap.add_argument("--sizes", type=int, nargs="+", default=list(range(2, 9)), help="model sizes n to try")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--algorithm", choices=["em", "gem", "gradient"], default="em")
    ap.add_argument("--max-iter", type=int, default=1000, help="EM/GEM iterations at most")
    ap.add_argument("--tol", type=float, default=1e-6, help="stop when no trial's log-likelihood moves more")
    ap.add_argument("--lr", type=float, default=0.5, help="GEM initial step / Adam learning rate (gradient)")
    ap.add_argument("--init-scale", type=float, default=1.0, help="std of the random initial logits")
    ap.add_argument("--n-pos", type=int, default=10, help="random accepted training strings (beyond the short ones)")
    ap.add_argument("--n-neg", type=int, default=10, help="random rejected training strings (beyond the short ones)")
    ap.add_argument("--short-len", type=int, default=3, help="every string this short is a training string")
    ap.add_argument("--train-max-len", type=int, default=10)
    ap.add_argument("--extract-threshold", type=float, default=0.99)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="grammars trained in parallel (1 thread each)")
    ap.add_argument("--out", help="write the full results as JSON here")
    args = ap.parse_args(argv)
    if args.trials < 1 or min(args.sizes) < 1 or args.max_iter < 1:
        ap.error("--trials, --sizes and --max-iter must be positive")
    if not 0.5 < args.extract_threshold <= 1:
        ap.error("--extract-threshold must be in (0.5, 1]")
    torch.set_num_threads(1)
    cfg = vars(args)
    jobs = [(g, cfg) for g in args.grammars]
    t0 = time.time()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    if args.workers > 1:
        with mp.get_context("spawn").Pool(args.workers) as pool:
            it = pool.imap(run_grammar, jobs)
            results = list(tqdm(it, total=len(jobs), desc="grammars", file=sys.stderr) if tqdm else it)
    else:
        it = map(run_grammar, jobs)
        results = list(tqdm(it, total=len(jobs), desc="grammars", file=sys.stderr) if tqdm else it)
    print(format_table(results, args.trials))
    for r in results:
        if r["example_dfa"]:
            print(f"grammar {r['grammar']} (n*={r['n_star']}) extracted minimal DFA (* = accept): {r['example_dfa']}")
    print(f"total {time.time() - t0:.1f}s")
    if args.out:
        atomic_write(args.out, json.dumps({"args": cfg, "results": results}, indent=1))


if __name__ == "__main__":
    main()
