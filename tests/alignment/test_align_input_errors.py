"""Careless and hostile input to hmm-nmt-align and hmm-nmt-adapt, as real subprocesses of the command lines, on
the frozen zero-order checkpoint of tests/data/checkpoints (transformer_dhmm.pt; words s0..s9 / t0..t11; no
training). Cases refused before fairseq is imported take a fraction of a second; the others load the model
(about 10 s each, marked slow). docs/input-errors.md lists every case and its test."""
import os
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import default_sigint, finished_manifest, open_fifo_writer

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "checkpoints")
CKPT = os.path.join(FIXTURES, "transformer_dhmm.pt")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
SRC = ["s1 s2 s3", "s4 s5", "s6 s7 s8 s9"]
TGT = ["t1 t2", "t3 t4 t5", "t6 t7 t8"]


def cmd(module, *args, **kw):
    return [sys.executable, "-m", module, *args]


def run(module, *args, input=None):
    return subprocess.run(cmd(module, *args), capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300,
                          input=input)


def align(*args, input=None):
    return run("hmm_nmt_align.extract", "--no-progress", *args, input=input)


def adapt(*args):
    return run("hmm_nmt_align.adapt", "--no-progress", *args)


def w(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def text(tmp_path):
    return w(tmp_path / "in.src", SRC), w(tmp_path / "in.tgt", TGT)


def one_error(proc, *needles, prog="hmm-nmt-align"):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = [line for line in proc.stderr.strip().splitlines() if not line.startswith("INFO:")]
    assert len(last) == 1 and last[0].startswith(f"{prog}: error: "), proc.stderr
    for n in needles:
        assert n in last[0], (n, last[0])
    return last[0]


def base_args(src, tgt, ck=CKPT):
    return ["--path", ck, "--src-text", src, "--tgt-text", tgt, "--bpe", "none", "--method", "posterior"]


# ------------------------------------------------------------------------------------------- refused at once
@pytest.mark.parametrize("which", ["src", "tgt", "path", "dict_next_to_checkpoint", "rev_path"])
def test_align_output_never_overwrites_an_input(tmp_path, text, which):
    ck_dir = tmp_path / "ck"
    ck_dir.mkdir()
    ck = str(ck_dir / "m.pt")
    for name in ("dict.src.txt", "dict.tgt.txt"):
        shutil.copy(os.path.join(FIXTURES, name), ck_dir / name)
    os.symlink(CKPT, ck)  # a symbolic link: the check compares files, not spellings
    src, tgt = text
    rev = str(tmp_path / "rev.pt")
    shutil.copy(CKPT, rev)
    out, flag = {"src": (src, "--src-text"), "tgt": (tgt, "--tgt-text"), "path": (ck, "--path"),
                 "dict_next_to_checkpoint": (str(ck_dir / "dict.src.txt"), "--path folder"),
                 "rev_path": (rev, "--rev-path")}[which]
    before = {p: open(p, "rb").read() for p in (src, tgt, CKPT, str(ck_dir / "dict.src.txt"), rev)}
    proc = align(*base_args(src, tgt, ck), "--rev-path", rev, "-o", out)
    one_error(proc, "same file as", flag)
    assert {p: open(p, "rb").read() for p in before} == before
    assert not [n for n in os.listdir(tmp_path) + os.listdir(ck_dir) if n.startswith(".")]  # no temporary file


@pytest.mark.parametrize("to", ["--src-text", "--path"])
def test_align_output_that_is_a_link_to_an_input_is_refused(tmp_path, text, to):
    """-o is written through a symbolic link (as a shell's > is), so a link to an input is that input."""
    src, tgt = text
    ck = str(tmp_path / "m.pt")
    shutil.copy(CKPT, ck)
    link = tmp_path / "out.align"
    os.symlink(src if to == "--src-text" else ck, link)
    before = {p: open(p, "rb").read() for p in (src, ck)}
    one_error(align(*base_args(src, tgt, ck), "-o", str(link)), "same file as", to)
    assert {p: open(p, "rb").read() for p in before} == before and os.path.islink(link)


def model_dir(tmp_path):
    """A finished model directory of hmm-nmt-align-corpus, as far as hmm-nmt-align's checks read it."""
    md = tmp_path / "model"
    for sub in ("bin", "text", "fwd", "rev"):
        (md / sub).mkdir(parents=True)
    for side in ("src", "tgt"):
        shutil.copy(os.path.join(FIXTURES, f"dict.{side}.txt"), md / "bin" / f"dict.{side}.txt")
        (md / "text" / f"train.{side}").write_text("a b\n")
    (md / "codes").write_text("#version: 0.2\ns 1\n")
    (md / "preprocess.log").write_text("log\n")
    for name in ("fwd", "rev"):
        shutil.copy(CKPT, md / name / "checkpoint_last.pt")
    (md / "manifest.json").write_text(finished_manifest())
    return md


@pytest.mark.parametrize("where", ["manifest.json", "codes", "text/train.src", "preprocess.log", "fwd/new.align",
                                   "bin/dict.src.txt", "DIR", "fwd/../codes", "link_to_codes", "linked_folder"])
def test_align_output_inside_the_model_dir_is_refused(tmp_path, text, where):
    md = model_dir(tmp_path)
    if where == "link_to_codes":
        os.symlink(md / "codes", tmp_path / "codes.align")
        out = str(tmp_path / "codes.align")
    elif where == "linked_folder":
        os.symlink(md, tmp_path / "alias")
        out = str(tmp_path / "alias" / "new.align")
    else:
        out = str(md) if where == "DIR" else os.path.join(str(md), where)
    before = {os.path.join(d, n): open(os.path.join(d, n), "rb").read() for d, _, ns in os.walk(md) for n in ns}
    proc = align("--model-dir", str(md), "--src-text", text[0], "--tgt-text", text[1], "-o", out)
    one_error(proc, f"-o {out} is inside --model-dir {md}")
    after = {os.path.join(d, n): open(os.path.join(d, n), "rb").read() for d, _, ns in os.walk(md) for n in ns}
    assert after == before


def test_output_inside_follows_links_and_dotdot(tmp_path):
    from hmm_nmt_align.base.console import output_inside

    (tmp_path / "model" / "fwd").mkdir(parents=True)
    (tmp_path / "model2").mkdir()
    os.symlink(tmp_path / "model", tmp_path / "alias")
    os.symlink(tmp_path / "model" / "codes", tmp_path / "out.align")  # dangling: codes does not exist yet
    md = str(tmp_path / "model")
    inside = [md, f"{md}/manifest.json", f"{md}/fwd/../codes", str(tmp_path / "alias" / "x"),
              str(tmp_path / "out.align"), f"{tmp_path}/model2/../model/x"]
    outside = ["-", str(tmp_path / "model2" / "x"), str(tmp_path / "x.align"), f"{md}/../x", str(tmp_path)]
    assert [p for p in inside if not output_inside(p, md)] == []
    assert [p for p in outside if output_inside(p, md)] == []
    assert output_inside(f"{md}/x", str(tmp_path / "alias"))  # the directory named through a link


def test_adapt_output_never_overwrites_the_checkpoint(tmp_path, text):
    ck = str(tmp_path / "m.pt")
    shutil.copy(CKPT, ck)
    before = open(ck, "rb").read()
    proc = adapt("--path", ck, "--src-text", text[0], "--tgt-text", text[1], "--bpe", "none", "--updates", "1",
                 "-o", ck)
    one_error(proc, "same file as --path", prog="hmm-nmt-adapt")
    assert open(ck, "rb").read() == before


def test_missing_rev_path_is_named_rev_path(tmp_path, text):
    proc = align(*base_args(*text), "--rev-path", str(tmp_path / "nope.pt"))
    one_error(proc, "--rev-path: checkpoint not found")


def test_align_help_does_not_import_fairseq():
    code = ("import sys\nfrom hmm_nmt_align import extract, adapt\n"
            "for m in (extract, adapt):\n    try:\n        m.main(['--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(x for x in ('fairseq', 'torch') if x in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and proc.stderr.strip() == "[]", proc.stderr
    assert "--src-text" in proc.stdout


# ------------------------------------------------------------------------------------------- with the model
@pytest.mark.slow
def test_line_separators_inside_a_line_keep_the_output_line_parallel(tmp_path):
    src = w(tmp_path / "s", ["s1 s2\u2028s3", "s4\x85s5", "s6\fs7 s8\vs9"])  # 3 lines, each with a separator
    tgt = w(tmp_path / "t", TGT)
    out = tmp_path / "out.align"
    proc = align(*base_args(src, tgt), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().split("\n")
    assert len(lines) == 4 and lines[-1] == "", lines  # 3 lines, each ending in \n
    # the separators are whitespace between words: the same links as the text with spaces
    ref = tmp_path / "ref.align"
    assert align(*base_args(w(tmp_path / "s2", SRC), tgt), "-o", str(ref)).returncode == 0
    assert out.read_text() == ref.read_text()


@pytest.mark.slow
def test_align_writes_through_a_symbolic_link(tmp_path, text):
    """-o naming a symbolic link (a dangling one) writes the file it points to, as hmm-nmt-symmetrize and a
    shell's > do; the link stays."""
    (tmp_path / "results").mkdir()
    target = tmp_path / "results" / "test.align"
    link = tmp_path / "out.align"
    os.symlink(target, link)
    ref = tmp_path / "ref.align"
    assert align(*base_args(*text), "-o", str(ref)).returncode == 0
    proc = align(*base_args(*text), "-o", str(link))
    assert proc.returncode == 0, proc.stderr
    assert os.path.islink(link) and target.read_text() == ref.read_text() and ref.read_text().count("-") > 0
    assert os.listdir(tmp_path / "results") == ["test.align"]


@pytest.mark.slow
def test_a_line_too_long_for_the_model_is_left_empty_with_a_warning(tmp_path, text):
    """The contract shared with hmm-nmt-align-corpus: exit 0, the line's output empty, one warning line naming
    the file and line; the other lines aligned as without it."""
    long = " ".join(f"s{k % 10}" for k in range(1100))  # over 1,024 positions (and this model's 64)
    src = w(tmp_path / "long.src", [SRC[0], long, SRC[2]])
    tgt = w(tmp_path / "long.tgt", TGT)
    ref, out = tmp_path / "ref.align", tmp_path / "out.align"
    assert align(*base_args(*text), "-o", str(ref)).returncode == 0
    proc = align(*base_args(src, tgt), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    warn = [line for line in proc.stderr.splitlines() if "warning" in line or "error" in line]
    assert warn == [f"hmm-nmt-align: warning: {src}:2: 1101 source / 4 target pieces with EOS, longer than the model "
                    "allows (64 / 64 positions); its output line is left empty"], proc.stderr
    first, _, third = ref.read_text().splitlines()
    assert out.read_text().splitlines() == [first, "", third] and first and third


@pytest.mark.slow
def test_text_in_another_language_warns_with_the_share_of_unknown_pieces(tmp_path):
    src, tgt = w(tmp_path / "s", TGT), w(tmp_path / "t", TGT)  # target words given as the source side
    proc = align(*base_args(src, tgt), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    warn = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warn) == 1 and warn[0].startswith("hmm-nmt-align: warning: 8 of 16 pieces are <unk>") \
        and "100% of --src-text, 0% of --tgt-text" in warn[0], proc.stderr
    proc = align(*base_args(w(tmp_path / "s2", SRC), tgt), "-o", str(tmp_path / "o2"))
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_text_from_stdin_and_process_substitution(tmp_path, text):
    src, tgt = text
    ref = tmp_path / "ref.align"
    assert align(*base_args(src, tgt), "-o", str(ref)).returncode == 0
    proc = align(*base_args("/dev/stdin", tgt), input="\n".join(SRC) + "\n")
    assert proc.returncode == 0 and proc.stdout == ref.read_text(), proc.stderr
    args = " ".join(base_args(f"<(cat {src})", f"<(cat {tgt})"))
    proc = subprocess.run(["bash", "-c", f'"$0" -m hmm_nmt_align.extract --no-progress {args}', sys.executable],
                          capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and proc.stdout == ref.read_text(), proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("where", ["data", "next_to_checkpoint"])
def test_moved_checkpoint_without_languages_finds_its_dictionaries(tmp_path, text, where):
    """Trained like examples/toy/demo.sh (no --source-lang/--target-lang) and moved away from its data-bin: the
    pair comes from the two dictionaries (here dict.fr.txt / dict.en.txt), the direction from the checkpoint."""
    import torch

    state = load_checkpoint_state(CKPT)
    state["cfg"]["task"].update(source_lang=None, target_lang=None, data=str(tmp_path / "gone" / "data-bin"))
    ck_dir, dicts = tmp_path / "ck", tmp_path / "dicts"
    ck_dir.mkdir()
    dicts.mkdir()
    ck = str(ck_dir / "m.pt")
    torch.save(state, ck)
    # sorted, "en" comes first: it is the target (12 symbols, the decoder's size), "fr" the source
    folder = dicts if where == "data" else ck_dir
    shutil.copy(os.path.join(FIXTURES, "dict.src.txt"), folder / "dict.fr.txt")
    shutil.copy(os.path.join(FIXTURES, "dict.tgt.txt"), folder / "dict.en.txt")
    ref = tmp_path / "ref.align"
    assert align(*base_args(*text), "-o", str(ref)).returncode == 0  # the fixture where it lies, with -s/-t
    out = tmp_path / "out.align"
    extra = ["--data", str(dicts)] if where == "data" else []
    proc = align(*base_args(*text, ck=ck), *extra, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == ref.read_text() and ref.read_text().count("-") > 0


@pytest.mark.slow
@pytest.mark.parametrize("case", ["zero_byte", "text_named_pt", "rev_zero_byte", "spm", "bpe_codes", "max_tokens",
                                  "adapt_max_tokens", "adapt_zero_byte"])
def test_bad_files_and_flags_are_one_line_errors(tmp_path, text, case):
    src, tgt = text
    zero, txt = tmp_path / "zero.pt", tmp_path / "text.pt"
    zero.write_bytes(b"")
    txt.write_text("hello, I am not a checkpoint\n")
    codes = w(tmp_path / "codes", ["#version: 0.2", "s 1", "s1 s2 s3"])
    model = w(tmp_path / "m.model", ["not a model"])
    out = tmp_path / "out"
    if case.startswith("adapt"):
        ck = str(zero) if case == "adapt_zero_byte" else CKPT
        proc = adapt("--path", ck, "--src-text", src, "--tgt-text", tgt, "--bpe", "none", "--updates", "1",
                     "--max-tokens", "3", "-o", str(out))
        want = ([f"--path {zero}: not a fairseq checkpoint (empty file)"] if case == "adapt_zero_byte" else
                [f"--max-tokens 3 is smaller than line 1 of {src} (4 source / 3 target pieces with EOS)"])
        one_error(proc, *want, prog="hmm-nmt-adapt")
        assert not out.exists()
        return
    args, want = {
        "zero_byte": (base_args(src, tgt, str(zero)), [f"--path {zero}: not a fairseq checkpoint (empty file)"]),
        "text_named_pt": (base_args(src, tgt, str(txt)), [f"--path {txt}: not a fairseq checkpoint ("]),
        "rev_zero_byte": (base_args(src, tgt) + ["--rev-path", str(zero)],
                          [f"--rev-path {zero}: not a fairseq checkpoint (empty file)"]),
        "spm": (base_args(src, tgt)[:-4] + ["--spm-model", model, "--method", "posterior"],
                [f"--spm-model: {model}: not a SentencePiece model"]),
        "bpe_codes": (base_args(src, tgt)[:-4] + ["--bpe-codes", codes, "--method", "posterior"],
                      [f"--bpe-codes: {codes}:3: invalid BPE codes line 's1 s2 s3'"]),
        "max_tokens": (base_args(src, tgt) + ["--max-tokens", "3"],
                       [f"--max-tokens 3 is smaller than line 1 of {src}", "give --max-tokens 5 or more"]),
    }[case]
    one_error(align(*args, "-o", str(out)), *want)
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".")]


@pytest.mark.slow
def test_align_ctrl_c_is_one_line_and_exit_130(tmp_path, text):
    """SIGINT while hmm-nmt-align reads --src-text from a FIFO (after fairseq is imported): one line, 130, the
    old output kept (see test_input_errors for why the FIFO is closed after the signal)."""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    out = tmp_path / "out.align"
    out.write_text("old\n")
    proc = subprocess.Popen(cmd("hmm_nmt_align.extract", "--no-progress", *base_args(fifo, text[1]), "-o", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT,
                            preexec_fn=default_sigint)
    with open_fifo_writer(fifo, proc) as f:
        f.write(SRC[0] + "\n")
        f.flush()
        proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    lines = [line for line in stderr.strip().splitlines() if not line.startswith("INFO:")]
    assert lines == ["hmm-nmt-align: interrupted"] and stdout == "", stderr
    assert out.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["fifo", "in.src", "in.tgt", "out.align"]
