"""Seeded fuzz tests of the CoNLL readers: ``read_conll`` (column files), ``read_conllu`` (CoNLL-U) and the column
reader of ``hmm-nmt-tags`` (:class:`hmm_nmt.data.tags_cli.ColumnFile`).

Valid files are mutated with random bytes, random Unicode (line and paragraph separators U+2028/U+2029, NEL
U+0085, form feed, vertical tab, CR, NUL, no-break space), random runs of white space, deleted or doubled
lines, and truncation at any byte (inside a UTF-8 sequence too); some are gzipped, some gzipped then cut.
Each reader must either return a result consistent with the bytes (checked against an independent reading
of the file split at ``\\n`` only) or raise the project's format error whose message starts with
``path:line:``; any other exception fails the test. Bounded (a few hundred files per reader) and seeded.
"""
import gzip
import random
import re

import pytest

from hmm_nmt.data import tags_cli
from hmm_nmt.data.conll import CoNLLFormatError, read_conll, read_conllu

SEED = 58
CASES = 250

CONLL = (b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n"
         b". . O O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n")
CONLLU = ("# sent_id = 1\n# text = The cat sat.\n1\tThe\tthe\tDET\tDT\tDefinite=Def\t2\tdet\t_\t_\n"
          "2\tcat\tcat\tNOUN\tNN\tNumber=Sing\t3\tnsubj\t_\t_\n3-4\tsat.\t_\t_\t_\t_\t_\t_\t_\t_\n"
          "3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\tSpaceAfter=No\n\n"
          "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n").encode("utf-8")
ODD = ["\u2028", "\u2029", "\u0085", "\f", "\v", "\r", "\x00", "\xa0", "\t", " ", "\x1c", "é", "\U0001F600",
       "\u0301", "B-", "I-X", "-DOCSTART-", "#", "_", "\n"]


def mutate(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        pos = rng.randint(0, len(data))
        if kind == 0:  # random bytes
            data = data[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))) + data[pos:]
        elif kind == 1:  # random Unicode, separators included
            data = data[:pos] + "".join(rng.choice(ODD) for _ in range(rng.randint(1, 3))).encode("utf-8") + data[pos:]
        elif kind == 2:  # random white space
            data = data[:pos] + "".join(rng.choice(" \t\r\f\v") for _ in range(rng.randint(1, 5))).encode() + data[pos:]
        elif kind == 3:  # truncation, possibly inside a UTF-8 sequence
            data = data[:pos]
        else:  # delete or double a line
            lines = data.split(b"\n")
            k = rng.randrange(len(lines))
            lines[k:k + 1] = [] if kind == 4 else [lines[k], lines[k]]
            data = b"\n".join(lines)
    return data


def cases(base: bytes, tmp_path, salt: int):
    rng = random.Random(SEED * 1000 + salt)
    for i in range(CASES):
        data = mutate(rng, base) if i else base
        gz = rng.random() < 0.15
        path = tmp_path / (f"f{i}.txt.gz" if gz else f"f{i}.txt")
        if gz:
            packed = gzip.compress(data, mtime=0)
            if rng.random() < 0.5:  # a truncated or corrupted gzip stream
                cut = rng.randint(0, len(packed) - 1)
                packed = packed[:cut] if rng.random() < 0.5 else packed[:cut] + b"\xff" + packed[cut + 1:]
            path.write_bytes(packed)
        else:
            path.write_bytes(data)
        yield str(path), data


def text_lines(data: bytes):
    """The file's lines as the readers must see them: UTF-8, split at ``\\n`` only."""
    return data.decode("utf-8").split("\n")


def check_error(e: Exception, path: str):
    assert re.match(re.escape(path) + r":\d+: ", str(e)), f"no path:line in {e!r}"


def test_read_conll_fuzz(tmp_path):
    outcomes = {"read": 0, "refused": 0}
    for path, data in cases(CONLL, tmp_path, 1):
        try:
            sentences = read_conll(path)
        except CoNLLFormatError as e:
            check_error(e, path)
            outcomes["refused"] += 1
            continue
        lines = text_lines(data)  # raises UnicodeDecodeError (a test failure) if the reader took bad bytes
        ncol = len(sentences[0].rows[0])
        seen = []
        for s in sentences:
            for row, lineno in zip(s.rows, s.lines):
                assert row == lines[lineno - 1].split() and len(row) == ncol, (path, lineno)
                seen.append(lineno)
        expected = [k + 1 for k, ln in enumerate(lines) if ln.strip() and not ln.strip().startswith("-DOCSTART-")]
        assert seen == expected, path  # every token line once, in order, nothing split or merged
        outcomes["read"] += 1
    assert outcomes["read"] > 20 and outcomes["refused"] > 20, outcomes  # the fuzz reaches both branches


def test_read_conllu_fuzz(tmp_path):
    outcomes = {"read": 0, "refused": 0}
    for path, data in cases(CONLLU, tmp_path, 2):
        try:
            sentences = read_conllu(path)
        except CoNLLFormatError as e:
            check_error(e, path)
            outcomes["refused"] += 1
            continue
        lines = text_lines(data)
        for s in sentences:
            for row, lineno in zip(s.rows, s.lines):
                fields = lines[lineno - 1].rstrip("\r").split("\t")
                assert len(row) == 10 and int(fields[0]) == int(row[0]), (path, lineno)
                assert row[1] == fields[1] or fields[1] == "_", (path, lineno, row, fields)
        outcomes["read"] += 1
    assert outcomes["read"] > 20 and outcomes["refused"] > 20, outcomes


def test_tags_column_reader_fuzz(tmp_path):
    outcomes = {"read": 0, "refused": 0}
    for path, data in cases(CONLL, tmp_path, 3):
        try:
            f = tags_cli.ColumnFile(path, -1)
        except tags_cli._Error as e:
            check_error(e, path)
            outcomes["refused"] += 1
            continue
        lines = text_lines(data)
        if lines[-1] == "":
            lines.pop()
        assert f.lines == lines, path
        for sent in f.sentences:
            for k, tag in sent:
                before = f.lines[k]
                f.replace_tag(k, tag)  # writing the same tag back changes nothing: no column lost or moved
                assert f.lines[k] == before, (path, k)
                f.replace_tag(k, "O")
                assert len(re.split(r"\t" if f.tab else r" +", f.lines[k].strip(" "))) == \
                    len(re.split(r"\t" if f.tab else r" +", before.strip(" "))), (path, k)
                f.lines[k] = before
        outcomes["read"] += 1
    assert outcomes["read"] > 20 and outcomes["refused"] > 20, outcomes


@pytest.mark.parametrize("reader", [read_conll, read_conllu, lambda p: tags_cli.ColumnFile(p, -1)])
def test_separators_inside_a_line_do_not_split_it(tmp_path, reader):
    """U+2028, U+0085, form feed and a lone CR are inside a line: the line count is that of ``\\n``."""
    if reader is read_conllu:
        body = "1\ta\u2028b\ta\tX\tX\t_\t0\troot\t_\t_\n2\tc\u0085\tc\tX\tX\t_\t1\tdep\t_\t_\n"
    else:
        body = "a\u2028b B-PER\nc\fd I-PER\ne\rz O\n"
    path = tmp_path / "sep.txt"
    path.write_bytes(body.encode("utf-8"))
    got = reader(str(path))
    sentences = got.sentences if isinstance(got, tags_cli.ColumnFile) else got
    assert [len(s) for s in sentences] == [body.count("\n")]
