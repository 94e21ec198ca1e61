"""Tag schemes (hmm_nmt.data.tag_schemes): the lecture's conversion table, round trips and span invariance on
every valid sequence of small sizes, validity == the bigram constraints, detection, and seqeval's entity
reading (strict mode per scheme, and its conlleval-compatible default mode where the two must agree)."""
import itertools
import random

import pytest

from hmm_nmt.data import tag_schemes as ts

# sequence-modeling-lecture.txt, "BIO Tagging variants: IO and BIOES"
WORDS = "Jane Villanueva of United Airlines Holding discussed the Chicago route .".split()
IO = "I-PER I-PER O I-ORG I-ORG I-ORG O O I-LOC O O".split()
BIO = "B-PER I-PER O B-ORG I-ORG I-ORG O O B-LOC O O".split()
BIOES = "B-PER E-PER O B-ORG I-ORG E-ORG O O S-LOC O O".split()


def test_the_lectures_table():
    for src, tags in (("io", IO), ("iob2", BIO), ("bioes", BIOES)):
        assert ts.spans(tags, src) == [("PER", 0, 2), ("ORG", 3, 6), ("LOC", 8, 9)]
        assert ts.convert(tags, src, "io")[0] == IO
        assert ts.convert(tags, src, "bio")[0] == BIO
        assert ts.convert(tags, src, "iobes")[0] == BIOES


def test_adjacent_entities_in_every_scheme_and_io_merges_them():
    ents = [("PER", 0, 2), ("PER", 2, 3), ("LOC", 3, 4), ("PER", 5, 6)]
    expected = {
        "iob1": "I-PER I-PER B-PER I-LOC O I-PER",
        "iob2": "B-PER I-PER B-PER B-LOC O B-PER",
        "ioe1": "I-PER E-PER I-PER I-LOC O I-PER",
        "ioe2": "I-PER E-PER E-PER E-LOC O E-PER",
        "bioes": "B-PER E-PER S-PER S-LOC O S-PER",
        "io": "I-PER I-PER I-PER I-LOC O I-PER",
    }
    for scheme, tags in expected.items():
        written, merges = ts.from_spans(ents, 6, scheme)
        assert written == tags.split(), scheme
        assert merges == (1 if scheme == "io" else 0)
        if scheme != "io":
            assert ts.spans(written, scheme) == ents
            assert ts.is_valid(written, scheme)
    assert ts.spans(expected["io"].split(), "io") == [("PER", 0, 3), ("LOC", 3, 4), ("PER", 5, 6)]


def _span_sets(n, types=("A", "B")):
    """Every set of non-overlapping spans over n tokens with the given types."""
    def rec(pos):
        if pos >= n:
            yield []
            return
        yield from rec(pos + 1)  # token pos outside
        for end in range(pos + 1, n + 1):
            for t in types:
                for rest in rec(end):
                    yield [(t, pos, end)] + rest
    return list(rec(0))


@pytest.mark.parametrize("scheme", ["iob1", "iob2", "ioe1", "ioe2", "bioes"])
def test_round_trips_and_span_invariance_exhaustive(scheme):
    for n in range(1, 6):
        for ents in _span_sets(n):
            tags, merges = ts.from_spans(ents, n, scheme)
            assert merges == 0 and ts.spans(tags, scheme) == ents and ts.is_valid(tags, scheme)
            for other in ts.SCHEMES[1:]:
                there, _ = ts.convert(tags, scheme, other)
                assert ts.convert(there, other, scheme)[0] == tags
                assert ts.spans(there, other) == ents


def test_io_round_trip_merges_exactly_the_adjacent_same_type_pairs():
    for ents in _span_sets(5):
        tags, merges = ts.from_spans(ents, 5, "io")
        adjacent = sum(1 for a, b in zip(ents, ents[1:]) if a[2] == b[1] and a[0] == b[0])
        assert merges == adjacent and len(ts.spans(tags, "io")) == len(ents) - adjacent


@pytest.mark.parametrize("scheme", ts.SCHEMES)
def test_valid_is_exactly_the_bigram_constraints(scheme):
    """A sequence is valid (what from_spans writes for its own spans) iff transitions() allows it."""
    prefixes = {"io": "I", "iob1": "IB", "iob2": "IB", "ioe1": "IE", "ioe2": "IE", "bioes": "IBES"}[scheme]
    names = ["O"] + [f"{p}-{t}" for t in "AB" for p in prefixes]
    allowed, start, end = ts.transitions(names, scheme)
    for n in range(1, 5):
        for seq in itertools.product(range(len(names)), repeat=n):
            tags = [names[k] for k in seq]
            lattice_ok = start[seq[0]] and end[seq[-1]] and all(allowed[a][b] for a, b in zip(seq, seq[1:]))
            rewritten = ts.from_spans(ts.spans(tags, scheme), n, scheme)[0]
            assert lattice_ok == (rewritten == tags) == ts.is_valid(tags, scheme), (scheme, tags)


def test_invalid_sequences_are_read_like_conlleval():
    tags = "O I-PER I-PER B-LOC I-ORG O".split()
    assert ts.invalid_positions(tags, "iob2") == [1, 4]
    assert ts.spans(tags, "iob2") == [("PER", 1, 3), ("LOC", 3, 4), ("ORG", 4, 5)]
    assert ts.transitions(["O", "B-X", "<pad>"], "iob2")[1] == [True, True, False]


def test_detection():
    assert ts.detect([BIOES]) == "bioes"
    assert ts.detect([BIO]) == "iob2"
    assert ts.detect(["I-PER I-PER B-PER O".split()]) == "iob1"
    assert ts.detect([IO]) == "iob1"  # an I- only file keeps every span when read as IOB1
    assert ts.detect(["I-PER E-PER I-PER O".split()]) == "ioe1"
    assert ts.detect(["E-PER O I-LOC E-LOC".split()]) == "ioe2"


def test_bad_tags_are_refused():
    with pytest.raises(ts.TagSchemeError, match="token 2"):
        ts.spans(["O", "S-PER"], "iob2")
    with pytest.raises(ts.TagSchemeError, match="not an entity tag"):
        ts.spans(["PER"], "iob2")
    with pytest.raises(ts.TagSchemeError, match="unknown tag scheme"):
        ts.canonical("bilou")


SEQEVAL = {"iob1": "IOB1", "iob2": "IOB2", "ioe1": "IOE1", "ioe2": "IOE2", "bioes": "IOBES"}


def _random_corpus(rng, scheme, n_sent=40):
    gold, pred = [], []
    for _ in range(n_sent):
        n = rng.randint(1, 9)
        ents, pos = [], 0
        while pos < n:
            if rng.random() < 0.4:
                end = min(n, pos + rng.randint(1, 3))
                ents.append((rng.choice("AB"), pos, end))
                pos = end
            else:
                pos += 1
        g = ts.from_spans(ents, n, scheme)[0]
        noisy = [e for e in ents if rng.random() > 0.2] + ([("A", n - 1, n)] if rng.random() < 0.2 and
                                                            all(e[2] < n for e in ents) else [])
        gold.append(g)
        pred.append(ts.from_spans(sorted(noisy, key=lambda e: e[1]), n, scheme)[0])
    return gold, pred


@pytest.mark.parametrize("scheme", list(SEQEVAL))
def test_seqeval_strict_reads_our_spans_and_agrees_with_default_mode_on_valid_sequences(scheme):
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    seqeval_scheme = pytest.importorskip("seqeval.scheme")
    rng = random.Random(scheme)
    gold, pred = _random_corpus(rng, scheme)
    if scheme == "ioe1":
        # seqeval's IOE1 drops a one-token entity tagged E- (one directly followed by an entity of its type),
        # which IOE1 (Tjong Kim Sang & Veenstra 1999) writes exactly so: compare on sentences without one
        def single_e(tags):
            return any(t.startswith("E-") and (k == 0 or tags[k - 1][2:] != t[2:]) for k, t in enumerate(tags))
        kept = [(g, p) for g, p in zip(gold, pred) if not single_e(g) and not single_e(p)]
        assert len(kept) > 20
        gold, pred = [g for g, _ in kept], [p for _, p in kept]
    g_spans = {(k,) + s for k, g in enumerate(gold) for s in ts.spans(g, scheme)}
    p_spans = {(k,) + s for k, p in enumerate(pred) for s in ts.spans(p, scheme)}
    tp = len(g_spans & p_spans)
    f1 = 2 * tp / (len(g_spans) + len(p_spans))
    cls = getattr(seqeval_scheme, SEQEVAL[scheme])
    strict = seqeval_metrics.f1_score(gold, pred, mode="strict", scheme=cls)
    assert strict == pytest.approx(f1, abs=1e-12)
    if scheme in ("iob1", "iob2"):  # conlleval (seqeval's default mode) reads IOB; on valid input they agree
        assert seqeval_metrics.f1_score(gold, pred) == pytest.approx(f1, abs=1e-12)


def test_hand_computed_scores():
    seqeval_metrics = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2

    gold = [BIO]
    pred = ["B-PER I-PER O B-ORG I-ORG O O O B-LOC O O".split()]  # ORG cut short: 2 of 3 right
    assert seqeval_metrics.precision_score(gold, pred, mode="strict", scheme=IOB2) == pytest.approx(2 / 3)
    assert seqeval_metrics.recall_score(gold, pred, mode="strict", scheme=IOB2) == pytest.approx(2 / 3)
