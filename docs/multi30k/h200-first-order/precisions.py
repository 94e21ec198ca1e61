"""BLEU split into its n-gram precisions and brevity penalty, for the converged CPU models and the H200 first
order (test_2016_flickr, stock search, the benchmark's own test.hyp files; sacrebleu as the reports score:
``-tok none -lc``).  Run from the repository root with the run directories present:
``python docs/multi30k/h200-first-order/precisions.py`` (output in ``precisions.txt``)."""
import os

import sacrebleu

REF = "runs/m30k/data/text/test.en"
RUNS = {"transformer, converged (CPU)": "runs/m30k-cpuconv/seed-{s}/de-en/transformer/test.hyp",
        "zero order CPU path, converged": "runs/m30k-cpuconv/seed-{s}/de-en/dhmm0_fast/test.hyp",
        "first order, 8 min H200": "runs/m30k-gpu3-6660/seed-{s}/de-en/dhmm1/test.hyp",
        "first order, 10 min H200": "runs/m30k-gpu3/seed-{s}/de-en/dhmm1/test.hyp"}


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main():
    ref = lines(REF)
    print("model | seed | BLEU | brevity penalty | len ratio | 1-4-gram precisions | BLEU / BP")
    for name, pattern in RUNS.items():
        for s in (1, 2):
            path = pattern.format(s=s)
            if not os.path.exists(path):
                continue
            b = sacrebleu.corpus_bleu(lines(path), [ref], tokenize="none", lowercase=True, force=True)
            prec = " / ".join(f"{p:.1f}" for p in b.precisions)
            print(f"{name} | {s} | {b.score:.2f} | {b.bp:.3f} | {b.sys_len / b.ref_len:.3f} | {prec} | "
                  f"{b.score / b.bp:.2f}")


if __name__ == "__main__":
    main()
