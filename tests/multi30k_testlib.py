"""A generated German-English caption corpus in the layout of ../shared/data/multi30k (the official data/task1
files, flat): ``{train,val,test_2016_flickr}.{de,en}.gz`` raw and cased, ``*.lc.norm.tok.{de,en}.gz`` lowercased
with punctuation split off, line N of one language the translation of line N of the other. The recipe tests run
on it on every clone, and on the real corpus where ../shared is present.

The captions come from a seeded template grammar with the real corpus's features a recipe meets: cased words,
umlauts and ß, a comma and a final full stop, a German word order that differs from the English. The first
training pair is the real corpus's first (the tests check the tokenisation of that line).
"""
import gzip
import os
import random

FIRST = ("Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
         "Two young, White males are outside near many bushes.")
NUMBERS = [("Zwei", "Two"), ("Drei", "Three"), ("Mehrere", "Several"), ("Viele", "Many")]
ADJECTIVES = [("junge", "young"), ("alte", "old"), ("kleine", "little"), ("große", "tall"), ("fröhliche", "happy")]
SUBJECTS = [("Männer", "men"), ("Frauen", "women"), ("Mädchen", "girls"), ("Jungen", "boys"), ("Hunde", "dogs"),
            ("Arbeiter", "workers")]
VERBS = [("spielen", "are playing"), ("laufen", "are running"), ("warten", "are waiting"), ("sitzen", "are sitting"),
         ("essen", "are eating")]
PLACES = [("auf der Straße", "on the street"), ("im Park", "in the park"), ("am Strand", "on the beach"),
          ("vor einem Geschäft", "in front of a shop"), ("neben großen Büschen", "near large bushes"),
          ("im Schnee", "in the snow")]
EXTRAS = [("während es regnet", "while it rains"), ("und lachen", "and laugh"), ("mit einem Ball", "with a ball")]
SPLITS = {"train": 300, "val": 40, "test_2016_flickr": 40}


def caption(rng):
    """(German, English) raw captions of one generated pair."""
    (nd, ne), (ad, ae), (sd, se), (vd, ve), (pd, pe) = (rng.choice(x) for x in (NUMBERS, ADJECTIVES, SUBJECTS,
                                                                                 VERBS, PLACES))
    de, en = f"{nd} {ad} {sd} {vd} {pd}", f"{ne} {ae} {se} {ve} {pe}"
    if rng.random() < 0.4:
        xd, xe = rng.choice(EXTRAS)
        de, en = f"{de}, {xd}", f"{en}, {xe}"
    return de + ".", en + "."


def tokenized(text):
    """The lc.norm.tok form: lower case, comma and full stop split off (what the official files hold)."""
    return text.lower().replace(",", " ,").replace(".", " .")


def write_multi30k_like(folder, seed=0, sizes=SPLITS):
    """Write the generated corpus to ``folder`` (created); return ``folder``."""
    os.makedirs(folder, exist_ok=True)
    for split, n in sizes.items():
        rng = random.Random(f"multi30k-like/{seed}/{split}")
        pairs = [caption(rng) for _ in range(n)]
        if split == "train":
            pairs[0] = FIRST
        for k, lang in enumerate(("de", "en")):
            raw = [p[k] for p in pairs]
            for name, lines in ((f"{split}.{lang}.gz", raw), (f"{split}.lc.norm.tok.{lang}.gz",
                                                               [tokenized(x) for x in raw])):
                with gzip.open(os.path.join(folder, name), "wt", encoding="utf-8") as f:
                    f.write("\n".join(lines) + "\n")
    return folder
