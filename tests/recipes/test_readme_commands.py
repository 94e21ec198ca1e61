"""The README's shell blocks run as written, so that they cannot drift from the code.

Every ```bash block of README.md follows a marker line, ``<!-- readme-test: NAME -->`` (run here) or
``<!-- readme-test: skip (why) -->`` (the installs, the demo and the whole suite). The blocks named here run in
README order in one fresh folder, as a user would run them one after the other from the repository root, with only
their data and their length changed: the test writes a small corpus where each block's data step would put the real
one (the toy corpus of examples/toy/generate.py, the tiny CoNLL sets of examples/tagging_tiny.py), and each
substitution below (fewer updates, epochs or model sizes, a download replaced) must match the README's text, so
an edited command fails here until this file follows it. Each block must exit 0 and write the files it claims.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
MARKER = re.compile(r"^<!-- readme-test: (?:(?P<skip>skip) \((?P<why>[^)]+)\)|(?P<name>[a-z]+)) -->$")
FENCE = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)

pytestmark = pytest.mark.slow


def readme_blocks():
    """[(marker name or None for skip, block text)] of README.md's ```bash blocks, each with its marker."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    blocks = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.match(before)
        line = text[:m.start()].count("\n") + 1
        assert marker, f"README.md:{line}: a ```bash block without a '<!-- readme-test: NAME|skip (why) -->' line"
        blocks.append((None if marker["skip"] else marker["name"], m.group(1)))
    return blocks


def _toy(cwd, n_train=200, n_test=20):
    raw = cwd / "toy-raw"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw),
                    "--train", str(n_train), "--valid", "20", "--test", str(n_test)], check=True, capture_output=True)
    return raw


def _tiny(cwd, kind):
    out = cwd / f"tiny-{kind}"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tagging_tiny.py"), kind, str(out)], check=True,
                   capture_output=True)
    return out


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ------------------------------------------------------------------------------------------- the blocks
def setup_translate(cwd):
    """examples/multi30k/prepare.sh's BPE text: the toy pair as runs/multi30k/data/bpe/{train,valid,test}.{de,en}."""
    raw, bpe = _toy(cwd), cwd / "runs" / "multi30k" / "data" / "bpe"
    bpe.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        shutil.copy(raw / f"{split}.src", bpe / f"{split}.de")
        shutil.copy(raw / f"{split}.tgt", bpe / f"{split}.en")


def check_translate(cwd, out):
    state = load_checkpoint_state(cwd / "checkpoints" / "checkpoint_best.pt")
    args = state["cfg"]["model"]
    assert (args.arch, args.lexicon, args.encoder_embed_dim, args.decoder_layers) == ("transformer_dhmm", "separable",
                                                                                      128, 2)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    assert len(re.findall(r"^H-\d+\t", out, re.M)) == 20 and len(re.findall(r"^A-\d+\t", out, re.M)) == 20


def setup_align(cwd):
    raw = _toy(cwd)
    shutil.copy(raw / "train.src", cwd / "corpus.en")
    shutil.copy(raw / "train.tgt", cwd / "corpus.fr")
    shutil.copy(raw / "test.src", cwd / "new.en")
    shutil.copy(raw / "test.tgt", cwd / "new.fr")
    pairs = [f"{s} ||| {t}" for s, t in zip(_lines(raw / "train.src"), _lines(raw / "train.tgt"))]
    (cwd / "corpus.en-fr").write_text("\n".join(pairs) + "\n", encoding="utf-8")


def check_align(cwd, out):
    assert (cwd / "model" / "manifest.json").is_file()
    for name, n in (("corpus.align", 200), ("fwd.align", 200), ("rev.align", 200), ("new.align", 20)):
        links = _lines(cwd / name)
        assert len(links) == n, name
        assert all(re.fullmatch(r"(\d+-\d+( \d+-\d+)*)?", line) for line in links), name


def setup_tag(cwd):
    tiny = _tiny(cwd, "conll2003")
    for name, split in (("train", "eng.train"), ("dev", "eng.testa"), ("test", "eng.testb")):
        shutil.copy(tiny / split, cwd / f"{name}.conll")


def check_tag(cwd, out):
    assert (cwd / "runs" / "ner" / "ck" / "checkpoint_best.pt").is_file()
    tokens = [line for line in _lines(cwd / "test.conll") if line.strip() and not line.startswith("-DOCSTART-")]
    tagged = [line for line in _lines(cwd / "test.tagged") if line.strip() and not line.startswith("-DOCSTART-")]
    assert len(tagged) == len(tokens) and [t.split()[0] for t in tagged] == [t.split()[0] for t in tokens]


def setup_lm(cwd):
    shutil.copy(_tiny(cwd, "conll2000") / "train.txt", cwd / "train.txt")


def check_lm(cwd, out):
    for f in ("raw/train.txt", "raw/brown64.txt", "bin/train.bin", "bin/dict.txt", "checkpoints/checkpoint_best.pt"):
        assert (cwd / "data" / "wsj" / f).is_file(), f
    assert re.search(r"Perplexity: [\d.]+", out)


_ALIGN_FAST = ("hmm-nmt-align-corpus --max-update 2 --guide-updates 1 --embed-dim 16 --ffn-dim 32 --heads 2 "
               "--merges 50 --valid-lines 10 --no-progress ")
# name -> (setup, [(pattern, replacement)]: each must match the block, check)
BLOCKS = {
    "translate": (setup_translate, [(r"^examples/multi30k/prepare\.sh --download .*$", ": the test wrote the BPE text"),
                                    (r"--max-update 24000 ", "--max-update 3 ")], check_translate),
    "align": (setup_align, [(r"hmm-nmt-align-corpus ", _ALIGN_FAST)], check_align),
    "tag": (setup_tag, [(r"--max-epoch 30 ", "--max-epoch 1 ")], check_tag),
    "lm": (setup_lm, [(r"--max-epoch 60 ", "--max-epoch 1 "), (r"--states-per-cluster 256 ", "--states-per-cluster 8 ")],
           check_lm),
}


def test_every_bash_block_is_run_or_says_why_not():
    names = [name for name, _ in readme_blocks() if name]
    assert sorted(names) == sorted(BLOCKS), f"README blocks {names}, tested here {sorted(BLOCKS)}"


def test_the_readme_blocks_run_as_written(tmp_path):
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")  # the commands run from the repository root
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON=sys.executable,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "alignment"), os.environ.get("PYTHONPATH", "")]))
    for name, block in readme_blocks():
        if name is None:
            continue
        setup, subs, check = BLOCKS[name]
        for pattern, replacement in subs:
            block, n = re.subn(pattern, replacement, block, flags=re.M)
            assert n, f"README block '{name}' no longer matches {pattern!r}: update {__file__}"
        setup(tmp_path)
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, f"README block '{name}' failed:\n{block}\n{proc.stderr[-4000:]}"
        check(tmp_path, proc.stdout + proc.stderr)
