"""AER of every link variant of ``hmm-nmt-align`` for one pair of checkpoints, from one matrix extraction.

    python scripts/align_variants.py --fwd FWD.pt --rev REV.pt --data DATA-BIN --subset valid \
        --gold valid.align [--methods posterior,alignment] [--thresholds 0.1,0.2,...] [--json OUT]
    python scripts/align_variants.py --fwd FWD.pt --rev REV.pt --data DATA-BIN \
        --src-text trial.en --tgt-text trial.fr --bpe-codes CODES --gold trial.gold --gold-one-based \
        [--choose CHOSEN.json]        # on the dev pairs; then on the test pairs: [--rows CHOSEN.json]

The matrices of each model are computed once (``hmm_nmt_align.extract.extract_matrices``, or for raw text the
in-memory encoding of ``hmm-nmt-align --src-text/--tgt-text``) and every variant is read off them with the
same function ``hmm-nmt-align`` uses (``sentence_word_links``), so a row's links are exactly what
``hmm-nmt-align --method M --links D [--rev-path REV --symmetrize S]`` writes.
Variants: one direction (fwd, and rev written source-target) with argmax / mutual / union / threshold:T;
both directions with the atools heuristics on argmax links; soft prod / mean with every decision; each of
them with both ``--pool`` values (``pieces``: decide on the pieces, then map to words; ``words``: pool the
matrices to words first), the row's ``pool`` field.
The binarized input is word-level only (no subword mapping: the two pools give the same links); the raw-text
input maps pieces to words as ``hmm-nmt-align`` does. Tune thresholds on a dev subset, report on test: ``--choose FILE`` writes, per
method, the dev-best row of each family (one direction, atools heuristic, soft merge; over both pools) and
the overall best; ``--rows FILE`` scores only the rows listed there (e.g. on the test pairs; a row without
``pool``, from an older file, is ``pieces``). Printed lines: method, direction, symmetrize, links, AER=, P=,
R=, pool=, then the choice in parentheses when ``--rows`` gave one.
``scripts/align_variants.py`` is this module's command line.
"""
import argparse
import json
import sys
import time

from hmm_nmt_align.base.links import parse_decision

FAMILIES = (("one direction", lambda r: r["symmetrize"] == "-"),
            ("atools", lambda r: r["symmetrize"] not in ("-", "prod", "mean")),
            ("soft", lambda r: r["symmetrize"] in ("prod", "mean")))


POOLS = ("pieces", "words")
FIELDS = ("method", "direction", "symmetrize", "links", "pool")


def _pool(r):
    """A row's pool; rows of older files have none and were read off the pieces."""
    return r.get("pool", "pieces")


def _key(r):
    return (r["method"], r["direction"], r["symmetrize"], r["links"], _pool(r))


# the untuned defaults of hmm-nmt-align (on the pieces, its default --pool)
FIXED = (("fwd", "-", "argmax", "pieces"), ("rev", "-", "argmax", "pieces"), ("both", "intersect", "argmax", "pieces"),
         ("both", "grow-diag", "argmax", "pieces"), ("both", "grow-diag-final-and", "argmax", "pieces"))


def choose(rows):
    """Per method: the lowest-AER row of each family and overall (first one on ties; both pools compete),
    labelled, then the untuned rows of ``FIXED`` (labelled ``fixed``)."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        picked = [("best", min(mine, key=lambda r: r["AER"]))]
        for name, ok in FAMILIES:
            fam = [r for r in mine if ok(r)]
            if fam:
                picked.append((name, min(fam, key=lambda r: r["AER"])))
        for label, r in picked:
            out.append({"choice": label, **{k: r[k] for k in FIELDS[:-1]}, "pool": _pool(r), "dev_AER": r["AER"]})
        for r in mine:
            if (r["direction"], r["symmetrize"], r["links"], _pool(r)) in FIXED:
                out.append({"choice": "fixed", **{k: r[k] for k in FIELDS[:-1]}, "pool": _pool(r),
                            "dev_AER": r["AER"]})
    return out


def variants(methods, thresholds, only=None):
    """The rows to score: ``(method, direction, symmetrize or None, decision, T, pool, choice, dev_AER)``.

    ``only`` (the rows of ``--rows``): those rows, a missing ``pool`` read as ``pieces``; otherwise every
    variant of every method, with both pools."""
    if only is not None:
        for r in only:
            d, t = parse_decision(r["links"])
            yield (r["method"], r["direction"], None if r["symmetrize"] == "-" else r["symmetrize"], d, t, _pool(r),
                   r.get("choice"), r.get("dev_AER"))
        return
    decisions = [("argmax", 0.0), ("mutual", 0.0), ("union", 0.0)] + [("threshold", t) for t in thresholds]
    for method in methods:
        for pool in POOLS:
            for direction in ("fwd", "rev"):
                for d, t in decisions:
                    yield method, direction, None, d, t, pool, None, None
            for sym in ("intersect", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and"):
                yield method, "both", sym, "argmax", 0.0, pool, None, None
            for sym in ("prod", "mean"):
                for d, t in decisions:
                    yield method, "both", sym, d, t, pool, None, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fwd", required=True)
    ap.add_argument("--rev", required=True)
    ap.add_argument("--data", help="data-bin (binarized input), or the dictionaries' folder (text input)")
    ap.add_argument("--subset", default="valid")
    ap.add_argument("--src-text", help="word-tokenised source text (instead of a binarized subset)")
    ap.add_argument("--tgt-text", help="word-tokenised target text, line-parallel to --src-text")
    ap.add_argument("--bpe-codes", help="text input: the models' subword-nmt codes")
    ap.add_argument("--spm-model", help="text input: the models' SentencePiece model")
    ap.add_argument("--gold", required=True, help="Pharaoh gold of the subset (source-target)")
    ap.add_argument("--gold-one-based", action="store_true", help="GOLD indices start at 1")
    ap.add_argument("--methods", default="posterior,alignment")
    ap.add_argument("--thresholds", default="0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.7")
    ap.add_argument("--rows", help="JSON list of rows (method, direction, symmetrize, links[, pool]): score only "
                                   "these (no pool: pieces)")
    ap.add_argument("--choose", metavar="FILE", help="write the best row per method and family here (JSON)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    text = args.src_text is not None
    if text != (args.tgt_text is not None):
        ap.error("--src-text and --tgt-text go together")
    if not text and not args.data:
        ap.error("--data is required for a binarized subset")

    import torch

    from hmm_nmt_align import extract as ex
    from hmm_nmt_align.aer import corpus_scores
    from hmm_nmt_align.io import read_pharaoh

    torch.set_num_threads(args.threads)
    ex.setup_logging()
    only = None
    if args.rows:
        with open(args.rows) as f:
            only = json.load(f)
        methods = list(dict.fromkeys(r["method"] for r in only))
    else:
        methods = args.methods.split(",")
    thresholds = [float(t) for t in args.thresholds.split(",")]
    mats, owners = {}, {}
    t0 = time.time()
    if text:
        from hmm_nmt.aligner.matrices import dataset_matrices, parse_layers
        from hmm_nmt.aligner.pairs import encode_pair, pair_dataset, too_long
        from hmm_nmt_align.base.segment import load_segmenter

        src_lines, tgt_lines = ex.read_text_pair(args.src_text, args.tgt_text)
        seg = load_segmenter(args.bpe_codes, args.spm_model)
        n = len(src_lines)
        keep = None
        for side, ck in (("fwd", args.fwd), ("rev", args.rev)):
            model, task = ex.load_model(ck, args.data, cpu=True)
            a, b = (src_lines, tgt_lines) if side == "fwd" else (tgt_lines, src_lines)
            pairs = [encode_pair(s, t, seg, task.source_dictionary, task.target_dictionary) for s, t in zip(a, b)]
            bad = too_long(model, pairs)
            if keep is None:
                keep = [k for k in range(n) if k not in bad and src_lines[k] and tgt_lines[k]]
            else:
                keep = [k for k in keep if k not in bad]
            layers = parse_layers(None, model) if "attention" in methods else None
            mats[side] = {it.id: it for it in dataset_matrices(model, pair_dataset(pairs, task), task.source_dictionary,
                                                                task.target_dictionary, keep, methods, layers,
                                                                progress=True, desc=side)}
            owners[side] = [(p.src_owner, p.tgt_owner) for p in pairs]
    else:
        for side, ck in (("fwd", args.fwd), ("rev", args.rev)):
            model, task = ex.load_model(ck, args.data, cpu=True)
            mats[side] = {it.id: it for it in ex.extract_matrices(model, task, args.subset, None, methods,
                                                                  progress=True)}
        n = len(mats["fwd"])
        keep = list(range(n))
        for side in ("fwd", "rev"):
            owners[side] = {k: (list(range(len(it.src_tokens) - 1)), list(range(len(it.tgt_tokens) - 1)))
                            for k, it in mats[side].items()}
    seconds = time.time() - t0
    print(f"# matrices of {len(keep)} sentence pairs, both directions, {','.join(methods)}: {seconds:.1f} s "
          f"({len(keep) / max(seconds, 1e-9):.1f} sentences/s, model loading included)", flush=True)
    gold = read_pharaoh(args.gold, one_based=args.gold_one_based)
    assert len(gold) == n, f"{args.gold} has {len(gold)} lines, the input {n} sentences"
    kept = set(keep)

    def score(opts, direction="fwd", method="posterior"):
        hyp = []
        for k in range(n):
            if k not in kept:
                hyp.append([])
                continue
            f, r = mats["fwd"][k], mats["rev"][k]
            so, to = owners["fwd"][k]
            if direction == "fwd":
                links = ex.sentence_word_links(f.matrices[method], so, to, opts)
            elif direction == "rev":  # the reverse model alone, written source-target
                links = [(i, j) for j, i in ex.sentence_word_links(r.matrices[method], to, so, opts)]
            else:
                links = ex.sentence_word_links(f.matrices[method], so, to, opts, r.matrices[method])
            hyp.append(links)
        s = corpus_scores(gold, hyp)
        return {k: round(100 * s[k], 2) for k in ("AER", "P", "R")}

    rows = []

    def add(method, direction, sym, decision, t, pool, choice=None, dev_aer=None):
        opts = ex.LinkOptions(decision, t, False, sym, pool)
        r = score(opts, direction, method)
        name = decision + (f":{t:g}" if decision == "threshold" else "")
        row = {"method": method, "direction": direction, "symmetrize": sym or "-", "links": name, "pool": pool, **r}
        if choice:
            row["choice"] = choice
        if dev_aer is not None:
            row["dev_AER"] = dev_aer
        rows.append(row)
        print(f"{method:10s} {direction:4s} {sym or '-':20s} {name:14s} AER={r['AER']:6.2f} P={r['P']:6.2f} "
              f"R={r['R']:6.2f} pool={pool}" + (f"  ({choice})" if choice else ""), flush=True)

    for v in variants(methods, thresholds, only):
        add(*v)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.choose:
        with open(args.choose, "w") as f:
            json.dump(choose(rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
