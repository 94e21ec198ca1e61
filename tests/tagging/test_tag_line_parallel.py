"""hmm-nmt-tag's output is line-parallel to a CoNLL column input: line N of the output is line N of the input, with
the predicted tag appended to token lines and the ``-DOCSTART-`` separators, blank lines (several in a row, a
lone tab) and comment lines copied through untagged; a file without a final blank line stays without one."""
import pytest
import torch
from conftest import load_tag_script, save_tagger_checkpoint
from fairseq import tasks

from benchmarks.tagging import make_args
from hmm_nmt.data.conll import read_conll

TRAIN = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP I-MISC\ncall NN I-NP O\n\n"
         "Peter NNP B-NP I-PER\nBlackburn NNP I-NP I-PER\n\n-DOCSTART- -X- -X- O\n\nParis NNP B-NP I-LOC\nmet VBD "
         "B-VP O\nAnna NNP B-NP I-PER\n\n")
# two documents, separators with and without a blank line after them, two blank lines in a row, a lone tab, a
# comment line, an unseen word, and no blank line at the end
INPUT = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\n\n# a comment\nPeter NNP B-NP I-PER\n\t\n"
         "-DOCSTART- -X- -X- O\nZorro NNP B-NP I-PER\nmet VBD B-VP O\n\n-DOCSTART- -X- -X- O\n\nParis NNP B-NP I-LOC")


@pytest.fixture(scope="module", params=["sentence", "document"])
def checkpoint(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"tag_{request.param}")
    train = tmp / "train.txt"
    train.write_text(TRAIN)
    args = make_args("bilstm_tagger", str(tmp), ["--train-file", str(train), "--valid-file", str(train),
                                                 "--embed-dim", "8", "--hidden-size", "6", "--comment-prefix", "#",
                                                 "--tagging-unit", request.param])
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    return save_tagger_checkpoint(task.build_model(args), args, str(tmp / "m.pt")), task


def test_output_lines_are_the_input_lines(tmp_path, capsys, checkpoint):
    ckpt, task = checkpoint
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text(INPUT)
    assert load_tag_script().main(["--path", ckpt, "--input", str(inp), "--output", str(out), "--gold-column", "-1",
                                   "--cpu"]) == 0
    assert "tagged 4 sentences, 6 tokens" in capsys.readouterr().err
    src, got = INPUT.split("\n"), out.read_text().split("\n")
    assert got[-1] == "" and len(got) - 1 == len(src)  # one output line per input line, each ended by \n
    tags = set(task.target_dictionary.symbols[task.target_dictionary.nspecial:])
    for a, b in zip(src, got):
        if a.strip() and not a.startswith(("-DOCSTART-", "#")):
            assert b.split()[:-1] == a.split() and b.split()[-1] in tags
        else:
            assert b == a  # separators, comments and blank lines as they were, untagged
    assert [s.doc for s in read_conll(str(out), comment_prefix="#")] == [s.doc for s in read_conll(str(inp), comment_prefix="#")]
