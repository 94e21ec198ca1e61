"""Validation NLL per update: the first order trained 10 minutes on the H200 (8 + 2 continued) beside the CPU-converged transformer
and zero order (CPU path) of the same seed.  Run from the repository root with the run directories present:
``python docs/multi30k/h200-8min-first-order/curves.py``; prints the points it compares and writes
``valid_nll.png`` beside itself."""
import os
import sys

sys.path.insert(0, ".")
from benchmarks.logs import parse_train_log

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = {"transformer (CPU, converged)": "runs/m30k-cpuconv/seed-{s}/de-en/transformer",
        "zero order, CPU path (CPU)": "runs/m30k-cpuconv/seed-{s}/de-en/dhmm0_fast",
        "first order (H200, 10 min)": "runs/m30k-gpu3/seed-{s}/de-en/dhmm1"}
POINTS = (2000, 4000, 6000, 6500)


def curve(jdir):
    return [(v["updates"], v["nll_loss"]) for v in parse_train_log(f"{jdir}/train.log")["valid_curve"]
            if v.get("nll_loss") is not None]


def main():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for s, ax in zip((1, 2), axes):
        for name, pattern in RUNS.items():
            jdir = pattern.format(s=s)
            if not os.path.exists(f"{jdir}/train.log"):
                continue
            c = curve(jdir)
            best = min(c, key=lambda t: t[1])
            at = ", ".join(f"{u}: {min(c, key=lambda t: abs(t[0] - u))[1]}" for u in POINTS if c[-1][0] >= u)
            print(f"seed {s} {name}: lowest nll {best[1]} at {best[0]} (of {c[-1][0]} updates); at {at}")
            ax.plot([u for u, _ in c], [n for _, n in c], label=name)
        ax.set(title=f"seed {s}", xlabel="updates", ylim=(2.1, 3.2))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation NLL (bits per target token)")
    axes[0].legend()
    fig.suptitle("Multi30k de-en, d=128 2+2, 2k BPE: validation NLL per update")
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "valid_nll.png"), dpi=110)


if __name__ == "__main__":
    main()
