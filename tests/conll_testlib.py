"""CoNLL-2000-format data for the tagging tests: a generated corpus (the default, on every clone) or the real
CoNLL-2000 training file in ../shared/data/conll2000 (tests whose assertions are about the real corpus).

The generated corpus has CoNLL-2000's layout (``word POS chunk``, IOB2 chunk tags, a blank line after each
sentence) and what its tests need of the real one: words whose tag depends on their neighbours (``cut`` is a
noun after a determiner, a verb after a subject or ``to``; ``that`` a determiner or a subordinator), so a
tagger that reads context beats the per-word majority tag; noun phrases that start with a determiner, an
adjective or the noun itself (``B-NP``/``I-NP`` depend on position); ``Confidence`` and ``the`` in the
vocabulary. Sentence k is drawn from its own seeded generator, so ``skip`` and ``n_sentences`` select the
same sentences in every run, and a shorter sample is a prefix of a longer one.
"""
import gzip
import os
import random

from conftest import SHARED_DATA

CONLL2000 = os.path.join(SHARED_DATA, "conll2000", "train.txt.gz")

DT = ["the", "a", "another", "this", "that"]
JJ = ["sharp", "substantial", "new", "big", "foreign", "near-record", "strong", "weak"]
NN = ["pound", "dive", "improvement", "market", "rate", "price", "cut", "rise", "deal", "trade", "report", "plan",
      "release", "deficit", "dollar"]
NNS = ["figures", "deficits", "rates", "prices", "cuts", "shares", "trades", "reports", "plans", "stocks"]
NNP = ["September", "July", "August", "Britain", "Lawson", "Friday", "Congress"]
PRP = ["it", "they", "he"]
SUBJ_HEAD = ["Confidence", "Inflation", "Demand", "Trade", "Growth"]  # sentence-initial bare nouns
VB = ["take", "cut", "rise", "trade", "report", "plan", "show", "buy", "sell", "fall"]
VBD = ["said", "rose", "fell", "cut", "reported", "traded", "planned", "showed"]
VBZ = ["is", "rises", "plans", "cuts", "reports", "trades", "shows", "falls"]
VBN = ["expected", "reported", "planned", "traded"]
MD = ["will", "could", "may", "can"]
RB = ["widely", "also", "still", "sharply"]
IN = ["in", "for", "from", "of", "on", "at"]
CD = ["1.5", "two", "10", "3"]
# rare open-class words (a few thousand stems): many of a test split's are unseen in training, as in real text
SYLLABLES = ["ba", "ko", "ri", "mun", "tel", "sa", "vor", "pi", "den", "lu", "gra", "fe", "zo", "nik"]


def _stem(rng):
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 2, 3])))


def _word(rng, common, pos):
    """A common word of ``pos`` or, one time in four, a rare one (a stem with the suffix of its class)."""
    if rng.random() >= 0.25:
        return rng.choice(common)
    stem = _stem(rng)
    return stem + {"NN": "tion", "NNS": "ments", "JJ": "ous", "VB": "ize", "VBD": "ized", "VBZ": "izes",
                   "VBN": "ized"}[pos]


def _noun_phrase(rng, first=False):
    """(word, POS) pairs of one noun phrase."""
    r = rng.random()
    if first and r < 0.3:
        return [(rng.choice(SUBJ_HEAD), "NN")]
    if r < 0.15:
        return [(rng.choice(PRP), "PRP")]
    if r < 0.3:
        return [(w, "NNP") for w in rng.sample(NNP, rng.choice([1, 1, 2]))]
    if r < 0.4:
        return [(rng.choice(CD), "CD"), (_word(rng, NNS, "NNS"), "NNS")]
    words = [(rng.choice(DT), "DT")] if rng.random() < 0.6 else []
    words += [(_word(rng, JJ, "JJ"), "JJ") for _ in range(rng.choice([0, 0, 1, 1, 2]))]
    head = "NN" if rng.random() < 0.65 else "NNS"
    words.append((_word(rng, NN if head == "NN" else NNS, head), head))
    return words


def _verb_group(rng):
    """(word, POS) pairs of one verb group."""
    r = rng.random()
    if r < 0.25:
        return [(rng.choice(MD), "MD"), (_word(rng, VB, "VB"), "VB")]
    if r < 0.4:  # "is widely expected to take"
        group = [("is", "VBZ")] + ([(rng.choice(RB), "RB")] if rng.random() < 0.5 else [])
        return group + [(_word(rng, VBN, "VBN"), "VBN"), ("to", "TO"), (_word(rng, VB, "VB"), "VB")]
    if r < 0.7:
        return [(_word(rng, VBD, "VBD"), "VBD")]
    return [(_word(rng, VBZ, "VBZ"), "VBZ")]


def _chunk(pairs, kind):
    return [(w, p, ("B-" if k == 0 else "I-") + kind) for k, (w, p) in enumerate(pairs)]


def _clause(rng, first):
    toks = _chunk(_noun_phrase(rng, first), "NP")
    if rng.random() < 0.3:
        toks += [(rng.choice(IN), "IN", "B-PP")] + _chunk(_noun_phrase(rng), "NP")
    toks += _chunk(_verb_group(rng), "VP")
    if rng.random() < 0.8:
        toks += _chunk(_noun_phrase(rng), "NP")
    while rng.random() < 0.35:
        toks += [(rng.choice(IN), "IN", "B-PP")] + _chunk(_noun_phrase(rng), "NP")
    return toks


def sentence(seed, k):
    """The k-th generated sentence: a list of (word, POS, chunk)."""
    rng = random.Random(f"conll2000-like/{seed}/{k}")
    toks = _clause(rng, first=True)
    if rng.random() < 0.3:
        toks += [(",", ",", "O")] if rng.random() < 0.5 else []
        toks += [("that", "IN", "B-SBAR")] + _clause(rng, first=False)
    if rng.random() < 0.2:
        toks += [(rng.choice(RB), "RB", "B-ADVP")]
    toks.append((".", ".", "O"))
    w, p, c = toks[0]
    return [(w[0].upper() + w[1:], p, c)] + toks[1:]


def _generated_lines(n_sentences, skip, seed):
    for k in range(skip, skip + n_sentences):
        yield from (f"{w} {p} {c}\n" for w, p, c in sentence(seed, k))
        yield "\n"


def _real_lines(n_sentences, skip):
    n = 0
    with gzip.open(CONLL2000, "rt", encoding="utf-8") as f:
        for line in f:
            if n >= skip:
                yield line
            if not line.strip():
                n += 1
                if n >= skip + n_sentences:
                    break


def conll_sample(path, n_sentences, skip=0, gz=False, corpus="generated", seed=0):
    """Write sentences ``skip`` .. ``skip + n_sentences`` of the generated corpus (``corpus="generated"``) or of
    CoNLL-2000's training file (``corpus="conll2000"``) to ``path`` (gzip with ``gz``); return ``path``."""
    lines = _generated_lines(n_sentences, skip, seed) if corpus == "generated" else _real_lines(n_sentences, skip)
    with (gzip.open if gz else open)(path, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    return path
