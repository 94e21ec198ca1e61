#!/usr/bin/env python
"""Language-model text prepared like Mikolov's Penn Treebank LM data, from the WSJ text of CoNLL-2000
(sections 15-18, the default) or from the English side of Multi30k (``--multi30k DIR``).

Sources:

* ``--conll FILE``: the first column of the CoNLL file, one sentence per line. Splits are contiguous
  (articles stay together): the first sentences for train, then dev, then test (``--dev-fraction`` /
  ``--test-fraction``).
* ``--multi30k DIR``: the official lowercased, normalised, Moses-tokenised English files
  ``{train,val,test_2016_flickr}.lc.norm.tok.en`` (plain or .gz, in DIR or DIR/tok, the layout of the
  official data/task1), whose splits are kept (val -> valid, test_2016_flickr -> test). Moses' XML
  escapes (``&apos;s``, ``&quot;``, ``&amp;``) are undone first, so the clitics and symbols are the PTB's.

Both then get the PTB-LM conventions: lower-case, numbers -> ``N``, punctuation tokens removed (Mikolov's
PTB keeps no , . `` '' " ( ) [ ] : ; -- ? ! but keeps $ % & # and the clitics 's n't), at most ``--vocab``
types including ``<unk>`` (the most frequent in the training split), rarer words -> ``<unk>``; sentences
left empty are dropped.
Optionally (``--brown-clusters M``) Brown clusters of the training text with the ``brown-clustering``
package (words seen at least ``--brown-min-count`` times; rarer ones then join their likeliest cluster), written as ``word cluster`` lines for ``--brown-clusters`` of ``--arch hmm_lm``.

Writes ``OUT/{train,valid,test}.txt`` and ``OUT/brown{M}.txt``; prints the statistics. Before it reads or writes
anything it checks its input files and, for ``--brown-clusters``, the ``brown-clustering`` package (the ``[lm]``
extra); ``--check`` does only that. A missing one: one line naming the file and its option, or the ``pip install``
to run, exit 2, nothing written.

Where the default input comes from: CoNLL-2000's ``train.txt`` (WSJ sections 15-18) is NLTK's ``conll2000``
corpus (``python -m nltk.downloader conll2000``, then ``--conll ~/nltk_data/corpora/conll2000/train.txt``) or
the shared task's ``train.txt.gz`` (https://www.clips.uantwerpen.be/conll2000/chunking/).
"""
import argparse
import gzip
import html
import os
import re
import sys
from collections import Counter

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "alignment")]  # this checkout's packages
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402  (standard library only)

PUNCT = {",", ".", "``", "''", "`", "'", "(", ")", "-LRB-", "-RRB-", "-LCB-", "-RCB-", "{", "}", ":", ";", "--",
         "?", "!", "...", "-", '"', "[", "]", "-LSB-", "-RSB-"}
NUMBER = re.compile(r"^[+-]?(\d+([.,\\/:-]\d+)*|\.\d+)(s|th|st|nd|rd)?$")


def read_sentences(path):
    opener = gzip.open if path.endswith(".gz") else open
    sents, cur = [], []
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                if cur:
                    sents.append(cur)
                cur = []
                continue
            if len(parts) < 2:
                raise ValueError(f"{path}:{lineno}: expected 'word POS ...' columns, got {line.rstrip()!r}")
            cur.append(parts[0])
    if cur:
        sents.append(cur)
    if not sents:
        raise ValueError(f"{path}: no sentences")
    return sents


MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def multi30k_file(directory, split, lang="en"):
    """Path of the official ``<split>.lc.norm.tok.<lang>`` file (plain or .gz, in DIR/tok or DIR)."""
    name = f"{MULTI30K_SPLITS[split]}.lc.norm.tok.{lang}"
    tried = []
    for d in (os.path.join(directory, "tok"), directory):
        for f in (os.path.join(d, name), os.path.join(d, name + ".gz")):
            if os.path.isfile(f):
                return f
            tried.append(f)
    raise FileNotFoundError(f"--multi30k {directory}: no {split} file (looked for {', '.join(tried)})")


def read_tokenized(path):
    """One whitespace-tokenised sentence per line; Moses' XML escapes undone (``&apos;s`` -> ``'s``)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        sents = [[html.unescape(w) for w in line.split()] for line in f]
    if not any(sents):
        raise ValueError(f"{path}: no sentences")
    return sents


def ptb_normalize(words):
    out = []
    for w in words:
        if w in PUNCT:
            continue
        w = w.lower()
        out.append("N" if NUMBER.match(w) else w)
    return out


def brown_clusters(sentences, m, min_count):
    """Brown clusters of the words seen at least ``min_count`` times (the package's merges get slower as
    clusters grow: all 10k types take about an hour on one core), then every rarer word joins the cluster
    that maximises its likelihood under the class-bigram model of the clustered words (add-one smoothed):
    sum over its occurrences of log p(c | class of the left word) + log p(w | c) + log p(class of the right
    word | c), with p(w | c) = n(w) / n(c) (the clusters' token counts)."""
    import numpy as np
    from brown_clustering import BigramCorpus, BrownClustering

    sents = [s + ["</s>"] for s in sentences]
    corpus = BigramCorpus(sents, alpha=0.5, start_symbol="<brown_start>", end_symbol="<brown_end>",
                          min_count=min_count)
    clusters = BrownClustering(corpus, m).train()
    cluster_of = {w: c for c, words in enumerate(clusters) for w in words}
    m = len(clusters)
    counts = np.ones((m, m))
    for s in sents:
        for a, b in zip(s, s[1:]):
            if a in cluster_of and b in cluster_of:
                counts[cluster_of[a], cluster_of[b]] += 1
    log_next = np.log(counts / counts.sum(1, keepdims=True))  # log p(c' | c)
    size = np.ones(m)  # tokens of every cluster: log p(w | c) = log n(w) - log n(c) penalises big clusters
    for s in sents:
        for w in s:
            if w in cluster_of:
                size[cluster_of[w]] += 1
    scores = {}
    for s in sents:
        for i, w in enumerate(s):
            if w in cluster_of:
                continue
            sc = scores.setdefault(w, np.zeros(m))
            sc -= np.log(size)
            if i > 0 and s[i - 1] in cluster_of:
                sc += log_next[cluster_of[s[i - 1]]]
            if i + 1 < len(s) and s[i + 1] in cluster_of:
                sc += log_next[:, cluster_of[s[i + 1]]]
    for w, sc in scores.items():
        cluster_of[w] = int(sc.argmax())
    return cluster_of


PROG = "wsj_lm/prepare.py"
LM_EXTRA = "pip install '.[lm]' (in a checkout: pip install -e '.[lm]')"


def fail(message):
    """One line on stderr, exit 2: bad input, nothing written."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def check(args):
    """The inputs and the extras a run needs, before anything is read or written."""
    if args.brown_clusters:
        try:
            import brown_clustering  # noqa: F401
        except ImportError:
            fail(f"--brown-clusters needs the brown-clustering package (the [lm] extra): {LM_EXTRA}")
    if args.multi30k:
        for name in MULTI30K_SPLITS:
            try:
                multi30k_file(args.multi30k, name)
            except FileNotFoundError as e:
                fail(e)
    elif not os.path.isfile(args.conll):
        fail(f"--conll {args.conll}: no such file (CoNLL-2000's train.txt: python -m nltk.downloader conll2000, "
             f"then --conll ~/nltk_data/corpora/conll2000/train.txt)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--conll", default=os.path.relpath(os.path.join(_ROOT, "..", "shared", "data", "conll2000",
                                                                     "train.txt.gz")),
                     help="CoNLL file whose first column is the WSJ text (default: CoNLL-2000's train.txt.gz in "
                          "../shared/data/conll2000 beside the checkout)")
    src.add_argument("--multi30k", metavar="DIR", help="Multi30k task 1 directory: its English side, official splits")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab", type=int, default=10000, help="types kept, <unk> included")
    ap.add_argument("--dev-fraction", type=float, default=0.1)
    ap.add_argument("--test-fraction", type=float, default=0.1)
    ap.add_argument("--brown-clusters", type=int, nargs="*", default=[], help="cluster counts M to compute")
    ap.add_argument("--brown-min-count", type=int, default=8,
                    help="words seen this often are Brown-clustered, rarer ones assigned to a cluster after")
    ap.add_argument("--check", action="store_true", help="check the inputs and the extras, then stop")
    args = ap.parse_args(argv)
    check(args)
    if args.check:
        return
    try:
        if args.multi30k:
            splits = {name: [s for s in (ptb_normalize(x) for x in read_tokenized(multi30k_file(args.multi30k, name)))
                             if s] for name in MULTI30K_SPLITS}
        else:
            sents = [s for s in (ptb_normalize(x) for x in read_sentences(args.conll)) if s]
    except (OSError, EOFError, ValueError) as e:  # unreadable, a truncated .gz, not UTF-8, malformed lines
        fail(e)
    if not args.multi30k:
        n = len(sents)
        n_test, n_dev = int(round(n * args.test_fraction)), int(round(n * args.dev_fraction))
        splits = {"train": sents[: n - n_dev - n_test], "valid": sents[n - n_dev - n_test: n - n_test],
                  "test": sents[n - n_test:]}
    counts = Counter(w for s in splits["train"] for w in s)
    keep = {w for w, _ in counts.most_common(args.vocab - 1)}
    os.makedirs(args.out, exist_ok=True)
    for name, ss in splits.items():
        ss = [[w if w in keep else "<unk>" for w in s] for s in ss]
        splits[name] = ss
        atomic_write(os.path.join(args.out, f"{name}.txt"), "".join(" ".join(s) + "\n" for s in ss))
        unk = sum(w == "<unk>" for s in ss for w in s)
        tokens = sum(len(s) for s in ss)
        print(f"{name}: {len(ss)} sentences, {tokens} tokens (+{len(ss)} </s>), {unk / max(tokens, 1):.2%} <unk>")
    print(f"vocabulary: {len(keep) + 1} types with <unk> (of {len(counts)} in train)")
    for m in args.brown_clusters:
        clusters = brown_clusters(splits["train"], m, args.brown_min_count)
        path = os.path.join(args.out, f"brown{m}.txt")
        atomic_write(path, "".join(f"{w} {c}\n" for w, c in sorted(clusters.items(), key=lambda x: (x[1], x[0]))))
        sizes = Counter(clusters.values())
        print(f"{path}: {len(clusters)} words in {len(sizes)} Brown clusters (largest {max(sizes.values())})")


if __name__ == "__main__":
    main()
