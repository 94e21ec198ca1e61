"""Fuzz test of the readers of every alignment-side file format (seeded generator, bounded, in `make test-fast`).

Readers: Pharaoh/TALP links (``read_pharaoh``), NAACL/RWTH (``read_naacl``), GIZA++ A3 (``read_giza_a3``) and
line-parallel text (``read_tokens``, under ``--src/--tgt/--src-text/--tgt-text/--pieces``). Inputs: random
bytes, random Unicode over an alphabet heavy in the format's own characters and in every character
``str.splitlines`` breaks at (U+2028, U+2029, U+0085, form feed, vertical tab, a lone CR, the file/group/record
separators), random whitespace, valid files mutated and truncated at a random byte. Each reader must either
return a result consistent with the input (one record per ``\\n``-separated line, the sentence count given) or
raise :class:`AlignmentFormatError` naming the file (and the line, within the file), never another exception.
"""
import random

import pytest

from hmm_nmt_align.io import (
    AlignmentFormatError,
    read_giza_a3,
    read_naacl,
    read_pharaoh,
    read_tokens,
    write_giza_a3,
    write_naacl,
    write_pharaoh,
)

SEPARATORS = ["\u2028", "\u2029", "\u0085", "\f", "\v", "\r", "\x1c", "\x1d", "\x1e"]
WHITESPACE = [" ", "\t", "  ", "\u00a0", "\u3000", "\r\n"]
ALPHABET = {
    "pharaoh": list("0123456789-?p") + [" "] * 4,
    "naacl": list("0123456789SP#.-") + [" "] * 4,
    "giza": list("0123456789#({}) NULLab") + ["# Sentence pair (1) source length 1 target length 1 ", " ({ 1 }) "],
    "tokens": list("abcxyz0123.,") + [" "] * 3 + ["é", "\u2581", "@@"],
}
CASES = 120  # per (format, seed): about 0.2 s on one core


def n_lines(text: str) -> int:
    """Records a line-parallel file holds: its ``\\n``-separated lines (a final ``\\n`` ends the last one)."""
    return text.count("\n") + (0 if text == "" or text.endswith("\n") else 1)


def _valid(fmt, rng):
    """A valid file of the format (written by the project's own writer) to mutate."""
    from hmm_nmt_align.io import Alignment

    n = rng.randint(1, 5)
    al = [Alignment.from_links({(rng.randint(0, 3), rng.randint(0, 3)) for _ in range(rng.randint(0, 4))})
          for _ in range(n)]
    return al


def _text(fmt, rng, tmp_path):
    kind = rng.choice(["bytes", "unicode", "unicode", "mutated", "mutated", "whitespace"])
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
    if kind == "whitespace":
        pool = WHITESPACE + SEPARATORS + ["\n"]
        return "".join(rng.choice(pool) for _ in range(rng.randint(0, 20))).encode("utf-8")
    if kind == "unicode":
        pool = ALPHABET[fmt] + SEPARATORS + ["\n", "\n", chr(rng.randrange(0x20, 0x2FFFF))]
        s = "".join(rng.choice(pool) for _ in range(rng.randint(0, 80)))
        return s.encode("utf-8", "surrogatepass")  # a lone surrogate makes invalid UTF-8: also an input
    # mutated valid file: the project's writer, then separators inserted, characters dropped, a truncation
    path = str(tmp_path / "valid")
    if fmt == "tokens":
        s = "".join(" ".join(rng.choice(["a", "bb", "é", "x@@", "\u2581y"]) for _ in range(rng.randint(0, 4))) + "\n"
                    for _ in range(rng.randint(1, 5)))
    else:
        al = _valid(fmt, rng)
        if fmt == "pharaoh":
            write_pharaoh(path, al)
        elif fmt == "naacl":
            write_naacl(path, al, one_based=rng.random() < 0.5)
        else:
            write_giza_a3(path, al, [["s"] * 4 for _ in al], [["t"] * 4 for _ in al])
        with open(path, encoding="utf-8") as f:
            s = f.read()
    chars = list(s)
    for _ in range(rng.randint(0, 3)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.5:
            chars.insert(pos, rng.choice(SEPARATORS + WHITESPACE))
        elif chars:
            del chars[min(pos, len(chars) - 1)]
    data = "".join(chars).encode("utf-8")
    if rng.random() < 0.5:
        data = data[: rng.randint(0, len(data))]  # truncation, possibly inside a multi-byte character
    return data


def _read(fmt, path, rng, text):
    if fmt == "pharaoh":
        return read_pharaoh(path, one_based=rng.random() < 0.3)
    if fmt == "naacl":
        n = rng.choice([None, n_lines(text)])
        return read_naacl(path, n_sentences=n, one_based=rng.random() < 0.5)
    if fmt == "giza":
        return read_giza_a3(path)
    return read_tokens(path)


def _lines(text: str):
    """The oracle's own line split (not the reader's): on "\\n", a CR before it dropped."""
    lines = text.split("\n")[:n_lines(text)]
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _check(fmt, text, result):
    lines = _lines(text)
    if fmt in ("pharaoh", "tokens"):
        assert len(result) == len(lines)
    if fmt == "tokens":
        assert result == [line.split() for line in lines]
    if fmt == "giza":
        while lines and not lines[-1].strip():
            lines.pop()
        assert len(result) == len(lines) // 3
    if fmt == "naacl":
        assert all(a.sure <= a.possible for a in result)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fmt", ["pharaoh", "naacl", "giza", "tokens"])
def test_reader_fuzz(tmp_path, fmt, seed):
    rng = random.Random(f"{fmt}-{seed}")  # str seeds are stable across runs (no hash randomization)
    path = str(tmp_path / f"input.{fmt}")
    outcomes = {"ok": 0, "error": 0}
    for case in range(CASES):
        data = _text(fmt, rng, tmp_path)
        with open(path, "wb") as f:
            f.write(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        try:
            result = _read(fmt, path, rng, text or "")
        except AlignmentFormatError as e:
            outcomes["error"] += 1
            assert e.path == path and str(e).startswith(path + ":"), (case, data, e)
            if text is None:
                continue  # not UTF-8: named by byte offset, no line
            assert e.line is not None and 1 <= e.line <= n_lines(text) + 1, (case, data, e)
            continue
        assert text is not None, (case, data, "not UTF-8 but read")
        _check(fmt, text, result)
        outcomes["ok"] += 1
    # the generator reaches both outcomes (else it tests nothing)
    assert outcomes["ok"] > 0 and outcomes["error"] > 0, outcomes


@pytest.mark.parametrize("sep", SEPARATORS)
def test_line_breaks_other_than_newline_stay_inside_their_line(tmp_path, sep):
    """str.splitlines() breaks at these: 3 lines with one of them inside must stay 3 records."""
    p = tmp_path / "f"
    p.write_bytes(f"0-0 1-1{sep}2-2\n\n0-1\n".encode("utf-8"))
    al = read_pharaoh(str(p))
    assert [sorted(a.sure) for a in al] == [[(0, 0), (1, 1), (2, 2)], [], [(0, 1)]]
    p.write_bytes(f"a b{sep}c\nd\ne f\n".encode("utf-8"))
    assert [len(t) for t in read_tokens(str(p))] == [len(f"a b{sep}c".split()), 1, 2]
    assert len(read_tokens(str(p))) == 3
    p.write_bytes(f"1 1 1 S\n2 1 2{sep} P\n".encode("utf-8"))
    assert len(read_naacl(str(p), one_based=True)) == 2
    # CRLF files: the CR goes with its newline
    p.write_bytes(b"0-0\r\n1-1\r\n")
    assert [sorted(a.sure) for a in read_pharaoh(str(p))] == [[(0, 0)], [(1, 1)]]


def test_naacl_huge_sentence_number_is_an_error_not_a_billion_sentences(tmp_path):
    p = tmp_path / "g.naacl"
    p.write_text("1 1 1 S\n999999999999 1 1 S\n")
    with pytest.raises(AlignmentFormatError) as e:
        read_naacl(str(p), one_based=True)
    assert e.value.line == 2 and "far beyond" in str(e.value)
    # with the count given, the usual error
    with pytest.raises(AlignmentFormatError, match="only 3 sentences"):
        read_naacl(str(p), n_sentences=3, one_based=True)


# ------------------------------------------------------------------------------------------------ manifest.json
MANIFEST = {"version": 1, "corpus": "0" * 64, "lines": 12,
            "config": {"merges": 200, "embed_dim": 128, "ffn_dim": 512, "layers": 2, "heads": 4, "max_tokens": 2048,
                       "lr": 0.002, "warmup_updates": 200, "dropout": 0.1, "seed": 1, "max_update": 6, "patience": 0,
                       "valid_lines": 500, "lexicon": "separable", "target_context": "past", "lr_schedule": "linear",
                       "label_smoothing": 0.1, "time_limit": None, "seeds": 2, "guide_updates": 4,
                       "guide_weight": 4.0},
            "done": {"codes": {"merges": 200}, "bin": {"train_pairs": 10, "valid_pairs": 1},
                     "train.fwd": {"max_update": 6, "updates": 6, "from_hours": [0.0, 0.1]},
                     "train.rev": {"max_update": 6, "updates": 6}, "links": {"seeds": 2, "pairs": 10, "links": 30},
                     "guide.fwd": {"max_update": 4, "updates": 4}}}
ODD_VALUES = [None, True, -1, 0, 1, 2.5, float("nan"), 1e400, "", "2", "abc", [], [1, 2], {}, {"a": 1}, 10 ** 30]


def _mutate(rng, value, depth=0):
    """A copy of ``value`` with one random change somewhere inside: a key dropped, a value replaced by an odd
    one, a container replaced by another type."""
    if isinstance(value, dict) and value and rng.random() < 0.8 and depth < 4:
        key = rng.choice(sorted(value))
        out = dict(value)
        r = rng.random()
        if r < 0.2:
            del out[key]
        elif r < 0.6:
            out[key] = rng.choice(ODD_VALUES)
        else:
            out[key] = _mutate(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.5:
        out = list(value)
        out[rng.randrange(len(out))] = rng.choice(ODD_VALUES)
        return out
    return rng.choice(ODD_VALUES)


@pytest.mark.parametrize("seed", range(4))
def test_manifest_reader_fuzz(tmp_path, seed):
    """``ModelDir`` reads a manifest that is valid, mutated (types, ranges, keys), truncated or random bytes:
    it loads, and then every question the stages ask of it has an answer, or it raises CorpusError naming the
    file; never another exception."""
    import json

    from hmm_nmt_align.corpus import CorpusError, ModelDir

    rng = random.Random(seed)
    path = tmp_path / "manifest.json"
    for case in range(150):
        text = json.dumps(_mutate(rng, MANIFEST) if case else MANIFEST, allow_nan=True)
        if rng.random() < 0.1:
            text = text[:rng.randrange(len(text) + 1)]
        if rng.random() < 0.03:
            text = bytes(rng.randrange(256) for _ in range(rng.randrange(40))).decode("latin-1")
        path.write_text(text, encoding="utf-8")
        try:
            md = ModelDir(str(tmp_path))
        except CorpusError as e:
            assert str(path) in str(e) or "manifest.json" in str(e), e
            assert "\n" not in str(e)
            continue
        assert case or md.data == MANIFEST
        md.finished()
        for fwd, rev in md.members():
            md.checkpoint(fwd), md.checkpoint(rev, "train")
        md.guide_updates()
