"""Stages 1 and 2 of ``hmm-nmt-align-corpus``: the joint BPE codes and the binarized pairs (``bin/``)."""
import contextlib
import io
import os
import shutil
import subprocess
import sys
from array import array
from collections import Counter
from typing import Callable, List, Sequence, Tuple

from hmm_nmt_align.base.atomic import atomic_output, atomic_write

from .checks import check_batch_fits
from .model_dir import CorpusError, ModelDir


def _segment_files(segmenter, corpus, train: Sequence[int], valid: Sequence[int], prefix: str) -> array:
    """``PREFIX/train.{src,tgt}`` and ``PREFIX/valid.{src,tgt}``: the lines ``train`` and ``valid`` segmented, in one
    pass over the corpus; returns the pieces of each training line's longer side."""
    longest = array("I")
    valid_set, pos = set(valid), 0  # train is increasing: a pointer, not a set of millions
    with contextlib.ExitStack() as stack:
        out = {(part, side): stack.enter_context(open(stack.enter_context(atomic_output(f"{prefix}/{part}.{side}")),
                                                      "w", encoding="utf-8"))
               for part in ("train", "valid") for side in ("src", "tgt")}
        for k, s, t in corpus.pairs():
            in_train = pos < len(train) and train[pos] == k
            if not (in_train or k in valid_set):
                continue
            ps, pt = segmenter.segment(s)[0], segmenter.segment(t)[0]
            for part, keep in (("train", in_train), ("valid", k in valid_set)):
                if keep:
                    out[part, "src"].write(" ".join(ps) + "\n")
                    out[part, "tgt"].write(" ".join(pt) + "\n")
            if in_train:
                longest.append(max(len(ps), len(pt)))
                pos += 1
        for f in out.values():
            f.close()  # before atomic_output renames them
    return longest


def _run(cmd: List[str], log: str, what: str) -> None:
    """Run ``cmd`` to the end, its output in the file ``log``; a failure is a CorpusError with the log's tail."""
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-5:]
        raise CorpusError(f"{what} failed (log: {log}): {' | '.join(tail)}")


def _split(corpus, valid_lines: int, patience: int) -> Tuple[array, array]:
    """The training and held-out lines (those with words on both sides; the last ones held out). Without
    --patience nothing validates: the held-out lines train too (fairseq-preprocess still gets them as its valid
    subset), so a small corpus loses none of its pairs."""
    train = array("I", (k for k, (a, b) in enumerate(zip(corpus.src_len, corpus.tgt_len)) if a and b))
    if not train:
        raise CorpusError("no line has words on both sides: nothing to train on")
    n_valid = min(valid_lines, max(1, len(train) // 10))
    if not patience:
        return train, train[-n_valid:]
    return (train[:-n_valid] if len(train) > n_valid else train), train[-n_valid:]


def prepare(md: ModelDir, opts, corpus, run: Callable[[List[str], str, str], None] = _run) -> None:
    """Stages 1 and 2: BPE codes (new model only) and the binarized pairs. ``run(cmd, log, what)`` runs
    fairseq-preprocess's command line (a test passes a fake)."""
    from subword_nmt.learn_bpe import learn_bpe

    from hmm_nmt_align.base.segment import load_segmenter

    train, valid = _split(corpus, opts.valid_lines, opts.patience)
    os.makedirs(md.file("text"), exist_ok=True)
    if not md.done("codes"):
        counts, tgt_counts = Counter(), Counter()
        for _, s, t in corpus.pairs():
            counts.update(s)
            tgt_counts.update(t)
        for w, c in tgt_counts.items():  # the source's words first, as the merges' ties are broken in this order
            counts[w] += c
        vocab = io.StringIO("".join(f"{w} {c}\n" for w, c in counts.items()))
        out = io.StringIO()
        with contextlib.redirect_stderr(io.StringIO()):  # its own progress bar
            # --vocab-size: the merges the characters leave (each counted twice, inside and at a word's end), so
            # the vocabulary's size, and each update's cost, does not depend on the script
            learn_bpe(vocab, out, opts.merges or opts.vocab_size, is_dict=True, total_symbols=not opts.merges)
        atomic_write(md.file("codes"), out.getvalue())
        md.mark("codes", merges=sum(1 for line in out.getvalue().splitlines() if not line.startswith("#version")))
    segmenter = load_segmenter(md.file("codes"), None)
    lengths = _segment_files(segmenter, corpus, train, valid, md.file("text"))
    # fairseq-train would stop on such a line mid-training (lines over the positions it leaves out itself)
    check_batch_fits(zip(train, lengths), opts.max_tokens, "pieces")
    dest = md.file("bin.new")
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    cmd = [sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
           "--trainpref", md.file("text", "train"), "--validpref", md.file("text", "valid"), "--destdir", dest,
           "--workers", "1"]
    if md.done("bin"):  # --continue: the model's own dictionary
        cmd += ["--srcdict", md.file("bin", "dict.src.txt"), "--tgtdict", md.file("bin", "dict.tgt.txt")]
    else:
        cmd += ["--joined-dictionary"]
    run(cmd, md.file("preprocess.log"), "fairseq-preprocess")
    if os.path.isdir(md.file("bin")):
        for name in os.listdir(md.file("bin")):
            if not name.startswith("dict."):
                os.remove(md.file("bin", name))
        for name in os.listdir(dest):
            if not name.startswith("dict."):
                os.replace(os.path.join(dest, name), md.file("bin", name))
        shutil.rmtree(dest)
    else:
        os.replace(dest, md.file("bin"))
    md.mark("bin", train_pairs=len(train), valid_pairs=len(valid))
