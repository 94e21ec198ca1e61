#!/usr/bin/env python3
"""Deterministic synthetic language pair with gold word alignments (the embedded default corpus).

The "source" language is a tiny noun-phrase / verb-phrase grammar; the "target" language translates
it word by word through a fixed bilingual lexicon, where

* most source words have one translation (one-to-one) and some have two target words (one-to-many),
* noun phrases are reordered locally (source ``det noun adj*``  ->  target ``det adj* noun``),
* an adverb moves from after the verb (source) to before it (target),

and sentences have 1-3 clauses, so lengths vary from 3 to about 25 tokens.  Because every target
word is produced by exactly one source word, the generator knows the gold alignment and writes it
in Pharaoh format (``i-j``, 0-based source index i, target index j), all links sure.

Output: ``OUT/{train,valid,test}.{src,tgt,align}``, one sentence per line, tokens separated by one
space.  The same ``--seed`` always gives byte-identical files.

    python examples/toy/generate.py --out data/toy --train 5000 --valid 300 --test 300
"""
import argparse
import os
import random
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "alignment")]  # this checkout's packages
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402  (standard library only)

SRC_SYLLABLES = ["ka", "ro", "mi", "tsu", "ne", "zo", "ha", "ki", "mu", "te", "sa", "lo"]
TGT_SYLLABLES = ["bel", "dar", "fin", "gor", "hul", "jin", "kap", "lem", "mor", "nix", "pel", "quo", "rat", "sil"]

# category: (number of source words, probability that a word translates into two target words)
CATEGORIES = {"det": (4, 0.0), "noun": (40, 0.15), "adj": (20, 0.1), "verb": (30, 0.2), "adv": (8, 0.0),
              "prep": (6, 0.3), "conj": (2, 0.0)}


def _words(rng, syllables, n, used, min_syl=1, max_syl=3):
    out = []
    while len(out) < n:
        w = "".join(rng.choice(syllables) for _ in range(rng.randint(min_syl, max_syl)))
        if w not in used:
            used.add(w)
            out.append(w)
    return out


def build_lexicon(seed):
    """Source vocabulary by category and a lexicon source word -> list of target words."""
    rng = random.Random(seed)
    src_used, tgt_used = set(), set()
    vocab, lexicon = {}, {}
    for cat, (n, p_two) in CATEGORIES.items():
        words = _words(rng, SRC_SYLLABLES, n, src_used)
        vocab[cat] = words
        for w in words:
            k = 2 if rng.random() < p_two else 1
            lexicon[w] = _words(rng, TGT_SYLLABLES, k, tgt_used, 1, 2)
    return vocab, lexicon


def noun_phrase(rng, vocab):
    """Source order det noun adj*; returns (source words, target order as indices into them)."""
    n_adj = rng.choice([0, 0, 1, 1, 2])
    words = [rng.choice(vocab["det"]), rng.choice(vocab["noun"])] + [rng.choice(vocab["adj"]) for _ in range(n_adj)]
    order = [0] + list(range(2, 2 + n_adj)) + [1]  # target: det adj* noun
    return words, order


def clause(rng, vocab):
    src, order = noun_phrase(rng, vocab)
    verb_at = len(src)
    src.append(rng.choice(vocab["verb"]))
    if rng.random() < 0.4:  # source: verb adv  ->  target: adv verb
        src.append(rng.choice(vocab["adv"]))
        order += [verb_at + 1, verb_at]
    else:
        order.append(verb_at)
    if rng.random() < 0.5:
        prep_at = len(src)
        src.append(rng.choice(vocab["prep"]))
        np_words, np_order = noun_phrase(rng, vocab)
        src += np_words
        order += [prep_at] + [prep_at + 1 + k for k in np_order]
    return src, order


def sentence(rng, vocab, lexicon):
    src, order = clause(rng, vocab)
    for _ in range(rng.choice([0, 0, 1, 2])):
        conj_at = len(src)
        src.append(rng.choice(vocab["conj"]))
        words, sub_order = clause(rng, vocab)
        src += words
        order += [conj_at] + [conj_at + 1 + k for k in sub_order]
    tgt, links = [], []
    for i in order:
        for t in lexicon[src[i]]:
            links.append((i, len(tgt)))
            tgt.append(t)
    return src, tgt, sorted(links)


def write_split(path_prefix, pairs):
    # write to temporary names, then rename: no half-written corpus after an interruption
    for ext, fmt in (("src", lambda p: " ".join(p[0])), ("tgt", lambda p: " ".join(p[1])),
                     ("align", lambda p: " ".join(f"{i}-{j}" for i, j in p[2]))):
        atomic_write(f"{path_prefix}.{ext}", "".join(fmt(p) + "\n" for p in pairs))


def generate(out, seed=1, sizes=(("train", 5000), ("valid", 300), ("test", 300))):
    vocab, lexicon = build_lexicon(seed)
    rng = random.Random(seed + 1)
    os.makedirs(out, exist_ok=True)
    for split, n in sizes:
        write_split(os.path.join(out, split), [sentence(rng, vocab, lexicon) for _ in range(n)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=5000, help="training sentence pairs")
    ap.add_argument("--valid", type=int, default=300)
    ap.add_argument("--test", type=int, default=300)
    args = ap.parse_args(argv)
    for name in ("train", "valid", "test"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name} must be positive")
    generate(args.out, args.seed, (("train", args.train), ("valid", args.valid), ("test", args.test)))
    print(f"wrote {args.train}/{args.valid}/{args.test} sentence pairs with gold alignments to {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
