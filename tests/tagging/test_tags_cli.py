"""hmm-nmt-tags on tiny generated CoNLL-2003-style files: as a real subprocess, and in-process for the bad input."""
import os
import re
import subprocess
import sys

import pytest

from hmm_nmt.data import tags_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
Smith NNP I-NP B-PER
. . O O

-DOCSTART- -X- -X- O

Ann NNP B-NP I-PER
"""


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hmm_nmt.data.tags_cli", *args], capture_output=True, text=True,
                          env=env)


@pytest.mark.slow
def test_convert_iob1_to_bioes_and_back(tmp_path):
    src = tmp_path / "eng.train"
    src.write_text(CONLL)
    assert run("detect", str(src)).stdout.strip() == "iob1"
    r = run("convert", "--to", "bioes", str(src), str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    assert "iob1 -> bioes" in r.stderr and "0 adjacent" in r.stderr
    out = (tmp_path / "b").read_text().splitlines()
    assert out[0] == "-DOCSTART- -X- -X- O" and out[1] == ""
    assert [ln.split()[-1] for ln in out[2:10]] == ["S-ORG", "O", "S-MISC", "O", "B-PER", "E-PER", "S-PER", "O"]
    assert out[2].split()[:3] == ["EU", "NNP", "B-NP"]  # other columns untouched
    r = run("convert", "--from", "bioes", "--to", "iob1", str(tmp_path / "b"), str(tmp_path / "back"))
    assert r.returncode == 0 and (tmp_path / "back").read_text() == CONLL
    r = run("convert", "--to", "io", str(src), str(tmp_path / "io"))
    assert "1 adjacent same-type entity pairs merged" in r.stderr


@pytest.mark.slow
def test_score_and_bad_input(tmp_path):
    gold = tmp_path / "gold"
    gold.write_text(CONLL)
    pred = tmp_path / "pred"
    pred.write_text(CONLL.replace("Smith NNP I-NP B-PER", "Smith NNP I-NP O"))
    r = run("score", "--scheme", "iob1", str(gold), str(pred))
    # gold: ORG, MISC, PER, PER, PER (5); pred loses Smith: 4 of 4 right, 4 of 5 found
    assert r.returncode == 0 and "precision 100.00 recall 80.00 F1 88.89" in r.stdout, r.stdout + r.stderr
    bad = tmp_path / "bad"
    bad.write_text(CONLL.replace("call NN I-NP O", "call NN I-NP PER"))
    r = run("convert", "--to", "bioes", str(bad), str(tmp_path / "never"))
    assert r.returncode == 2 and f"{bad}:6: not an entity tag: 'PER'" in r.stderr
    assert not (tmp_path / "never").exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


# ----------------------------------------------------------------------------- careless and hostile input
# In-process (main(argv)), so that they run in the fast suite; each one fails on the reader that split a line
# mixing tabs and spaces at its first tab, scored across schemes and compared sentence lengths only.
IOB2 = "EU B-ORG\nis O\nthe O\nbig B-MISC\nPeter B-PER\nSmith I-PER\n\nAnn B-PER\n"
BIOES = "EU S-ORG\nis O\nthe O\nbig S-MISC\nPeter B-PER\nSmith E-PER\n\nAnn S-PER\n"


def tags(capsys, *args):
    rc = tags_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def no_temp_files(folder):
    return not [p for p in os.listdir(folder) if p.startswith(".")]


def test_convert_keeps_every_column_of_a_line_mixing_tabs_and_spaces(tmp_path, capsys):
    src = tmp_path / "mixed"
    src.write_text("EU\tNNP\tB-NP\tI-ORG\nrejects VBZ\tB-VP\tO\n")
    rc, _, err = tags(capsys, "convert", "--from", "iob1", "--to", "iob2", src, tmp_path / "out")
    assert rc == 2 and f"{src}:2: 3 tab-separated columns where line 1 has 4" in err, err
    assert not (tmp_path / "out").exists() and no_temp_files(tmp_path)
    src.write_text("EU\tNNP B-NP I-ORG\n")  # every line mixes the same way: the tag column is not a tag
    rc, _, err = tags(capsys, "convert", "--from", "iob1", "--to", "iob2", src, tmp_path / "out")
    assert rc == 2 and "'NNP B-NP I-ORG'" in err and "mixes tabs and spaces" in err, err
    # a tab file and a file of runs of spaces (CRLF too): only the tag changes, byte for byte
    for text, want in [("EU\tNNP\tI-ORG\nrejects\tVBZ\tO\n", "EU\tNNP\tS-ORG\nrejects\tVBZ\tO\n"),
                       ("EU  NNP I-ORG\r\nrejects VBZ  O\r\n\r\n", "EU  NNP S-ORG\r\nrejects VBZ  O\r\n\r\n")]:
        src.write_bytes(text.encode())
        rc, _, err = tags(capsys, "convert", "--from", "iob1", "--to", "bioes", src, tmp_path / "out")
        assert rc == 0, err
        assert (tmp_path / "out").read_bytes() == want.encode()


def test_score_refuses_a_prediction_in_another_scheme(tmp_path, capsys):
    gold, pred = tmp_path / "gold", tmp_path / "pred"
    gold.write_text(IOB2)
    pred.write_text(BIOES)
    for extra in ([], ["--scheme", "iob2"]):
        rc, out, err = tags(capsys, "score", *extra, gold, pred)
        assert rc == 2 and out == "", out
        assert f"{pred}:1: 'S-ORG' has no place in iob2" in err and "reads as bioes" in err, err
    # converted first, it scores 100
    assert tags(capsys, "convert", "--from", "bioes", "--to", "iob2", pred, tmp_path / "conv")[0] == 0
    rc, out, _ = tags(capsys, "score", gold, tmp_path / "conv")
    assert rc == 0 and "F1 100.00" in out


def test_score_scheme_io_refuses_iob2_files(tmp_path, capsys):
    gold = tmp_path / "gold"
    gold.write_text(IOB2)
    rc, out, err = tags(capsys, "score", "--scheme", "io", gold, gold)
    assert rc == 2 and out == "" and f"{gold}:1: 'B-ORG' has no place in io" in err and "--scheme iob2" in err, err
    rc, _, err = tags(capsys, "convert", "--from", "io", "--to", "iob2", gold, tmp_path / "x")
    assert rc == 2 and f"{gold}:1: 'B-ORG' has no place in io" in err, err


@pytest.mark.parametrize("text", ["", "\n\n", "a O\nb O\n\nc O\n"], ids=["empty", "blank", "all-O"])
def test_detect_says_it_cannot_tell(tmp_path, capsys, text):
    f = tmp_path / "f"
    f.write_text(text)
    rc, out, err = tags(capsys, "detect", f)
    assert rc == 2 and out == "" and str(f) in err, (out, err)
    assert "iob1" not in out + err


def test_score_refuses_files_with_different_tokens_naming_the_first_mismatch(tmp_path, capsys):
    gold, pred = tmp_path / "gold", tmp_path / "pred"
    gold.write_text(IOB2)
    pred.write_text(IOB2.replace("Smith", "Smyth"))
    rc, out, err = tags(capsys, "score", gold, pred)
    assert rc == 2 and out == "" and f"{pred}:6: token 'Smyth' where {gold}:6 has 'Smith'" in err, err
    pred.write_text(IOB2.replace("Smith I-PER\n", ""))  # a token missing: sentence 1 shorter
    rc, _, err = tags(capsys, "score", gold, pred)
    assert rc == 2 and f"{pred}:6: sentence of 5 tokens" in err, err
    pred.write_text(IOB2.split("\n\n")[0] + "\n")  # the last sentence missing
    rc, _, err = tags(capsys, "score", gold, pred)
    assert rc == 2 and f"{gold}:8: sentence 2, but {pred} has only 1" in err, err


def test_convert_missing_folder_column_out_of_range_and_output_over_input(tmp_path, capsys):
    src = tmp_path / "in"
    src.write_text(IOB2)
    rc, _, err = tags(capsys, "convert", "--to", "bioes", src, tmp_path / "nodir" / "out")
    assert rc == 2 and err.strip() == f"hmm-nmt-tags: error: {tmp_path / 'nodir' / 'out'}: no such folder " \
                                      f"{tmp_path / 'nodir'}", err
    rc, _, err = tags(capsys, "convert", "--to", "bioes", "--column", "5", src, tmp_path / "out")
    assert rc == 2 and f"{src}:1: --column 5 out of range: the line has 2 columns" in err, err
    rc, _, err = tags(capsys, "convert", "--to", "bioes", src, src)
    assert rc == 2 and "is the input" in err and src.read_text() == IOB2
    assert not (tmp_path / "out").exists() and no_temp_files(tmp_path)


def test_score_empty_and_truncated_gzip_files(tmp_path, capsys):
    import gzip

    empty = tmp_path / "empty"
    empty.write_text("")
    rc, out, err = tags(capsys, "score", empty, empty)
    assert rc == 2 and out == "" and f"{empty}:1: no token line" in err, err
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(IOB2.encode())[:25])
    rc, out, err = tags(capsys, "score", cut, cut)
    assert rc == 2 and out == "" and re.match(rf"hmm-nmt-tags: error: {re.escape(str(cut))}:\d+: not a complete gzip",
                                              err), err
    bad = tmp_path / "bad"
    bad.write_bytes(b"EU B-ORG\nis O\xff\n")
    rc, _, err = tags(capsys, "detect", bad)
    assert rc == 2 and f"{bad}:2: not UTF-8" in err, err


CTRL_C = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever the runner ignores
from hmm_nmt.data import tag_schemes, tags_cli
real, calls = tag_schemes.convert, []
def interrupted(*a):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C in the middle of the work
    return real(*a)
tag_schemes.convert = interrupted
sys.exit(tags_cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_ctrl_c_exits_130_one_line_nothing_written(tmp_path):
    src = tmp_path / "in"
    src.write_text(CONLL)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", CTRL_C, "convert", "--to", "bioes", str(src), str(tmp_path / "out")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines() == ["hmm-nmt-tags: interrupted; nothing written"], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_tag_parsers_repeat_the_plugin_lists():
    """The torch-free parsers of the console scripts list the plugin's schemes and decodings."""
    from hmm_nmt.criterions.tagging_cross_entropy import DECODINGS
    from hmm_nmt_align.base import tag_args

    assert tag_args.SCHEMES == tags_cli.ts.SCHEMES and tag_args.DECODINGS == DECODINGS


def test_console_entry_point_runs_the_command(tmp_path, capsys):
    from hmm_nmt_align.tag_commands import tags_main

    src = tmp_path / "in"
    src.write_text(IOB2)
    assert tags_main(["detect", str(src)]) == 0 and capsys.readouterr().out == "iob2\n"
    assert tags_main(["detect", str(tmp_path / "none")]) == 2
