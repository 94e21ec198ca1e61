"""Alignment file formats: round trips, reversal, and every error case."""
import os
import random

import pytest

from hmm_nmt_align.io import (
    Alignment,
    AlignmentFormatError,
    atomic_write,
    check_same_count,
    format_pharaoh,
    parse_pharaoh_line,
    read_alignments,
    read_giza_a3,
    read_naacl,
    read_pharaoh,
    reverse_all,
    write_giza_a3,
    write_naacl,
    write_pharaoh,
)


def random_alignments(seed, n=30, with_possible=True):
    rng = random.Random(seed)
    out, src_lens, tgt_lens = [], [], []
    for _ in range(n):
        I, J = rng.randint(1, 9), rng.randint(1, 9)
        cells = [(i, j) for i in range(I) for j in range(J)]
        sure = {c for c in cells if rng.random() < 0.2}
        possible = {c for c in cells if rng.random() < 0.1} if with_possible else set()
        out.append(Alignment(sure, possible))
        src_lens.append(I)
        tgt_lens.append(J)
    out.append(Alignment())  # a sentence without links
    src_lens.append(3)
    tgt_lens.append(2)
    return out, src_lens, tgt_lens


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_parse_pharaoh_tokens():
    a = parse_pharaoh_line("0-0 1?2 3p4  5-6\n")
    assert a.sure == {(0, 0), (5, 6)}
    assert a.possible == {(0, 0), (1, 2), (3, 4), (5, 6)}
    b = parse_pharaoh_line("1-1 2p3", one_based=True)
    assert b.sure == {(0, 0)} and b.possible == {(0, 0), (1, 2)}
    assert format_pharaoh(a) == "0-0 1?2 3?4 5-6"
    assert parse_pharaoh_line("0-0 1 p 2 3p4 5-6") == a  # spaced form of a possible link
    with pytest.raises(AlignmentFormatError):
        parse_pharaoh_line("0-0 p 2")
    assert format_pharaoh(a, possible_mark="p", one_based=True) == "1-1 2p3 4p5 6-7"


@pytest.mark.parametrize("one_based", [False, True])
@pytest.mark.parametrize("mark", ["?", "p"])
def test_pharaoh_round_trip(tmp_path, one_based, mark):
    al, src_lens, tgt_lens = random_alignments(1)
    path = str(tmp_path / "a.txt")
    write_pharaoh(path, al, one_based=one_based, possible_mark=mark)
    assert read_pharaoh(path, one_based=one_based, src_lens=src_lens, tgt_lens=tgt_lens) == al
    # reverse on write then reverse on read: identity; reverse on read only: swapped links
    write_pharaoh(path, al, one_based=one_based, reverse=True, possible_mark=mark)
    assert read_pharaoh(path, one_based=one_based, reverse=True) == al
    assert read_pharaoh(path, one_based=one_based, src_lens=tgt_lens, tgt_lens=src_lens) == reverse_all(al)


@pytest.mark.parametrize("one_based", [False, True])
def test_naacl_round_trip(tmp_path, one_based):
    al, src_lens, tgt_lens = random_alignments(2)
    path = str(tmp_path / "a.naacl")
    write_naacl(path, al, one_based=one_based)
    # the trailing empty sentence only exists if the count is given
    assert read_naacl(path, n_sentences=len(al), one_based=one_based, src_lens=src_lens, tgt_lens=tgt_lens) == al
    assert read_naacl(path, one_based=one_based) == al[:-1]
    assert read_naacl(path, n_sentences=len(al), one_based=one_based, reverse=True) == reverse_all(al)


def test_naacl_details(tmp_path):
    # WPT style: 1-based, position 0 = NULL (dropped), optional confidence, unlabeled = sure, comments
    path = write(tmp_path, "g.naacl", "# gold\n1 1 1 S\n1 2 0 S\n1 2 3 P 0.5\n\n3 1 2\n")
    al = read_naacl(path, one_based=True)
    assert al == [Alignment({(0, 0)}, {(1, 2)}), Alignment(), Alignment({(0, 1)})]


def test_giza_round_trip_and_reading(tmp_path):
    al, src_lens, tgt_lens = random_alignments(3, with_possible=False)
    src = [[f"s{k}" for k in range(n)] for n in src_lens]
    tgt = [[f"t{k}" for k in range(n)] for n in tgt_lens]
    path = str(tmp_path / "x.A3.final")
    write_giza_a3(path, al, src, tgt)
    got, (s2, t2) = read_giza_a3(path, return_tokens=True, src_lens=src_lens, tgt_lens=tgt_lens)
    assert got == al and s2 == src and t2 == tgt
    assert read_giza_a3(path, reverse=True) == reverse_all(al)
    # a file as GIZA++ writes it (NULL links dropped, 1-based target positions)
    giza = ("# Sentence pair (1) source length 3 target length 4 alignment score : 1.5e-06\n"
            "das haus ist klein \n"
            "NULL ({ 3 }) the ({ 1 }) house ({ 2 }) small ({ 4 }) \n")
    p2 = write(tmp_path, "y.A3.final", giza)
    assert read_giza_a3(p2) == [Alignment({(0, 0), (1, 1), (2, 3)})]
    assert read_alignments(p2, "giza") == read_giza_a3(p2)


def test_reversal_object():
    a = Alignment({(0, 1)}, {(2, 3)})
    assert a.reversed() == Alignment({(1, 0)}, {(3, 2)})
    assert a.reversed().reversed() == a


# ----------------------------------------------------------------------------------------------- errors
def err(fn, *a, **k):
    with pytest.raises(AlignmentFormatError) as e:
        fn(*a, **k)
    return e.value


def test_pharaoh_errors_name_file_and_line(tmp_path):
    p = write(tmp_path, "bad.txt", "0-0 1-1\n0-0 1x1\n")
    e = err(read_pharaoh, p)
    assert (e.path, e.line) == (p, 2) and str(e).startswith(f"{p}:2: ") and "'1x1'" in str(e)
    p = write(tmp_path, "neg.txt", "0-0\n")
    assert err(read_pharaoh, p, one_based=True).line == 1  # 0 in a 1-based file
    p = write(tmp_path, "range.txt", "0-0\n0-0 2-1\n")
    e = err(read_pharaoh, p, src_lens=[1, 2], tgt_lens=[1, 2])
    assert e.line == 2 and "source index 2" in str(e)
    e = err(read_pharaoh, p, src_lens=[1, 3], tgt_lens=[1, 1])
    assert e.line == 2 and "target index 1" in str(e)
    e = err(read_pharaoh, p, src_lens=[1, 2, 3])
    assert "2 alignment lines but 3 source sentences" in str(e) and e.line == 3
    e = err(read_pharaoh, str(tmp_path / "missing.txt"))
    assert "cannot read" in str(e)
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe0-0\n")
    assert "UTF-8" in str(err(read_pharaoh, str(tmp_path / "bin.txt")))


def test_naacl_errors(tmp_path):
    for text, line, what in [("1 1 1 S\n1 1\n", 2, "expected"), ("1 a 1 S\n", 1, "non-integer"),
                             ("1 1 1 X\n", 1, "S or P"), ("1 1 1 S abc\n", 1, "confidence"),
                             ("0 1 1 S\n", 1, "1-based"), ("9 1 1 S\n", 1, "only 2 sentences")]:
        e = err(read_naacl, write(tmp_path, "n.txt", text), n_sentences=2, one_based=True)
        assert e.line == line and what in str(e), (text, str(e))
    e = err(read_naacl, write(tmp_path, "n.txt", "1 1 1 S\n2 5 1 S\n"), one_based=True, src_lens=[2, 2])
    assert e.line == 2 and "source index 4" in str(e)


def test_giza_errors(tmp_path):
    head = "# Sentence pair (1) source length 2 target length 2 alignment score : 0\n"
    cases = [
        (head + "a b\n", 2, "multiple of 3"),
        ("garbage\na b\nNULL ({ }) x ({ 1 }) y ({ 2 })\n", 1, "Sentence pair"),
        (head + "a b c\nNULL ({ }) x ({ 1 }) y ({ 2 })\n", 2, "target length"),
        (head + "a b\nNULL ({ }) x ({ 1 }) y ({ 3 })\n", 3, "out of range"),
        (head + "a b\nNULL ({ }) x ({ 1 })\n", 3, "source length"),
        (head + "a b\nx ({ 1 }) y ({ 2 })\n", 3, "NULL"),
        (head + "a b\nNULL ({ }) x ({ 1 } y ({ 2 })\n", 3, "malformed"),
    ]
    for text, line, what in cases:
        e = err(read_giza_a3, write(tmp_path, "g.A3", text))
        assert e.line == line and what in str(e), (text, str(e))
    ok = write(tmp_path, "ok.A3", head + "a b\nNULL ({ }) x ({ 1 }) y ({ 2 })\n")
    assert "--src has 3" in str(err(read_giza_a3, ok, src_lens=[3]))


def test_check_same_count_names_short_file():
    e = err(check_same_count, [1, 2, 3], [1, 2], "gold.txt", "hyp.txt")
    assert e.path == "hyp.txt" and e.line == 3 and "gold.txt has 3" in str(e)


def test_atomic_write_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    target.write_text("old\n")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write(str(target), "new\n")
    assert target.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]  # no temp file left behind
    monkeypatch.undo()
    atomic_write(str(target), "new\n")
    assert target.read_text() == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
