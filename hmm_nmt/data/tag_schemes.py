"""Entity tag schemes: IO, IOB1, IOB2 (BIO), IOE1, IOE2 and BIOES (IOBES); reading, writing, converting.

A tag is ``O`` or ``P-TYPE`` with a prefix P in {I, B, E, S}. Every scheme encodes the same thing, a set of
entity spans (type, start, end) with end exclusive; they differ in which tokens are marked:

======  ==============================================================================================
io      I-X on every token of an entity. Adjacent entities of one type cannot be told apart: they merge.
iob1    I-X; B-X only on the first token of an entity that directly follows one of the same type
        (the CoNLL-2003 originals).
iob2    B-X on the first token of every entity, I-X on the rest (BIO).
ioe1    I-X; E-X only on the last token of an entity directly followed by one of the same type.
ioe2    E-X on the last token of every entity, I-X on the rest.
bioes   S-X on a single-token entity; B-X first, I-X inside, E-X last of a longer one (IOBES).
======  ==============================================================================================

:func:`spans` reads a sequence leniently, as the CoNLL ``conlleval`` script does (a continuation tag
that cannot continue starts a new entity, an entity is closed by any tag that cannot continue it);
:func:`invalid_positions` lists the tokens that break the scheme's own rules (``O I-PER`` in IOB2);
:func:`from_spans` writes spans in a scheme; :func:`convert` is the two together, lossless between all
schemes but IO (whose merges it counts). :func:`transitions` gives the scheme's allowed tag bigrams, the
constraint of valid-sequence (Viterbi) decoding.
"""
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["SCHEMES", "ALIASES", "canonical", "split_tag", "spans", "from_spans", "convert", "invalid_positions",
           "is_valid", "detect", "transitions", "TagSchemeError"]

SCHEMES = ("io", "iob1", "iob2", "ioe1", "ioe2", "bioes")
ALIASES = {"bio": "iob2", "iobes": "bioes", "iob": "iob2"}
_PREFIXES = {"io": "I", "iob1": "IB", "iob2": "IB", "ioe1": "IE", "ioe2": "IE", "bioes": "IBES"}

Span = Tuple[str, int, int]  # (type, start, end), end exclusive


class TagSchemeError(ValueError):
    pass


def canonical(scheme: str) -> str:
    name = ALIASES.get(scheme.lower(), scheme.lower())
    if name not in SCHEMES:
        raise TagSchemeError(f"unknown tag scheme {scheme!r} (one of {', '.join(SCHEMES + tuple(ALIASES))})")
    return name


def split_tag(tag: str) -> Tuple[str, Optional[str]]:
    """``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", None)``. Types may contain '-' (``I-creative-work``)."""
    if tag == "O":
        return "O", None
    if len(tag) < 3 or tag[1] != "-" or tag[0] not in "IBES":
        raise TagSchemeError(f"not an entity tag: {tag!r} (O or I-/B-/E-/S-TYPE)")
    return tag[0], tag[2:]


def _check_prefixes(tags: Sequence[str], scheme: str):
    allowed = _PREFIXES[scheme]
    for k, tag in enumerate(tags):
        p, _ = split_tag(tag)
        if p != "O" and p not in allowed:
            raise TagSchemeError(f"token {k + 1}: {tag!r} has no place in {scheme} (prefixes {', '.join(allowed)})")


def spans(tags: Sequence[str], scheme: str) -> List[Span]:
    """Entity spans of one sentence, read leniently (see the module docstring)."""
    scheme = canonical(scheme)
    _check_prefixes(tags, scheme)
    parsed = [split_tag(t) for t in tags] + [("O", None)]
    out: List[Span] = []
    start, prev = None, ("O", None)
    for k, (p, t) in enumerate(parsed[:-1]):
        if p != "O":
            if start is None or p in ("B", "S") or prev[1] != t or prev[0] in ("E", "S"):
                start = k
            nxt = parsed[k + 1]
            if p in ("E", "S") or nxt[1] != t or nxt[0] in ("B", "S"):
                out.append((t, start, k + 1))
                start = None
        prev = (p, t)
    return out


def from_spans(entities: Iterable[Span], length: int, scheme: str) -> Tuple[List[str], int]:
    """Tags of a sentence of ``length`` tokens in ``scheme``: ``(tags, merges)``, merges the number of
    adjacent same-type entity pairs that IO cannot keep apart (0 for every other scheme)."""
    scheme = canonical(scheme)
    ents = sorted(entities, key=lambda s: s[1])
    tags = ["O"] * length
    merges = 0
    prev_end, prev_type = -1, None
    for i, (t, s, e) in enumerate(ents):
        if not 0 <= s < e <= length or s < prev_end:
            raise TagSchemeError(f"span {(t, s, e)} is empty, out of range or overlaps the previous one")
        touch_before = s == prev_end and t == prev_type
        nxt = ents[i + 1] if i + 1 < len(ents) else None
        touch_after = nxt is not None and nxt[1] == e and nxt[0] == t
        merges += touch_before and scheme == "io"
        for k in range(s, e):
            tags[k] = f"I-{t}"
        if scheme == "iob2" or (scheme == "iob1" and touch_before):
            tags[s] = f"B-{t}"
        elif scheme == "ioe2" or (scheme == "ioe1" and touch_after):
            tags[e - 1] = f"E-{t}"
        elif scheme == "bioes":
            if e - s == 1:
                tags[s] = f"S-{t}"
            else:
                tags[s], tags[e - 1] = f"B-{t}", f"E-{t}"
        prev_end, prev_type = e, t
    return tags, merges


def convert(tags: Sequence[str], src: str, dst: str) -> Tuple[List[str], int]:
    """Re-tag one sentence: ``(tags in dst, IO merges)``."""
    return from_spans(spans(tags, src), len(tags), dst)


def invalid_positions(tags: Sequence[str], scheme: str) -> List[int]:
    """0-based positions whose tag cannot follow the previous one (or end the sentence) under ``scheme``."""
    allowed, start, end = transitions(sorted(set(tags) | {"O"}), scheme)
    index = {t: k for k, t in enumerate(sorted(set(tags) | {"O"}))}
    bad = []
    for k, tag in enumerate(tags):
        ok = start[index[tag]] if k == 0 else allowed[index[tags[k - 1]]][index[tag]]
        if not ok:
            bad.append(k)
    if tags and not end[index[tags[-1]]] and (len(tags) - 1) not in bad:
        bad.append(len(tags) - 1)
    return bad


def is_valid(tags: Sequence[str], scheme: str) -> bool:
    return not invalid_positions(tags, scheme)


def transitions(tag_names: Sequence[str], scheme: str):
    """The scheme's constraints over ``tag_names``: ``(allowed[prev][next], start[tag], end[tag])``, nested
    lists of bools. A sequence is valid (written as :func:`from_spans` writes it) iff its first tag may
    start, each bigram is allowed and its last tag may end. Tags of other schemes and non-tag symbols
    (padding, ``<unk>``) are never allowed."""
    scheme = canonical(scheme)
    parsed = []
    for name in tag_names:
        try:
            p, t = split_tag(name)
        except TagSchemeError:
            p, t = None, None
        parsed.append((None, None) if p not in ("O",) + tuple(_PREFIXES[scheme]) else (p, t))

    def can_follow(a, b):
        (pa, ta), (pb, tb) = a, b
        if pa is None or pb is None:
            return False
        same = pa != "O" and pb != "O" and ta == tb
        if scheme == "iob2":
            return pb != "I" or same
        if scheme == "iob1":
            return pb != "B" or same
        if scheme == "ioe2":
            return pa != "I" or same
        if scheme == "ioe1":
            return pa != "E" or same
        if scheme == "bioes":
            open_a, cont_b = pa in ("B", "I"), pb in ("I", "E")
            return (open_a and cont_b and same) or (not open_a and not cont_b)
        return True  # io

    def can_start(b):
        return b[0] is not None and b[0] not in {"iob2": "I", "iob1": "B", "bioes": "IE"}.get(scheme, "")

    def can_end(a):
        return a[0] is not None and a[0] not in {"ioe2": "I", "ioe1": "E", "bioes": "BI"}.get(scheme, "")

    allowed = [[can_follow(a, b) for b in parsed] for a in parsed]
    return allowed, [can_start(b) for b in parsed], [can_end(a) for a in parsed]


def detect(sentences: Iterable[Sequence[str]]) -> str:
    """The scheme a corpus is written in, from its prefixes and where they occur.

    S-/E- with B- -> bioes; E- alone -> ioe2 if every entity ends with E-, else ioe1; B- -> iob2 if every
    entity starts with B-, else iob1; I- alone -> iob1 (the reading that keeps every span an IO file has).
    """
    prefixes: Dict[str, int] = {}
    sentences = [list(s) for s in sentences]
    for s in sentences:
        for tag in s:
            p, _ = split_tag(tag)
            prefixes[p] = prefixes.get(p, 0) + 1
    if "S" in prefixes or ("E" in prefixes and "B" in prefixes):
        return "bioes"
    if "E" in prefixes:
        return "ioe2" if all(is_valid(s, "ioe2") for s in sentences) else "ioe1"
    if "B" in prefixes:
        return "iob2" if all(is_valid(s, "iob2") for s in sentences) else "iob1"
    return "iob1"
