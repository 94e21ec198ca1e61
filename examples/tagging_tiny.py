#!/usr/bin/env python3
"""Tiny generated data sets for the tagging recipes' default run (tests): same formats as the shared data.

    python examples/tagging_tiny.py conll2003 DIR   # DIR/eng.{train,testa,testb}: word POS chunk NER, IOB1, -DOCSTART-
    python examples/tagging_tiny.py ud DIR          # DIR/en_ewt-ud-{train,dev,test}.conllu (multiword tokens, empty nodes)
    python examples/tagging_tiny.py conll2000 DIR   # DIR/{train,test}.txt: word POS chunk (IOB2)

A seeded template grammar, a few hundred sentences: enough for a tagger to learn something in seconds,
never the real data (which must not be copied into the repository).
"""
import os
import random
import sys

PER = ["John", "Mary", "Peter", "Anna", "Blackburn", "Smith", "Jones"]
LOC = ["Paris", "London", "Germany", "Texas", "Bonn"]
ORG = ["EU", "Reuters", "Siemens", "UN", "Apple"]
MISC = ["German", "British", "French", "Olympic"]
VERBS = ["said", "visited", "left", "joined", "met"]
NOUNS = ["talks", "plan", "team", "market", "deal"]


def ner_sentence(rng):
    """(words, POS, chunk IOB1, NER IOB1) of one sentence."""
    toks = []

    def ent(kind, names, n):
        for k in range(n):
            toks.append((rng.choice(names), "NNP", "I-NP", "I-" + kind))

    kind = rng.choice(["PER", "LOC", "ORG"])
    ent(kind, {"PER": PER, "LOC": LOC, "ORG": ORG}[kind], rng.randint(1, 2))
    toks.append((rng.choice(VERBS), "VBD", "I-VP", "O"))
    if rng.random() < 0.5:
        toks.append(("the", "DT", "I-NP", "O"))
        toks.append((rng.choice(MISC), "JJ", "I-NP", "I-MISC"))
        toks.append((rng.choice(NOUNS), "NN", "I-NP", "O"))
    else:
        toks.append(("in", "IN", "I-PP", "O"))
        ent("LOC", LOC, 1)
        if rng.random() < 0.3:  # two adjacent LOC entities: IOB1 marks the second with B-
            toks.append((rng.choice(LOC), "NNP", "I-NP", "B-LOC"))
    toks.append((".", ".", "O", "O"))
    return toks


def write_conll2003(path, n, rng):
    with open(path, "w", encoding="utf-8") as f:
        for k in range(n):
            if k % 10 == 0:
                f.write("-DOCSTART- -X- -X- O\n\n")
            for w, p, c, e in ner_sentence(rng):
                f.write(f"{w} {p} {c} {e}\n")
            f.write("\n")


def write_conll2000(path, n, rng):
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            toks = [("the", "DT", "B-NP"), (rng.choice(NOUNS), "NN", "I-NP"), (rng.choice(VERBS), "VBD", "B-VP")]
            if rng.random() < 0.5:
                toks += [("in", "IN", "B-PP"), (rng.choice(LOC), "NNP", "B-NP")]
            else:
                toks += [("a", "DT", "B-NP"), (rng.choice(NOUNS), "NN", "I-NP")]
            toks.append((".", ".", "O"))
            f.writelines(f"{w} {p} {c}\n" for w, p, c in toks)
            f.write("\n")


def write_conllu(path, n, rng):
    with open(path, "w", encoding="utf-8") as f:
        for k in range(n):
            f.write(f"# sent_id = s{k}\n")
            rows = [("I", "PRON", "PRP")]
            multi = rng.random() < 0.4
            if multi:  # "don't" = do + n't: a multiword token line then its two words
                rows += [("do", "AUX", "VBP"), ("n't", "PART", "RB")]
            rows += [(rng.choice(["like", "see", "want"]), "VERB", "VBP"), ("the", "DET", "DT"),
                     (rng.choice(NOUNS), "NOUN", "NN"), (".", "PUNCT", ".")]
            for i, (w, u, x) in enumerate(rows, start=1):
                if multi and i == 2:
                    f.write("2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n")
                f.write(f"{i}\t{w}\t{w.lower()}\t{u}\t{x}\t_\t0\tdep\t_\t_\n")
                if i == 1 and rng.random() < 0.2:
                    f.write("1.1\tgone\tgo\tVERB\tVBN\t_\t_\t_\t0:root\t_\n")  # an empty node
            f.write("\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("conll2003", "ud", "conll2000"):
        sys.exit(__doc__)
    kind, out = argv
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    if kind == "conll2003":
        for name, n in (("eng.train", 300), ("eng.testa", 60), ("eng.testb", 60)):
            write_conll2003(os.path.join(out, name), n, rng)
    elif kind == "ud":
        for name, n in (("train", 300), ("dev", 60), ("test", 60)):
            write_conllu(os.path.join(out, f"en_ewt-ud-{name}.conllu"), n, rng)
    else:
        for name, n in (("train.txt", 300), ("test.txt", 60)):
            write_conll2000(os.path.join(out, name), n, rng)


if __name__ == "__main__":
    main()
