"""AER of every link variant of ``hmm-nmt-align`` for one pair of checkpoints, from one matrix extraction.

    python scripts/align_variants.py --fwd FWD.pt --rev REV.pt --data DATA-BIN --subset valid \
        --gold valid.align [--methods posterior,alignment] [--thresholds 0.1,0.2,...] [--json OUT]

The matrices of each model are computed once (``alignment.extract.extract_matrices``) and every variant is
read off them with the same function ``hmm-nmt-align`` uses (``sentence_word_links``), so a row's links
are exactly what ``hmm-nmt-align --method M --links D [--rev-path REV --symmetrize S]`` writes.
Variants: one direction (fwd, and rev written source-target) with argmax / mutual / union / threshold:T;
both directions with the atools heuristics on argmax links; soft prod / mean with every decision.
Word-level data only (no subword mapping). Tune thresholds on a dev subset, report on test.
``scripts/align_variants.py`` is this module's command line.
"""
import argparse
import json


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fwd", required=True)
    ap.add_argument("--rev", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--subset", default="valid")
    ap.add_argument("--gold", required=True, help="Pharaoh gold of the subset (source-target)")
    ap.add_argument("--methods", default="posterior,alignment")
    ap.add_argument("--thresholds", default="0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)

    import torch

    from alignment import extract as ex
    from alignment.aer import corpus_scores
    from alignment.io import read_pharaoh

    torch.set_num_threads(args.threads)
    ex.setup_logging()
    methods = args.methods.split(",")
    thresholds = [float(t) for t in args.thresholds.split(",")]
    mats = {}
    for side, ck in (("fwd", args.fwd), ("rev", args.rev)):
        model, task = ex.load_model(ck, args.data, cpu=True)
        mats[side] = {it.id: it for it in ex.extract_matrices(model, task, args.subset, None, methods,
                                                              progress=True)}
    n = len(mats["fwd"])
    gold = read_pharaoh(args.gold)
    assert len(gold) == n, f"{args.gold} has {len(gold)} lines, the subset {n} sentences"

    def score(opts, direction="fwd", method="posterior"):
        hyp = []
        for k in range(n):
            f, r = mats["fwd"][k], mats["rev"][k]
            so, to = list(range(len(f.src_tokens) - 1)), list(range(len(f.tgt_tokens) - 1))
            if direction == "fwd":
                links = ex.sentence_word_links(f.matrices[method], so, to, opts)
            elif direction == "rev":  # the reverse model alone, written source-target
                links = [(i, j) for j, i in ex.sentence_word_links(r.matrices[method], to, so, opts)]
            else:
                links = ex.sentence_word_links(f.matrices[method], so, to, opts, r.matrices[method])
            hyp.append(links)
        s = corpus_scores(gold, hyp)
        return {k: round(100 * s[k], 2) for k in ("AER", "P", "R")}

    decisions = [("argmax", 0.0), ("mutual", 0.0), ("union", 0.0)] + [("threshold", t) for t in thresholds]
    rows = []

    def add(method, direction, sym, decision, t):
        opts = ex.LinkOptions(decision, t, False, sym)
        r = score(opts, direction, method)
        name = decision + (f":{t:g}" if decision == "threshold" else "")
        rows.append({"method": method, "direction": direction, "symmetrize": sym or "-", "links": name, **r})
        print(f"{method:10s} {direction:4s} {sym or '-':20s} {name:14s} AER={r['AER']:6.2f} P={r['P']:6.2f} "
              f"R={r['R']:6.2f}", flush=True)

    for method in methods:
        for direction in ("fwd", "rev"):
            for d, t in decisions:
                add(method, direction, None, d, t)
        for sym in ("intersect", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and"):
            add(method, "both", sym, "argmax", 0.0)
        for sym in ("prod", "mean"):
            for d, t in decisions:
                add(method, "both", sym, d, t)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)

