"""hmm-nmt-align-corpus reads its input as a stream (hmm_nmt_align.corpus.inputs.Corpus): the same pairs as the
text read whole, memory that does not grow with the lines, pipes read once, and an input changed under a running
command refused."""
import gc
import hashlib
import os
import tempfile
import threading
import tracemalloc

import pytest
from test_corpus_stages import PAIRS, SETTINGS, FakeLoader, FakeTrainer, fake_preprocess

from hmm_nmt_align.corpus import CorpusError
from hmm_nmt_align.corpus.cli import build_parser, run
from hmm_nmt_align.corpus.inputs import Corpus, read_corpus

# \r\n ends, a U+2028 and a form feed inside lines (words, not line breaks, for the command), an empty side, and
# no newline at the end
SRC = b"a b\r\nc\xe2\x80\xa8d e\n\nf\x0cg\nh"
TGT = b"x\r\ny z\nw\nv\nu u"


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_the_stream_gives_the_lines_as_split_whole_and_the_manifests_digest(tmp_path):
    src, tgt = _write(tmp_path, "c.src", SRC), _write(tmp_path, "c.tgt", TGT)
    want_s = [line.rstrip("\r").split() for line in SRC.decode().split("\n")]
    want_t = [line.rstrip("\r").split() for line in TGT.decode().split("\n")]
    corpus = Corpus(src, tgt, None)
    assert read_corpus(src, tgt, None) == (want_s, want_t)
    assert (list(corpus.src_len), list(corpus.tgt_len)) == ([len(x) for x in want_s], [len(x) for x in want_t])
    assert corpus.empty_sides() == 1
    # the digest of a model directory made before the input was streamed: the same text keeps its model
    h = hashlib.sha256()
    for s, t in zip(want_s, want_t):
        h.update((" ".join(s) + "\t" + " ".join(t) + "\n").encode("utf-8"))
    assert corpus.digest == h.hexdigest()
    joined = _write(tmp_path, "c.st", b"".join(s + b" ||| " + t + b"\n" for s, t in zip(SRC.split(b"\n"),
                                                                                          TGT.split(b"\n"))))
    assert Corpus(None, None, joined).digest == corpus.digest
    assert [k for k, _, _ in corpus.pairs([1, 3, 4])] == [1, 3, 4]
    assert [(k, s) for k, s, _ in corpus.chunks(2)] == [([0, 1], want_s[:2]), ([2, 3], want_s[2:4]), ([4], want_s[4:])]
    assert list(corpus.pairs([])) == []


@pytest.mark.parametrize("change, why", [(b"a b\nc d e\n\nf g\nh i", "changed"),  # a line's words
                                         (b"a b\nc d e\n\nf g", "changed"),  # a line less
                                         (b"a b\nc d e\n\nf g\nh\nj", "lines but")])  # a line more
def test_an_input_changed_while_the_command_runs_is_an_error_not_a_misalignment(tmp_path, change, why):
    src, tgt = _write(tmp_path, "c.src", SRC), _write(tmp_path, "c.tgt", TGT)
    corpus = Corpus(src, tgt, None)
    _write(tmp_path, "c.src", change)
    with pytest.raises(CorpusError, match=why):
        list(corpus.pairs())


def test_memory_does_not_grow_with_the_lines(tmp_path):
    def peak(lines):
        line = " ".join(f"word{k}" for k in range(12)) + "\n"
        src, tgt = _write(tmp_path, f"{lines}.src", (line * lines).encode()), \
            _write(tmp_path, f"{lines}.tgt", (line * lines).encode())
        tracemalloc.start()
        corpus = Corpus(src, tgt, None)
        for _ in corpus.chunks(500):
            pass
        size = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return size
    small, large = peak(2_000), peak(40_000)
    # the word counts (8 bytes a line) grow; the text (12 words a side, about 900 bytes a line as word lists) does not
    assert large - small < 38_000 * 40, (small, large)


def test_pipes_are_read_once_and_every_stage_sees_their_lines(tmp_path):
    outputs = []
    for name, fifo in (("files", False), ("pipes", True)):
        w = tmp_path / name
        w.mkdir()
        paths = []
        for side, k in (("src", 0), ("tgt", 1)):
            data = "".join(p[k] + "\n" for p in PAIRS)
            path = str(w / f"c.{side}")
            if fifo:
                os.mkfifo(path)
                threading.Thread(target=lambda p=path, d=data: open(p, "w", encoding="utf-8").write(d),
                                 daemon=True).start()
            else:
                (w / f"c.{side}").write_text(data, encoding="utf-8")
            paths.append(path)
        before = set(os.listdir(tempfile.gettempdir()))
        o = build_parser().parse_args(["-s", paths[0], "-t", paths[1], "--model-dir", str(w / "m"), "-o",
                                       str(w / "out.align"), *SETTINGS])
        assert run(o, launch=FakeTrainer(), preprocess=fake_preprocess, load=FakeLoader()) == 0
        outputs.append((w / "out.align").read_text())
        gc.collect()  # the Corpus is gone: its copies of the pipes too
        assert not {f for f in set(os.listdir(tempfile.gettempdir())) - before
                    if f.startswith("hmm-nmt-align-corpus.")}
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == len(PAIRS) and "-" in outputs[0]
