"""``--arch hmm_lm`` through the real command lines on a tiny synthetic CoNLL file: the WSJ recipe
(examples/wsj_lm/prepare.py), fairseq-preprocess,
fairseq-train, stock fairseq-eval-lm (whose perplexity, from the full next-token distribution, must equal
the training run's validation loss, from the blocked forward), and bad options."""
import os
import random
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_DIR = os.path.join(ROOT, "hmm_nmt")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def run(args, check=True):
    proc = subprocess.run(args, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[:3]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc


def fairseq(tool, *args, check=True):
    return run([sys.executable, "-m", f"fairseq_cli.{tool}", *args], check=check)


def write_conll(path, n=500, seed=0):
    """Sentences of a small grammar, with punctuation and numbers for the PTB normalisation."""
    rng = random.Random(seed)
    det, adj = ["The", "a", "every"], ["big", "red", "old", "new"]
    noun, verb = ["cat", "dog", "man", "house", "car", "tree"], ["sees", "likes", "buys", "paints"]
    with open(path, "w") as f:
        for _ in range(n):
            words = [(rng.choice(det), "DT")] + ([(rng.choice(adj), "JJ")] if rng.random() < 0.5 else [])
            words += [(rng.choice(noun), "NN"), (rng.choice(verb), "VBZ"), (rng.choice(det), "DT"),
                      (rng.choice(noun), "NN")]
            if rng.random() < 0.3:
                words += [(",", ","), ("for", "IN"), (f"{rng.randint(1, 99)}.5", "CD"), ("dollars", "NNS")]
            words.append((".", "."))
            for w, t in words:
                f.write(f"{w} {t} O\n")
            f.write("\n")


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    work = tmp_path_factory.mktemp("hmm_lm")
    write_conll(work / "toy.conll")
    out = run([sys.executable, os.path.join(ROOT, "examples", "wsj_lm", "prepare.py"), "--conll",
               str(work / "toy.conll"), "--out", str(work / "raw")]).stdout
    assert "vocabulary:" in out
    # the word classes of the grammar, as Brown clustering would find them (the package takes ~20 s even on
    # this toy vocabulary, too slow for the suite; examples/wsj_lm runs it)
    classes = {"the": 0, "a": 0, "every": 0, "big": 1, "red": 1, "old": 1, "new": 1, "cat": 2, "dog": 2, "man": 2,
               "house": 2, "car": 2, "tree": 2, "sees": 3, "likes": 3, "buys": 3, "paints": 3, "for": 3, "N": 2,
               "dollars": 2}
    (work / "raw" / "brown4.txt").write_text("".join(f"{w} {c}\n" for w, c in classes.items()))
    text = (work / "raw" / "train.txt").read_text()
    assert " N dollars" in text and "," not in text and "the" in text and "The" not in text
    fairseq("preprocess", "--only-source", "--trainpref", str(work / "raw" / "train.txt"), "--validpref",
            str(work / "raw" / "valid.txt"), "--testpref", str(work / "raw" / "test.txt"), "--destdir",
            str(work / "bin"), "--workers", "1")
    return work


COMMON = ["--arch", "hmm_lm", "--criterion", "hmm_lm", "--sample-break-mode", "eos",
          "--tokens-per-sample", "64", "--optimizer", "adam", "--lr", "0.02", "--max-tokens", "1500",
          "--no-epoch-checkpoints", "--required-batch-size-multiple", "1", "--seed", "1", "--num-workers", "0", "--no-progress-bar", "--log-format", "simple",
          "--hmm-embed-dim", "16"]


def valid_losses(proc):
    return [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", proc.stderr + proc.stdout)]


@pytest.mark.slow
def test_train_and_eval_lm_agree(lm):
    save = lm / "brown"
    proc = fairseq("train", str(lm / "bin"), "--user-dir", USER_DIR, *COMMON, "--task", "language_modeling",
                   "--brown-clusters", str(lm / "raw" / "brown4.txt"), "--states-per-cluster", "4", "--state-dropout", "0.5",
                   "--max-epoch", "4", "--save-dir", str(save))
    losses = valid_losses(proc)
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.3, losses
    ev = fairseq("eval_lm", str(lm / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_last.pt"),
                 "--gen-subset", "valid", "--sample-break-mode", "eos", "--tokens-per-sample", "64",
                 "--max-tokens", "1500", "--num-workers", "0")
    m = re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", ev.stderr + ev.stdout)
    assert m, ev.stderr[-2000:]
    # eval-lm gathers the gold from the full next-token distribution; training's valid loss is the forward
    assert abs(float(m.group(1)) - losses[-1]) < 2e-3  # 3 decimals printed by training
    assert 1.0 < float(m.group(2)) < 30


def eval_lm(lm, checkpoint, *args):
    """Stock fairseq-eval-lm on the valid split with --output-word-probs: (loss in bits per token, number of
    tokens scored, {block id: [natural-log probability of each of its tokens]})."""
    ev = fairseq("eval_lm", str(lm / "bin"), "--user-dir", USER_DIR, "--path", str(checkpoint), "--gen-subset",
                 "valid", "--max-tokens", "4000", "--num-workers", "0", "--output-word-probs", *args)
    out = ev.stderr + ev.stdout
    loss = re.search(r"Loss \(base 2\): ([\d.]+)", out)
    count = re.search(r"Evaluated ([\d,]+) tokens", out)
    assert loss and count, out[-2000:]
    blocks = {int(m.group(1)): [float(v) for v in re.findall(r"\[(-?[\d.]+)\]", m.group(2))]
              for m in re.finditer(r"fairseq_cli\.eval_lm(?: \| |:)(\d+) (.*)", out)}
    return float(loss.group(1)), int(count.group(1).replace(",", "")), blocks


@pytest.mark.slow
def test_stream_mode_train_eval_lm_and_context_window(lm):
    """Stream mode: --sample-break-mode none blocks of L tokens in training (each from the start distribution)
    and in eval-lm without context (equal losses); with --context-window C eval-lm scores every block after
    the forward over its C previous stream tokens. The independent oracle is the core's per-token conditionals
    on (context + block), compared token by token; with C >= the stream length it is one long forward over
    the whole valid stream."""
    import math

    import torch
    from fairseq import checkpoint_utils
    from fairseq.data import data_utils

    import hmm_nmt  # noqa: F401  (registers hmm_lm for loading the checkpoint)

    L, save = 24, lm / "stream"
    proc = fairseq("train", str(lm / "bin"), "--user-dir", USER_DIR, *COMMON, "--task", "language_modeling",
                   "--sample-break-mode", "none",
                   "--tokens-per-sample", str(L), "--brown-clusters", str(lm / "raw" / "brown4.txt"),
                   "--states-per-cluster", "4", "--state-dropout", "0.5", "--max-epoch", "2", "--save-dir", str(save))
    losses = valid_losses(proc)
    assert len(losses) == 2 and losses[-1] < losses[0], losses
    ckpt = save / "checkpoint_last.pt"

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(ckpt)],
                                                                    arg_overrides={"data": str(lm / "bin")})
    hmm = models[0].eval().double().decoder.hmm
    split = data_utils.load_indexed_dataset(str(lm / "bin" / "valid"), task.dictionary)
    stream = torch.cat([split[i] for i in range(len(split))])  # sentences with their </s>, as eval-lm reads them
    N = stream.numel()
    assert N > 10 * L

    def oracle(C):
        """log p(y_t | y_[max(0, s - C), t)) for every stream position t of the block [s, s + L)."""
        out = []
        for s in range(0, N, L):
            x = stream[None, max(0, s - C):s + L]
            out.append(hmm.conditionals(x, torch.ones_like(x, dtype=torch.bool))[0, s - max(0, s - C):])
        return torch.cat(out)

    def bits(logp):
        return -logp.sum().item() / N / math.log(2)

    x = stream[None]
    exact = hmm.conditionals(x, torch.ones_like(x, dtype=torch.bool))[0]
    torch.testing.assert_close(oracle(N), exact, rtol=0, atol=1e-12)
    assert bits(oracle(0)) - bits(exact) > 5e-3  # carrying the state matters on this data
    for C in (0, 1, N):
        args = ("--tokens-per-sample", str(L + C), "--context-window", str(C)) if C else ("--tokens-per-sample", str(L),)
        loss, n, blocks = eval_lm(lm, ckpt, "--sample-break-mode", "none", *args)
        got = torch.tensor([p for b in sorted(blocks) for p in blocks[b]], dtype=torch.float64)
        assert n == N and sorted(blocks) == list(range(len(blocks))) and got.numel() == N
        # eval-lm's float32 next-token distribution, 6 printed decimals
        torch.testing.assert_close(got, oracle(C), rtol=0, atol=1e-4)
        assert abs(loss - bits(oracle(C))) < 2e-4  # 4 printed decimals
        if C == 0:  # every block from the start distribution, as training's validation scores it (3 decimals)
            assert abs(loss - losses[-1]) < 2e-3
    print(f"stream valid bits/token: restart {bits(oracle(0)):.4f}, context 1 {bits(oracle(1)):.4f}, "
          f"whole stream {bits(exact):.4f}")


@pytest.mark.slow
def test_block_context_items_are_the_stream_before_each_block(lm):
    """--task language_modeling_context --block-context C: every block's item is its C previous stream
    tokens (fewer at the start, with fairseq's </s> shift) then the block; the context targets are padding."""
    import numpy as np
    import torch
    from fairseq import options, tasks
    from fairseq.data import data_utils

    L, C = 24, 5
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(lm / "bin"), "--user-dir", USER_DIR, "--task",
                                                "language_modeling_context", "--sample-break-mode", "none",
                                                "--tokens-per-sample", str(L), "--block-context", str(C),
                                                "--arch", "hmm_lm"])
    task = tasks.setup_task(args)
    ds = task.load_dataset("valid")
    split = data_utils.load_indexed_dataset(str(lm / "bin" / "valid"), task.dictionary)
    stream = torch.cat([split[i] for i in range(len(split))])
    shifted = torch.cat([stream.new([task.dictionary.eos()]), stream])  # fairseq's source: stream shifted by 1
    pad = task.dictionary.pad()
    assert len(ds) == -(-stream.numel() // L) and task.max_positions() == L + C
    for i in range(len(ds)):
        item, s = ds[i], i * L
        e, c = min(s + L, stream.numel()), min(s, C)
        assert torch.equal(item["target"], torch.cat([torch.full((c,), pad), stream[s:e]]))
        assert torch.equal(item["source"], shifted[s - c:e]) and ds.size(i) == e - s + c
    batch = ds.collater([ds[i] for i in (3, 0, 1)])
    assert batch["target"].shape == batch["net_input"]["src_tokens"].shape == (3, L + C)
    # --max-tokens counts the context too
    batches = ds.batch_by_size(np.arange(1, len(ds) - 1), max_tokens=3 * (L + C) - 1)  # 3 rows without context
    assert max(len(b) for b in batches) == 2 and sum(len(b) for b in batches) == len(ds) - 2
    parser = options.get_training_parser()
    bad = options.parse_args_and_arch(parser, [str(lm / "bin"), "--user-dir", USER_DIR, "--task",
                                               "language_modeling_context", "--sample-break-mode", "eos",
                                               "--block-context", str(C), "--arch", "hmm_lm"])
    with pytest.raises(ValueError, match="--block-context needs --sample-break-mode none"):
        tasks.setup_task(bad).load_dataset("valid")


@pytest.mark.slow
def test_block_context_training_validates_like_eval_lm_context_window(lm):
    """Training and validation with --block-context C score log p(block | C previous tokens), which is what
    stock fairseq-eval-lm --context-window C reports (and differs from the blocks restarted)."""
    L, C, save = 24, 3, lm / "context"
    proc = fairseq("train", str(lm / "bin"), "--user-dir", USER_DIR, *COMMON, "--task", "language_modeling_context",
                   "--block-context", str(C), "--sample-break-mode", "none", "--tokens-per-sample", str(L),
                   "--brown-clusters", str(lm / "raw" / "brown4.txt"), "--states-per-cluster", "4",
                   "--state-dropout", "0.5", "--max-epoch", "2", "--save-dir", str(save))
    losses = valid_losses(proc)
    assert len(losses) == 2 and losses[-1] < losses[0], losses
    ckpt = save / "checkpoint_last.pt"
    window, _, _ = eval_lm(lm, ckpt, "--sample-break-mode", "none", "--tokens-per-sample", str(L + C),
                           "--context-window", str(C))
    restart, _, _ = eval_lm(lm, ckpt, "--sample-break-mode", "none", "--tokens-per-sample", str(L))
    assert abs(window - losses[-1]) < 2e-3 and restart - window > 1e-2, (losses, window, restart)
    print(f"--block-context {C}: valid {losses[-1]:.3f}, eval-lm window {window:.4f}, restarted {restart:.4f}")


@pytest.mark.slow
def test_vlhmm_tagger_trains_and_tags(lm):
    proc = fairseq("train", str(lm), "--user-dir", USER_DIR, "--task", "sequence_tagging", "--train-file",
                   str(lm / "toy.conll"), "--tag-column", "1", "--lowercase", "--arch", "vlhmm_tagger",
                   "--criterion", "vlhmm_tagging", "--brown-clusters", str(lm / "raw" / "brown4.txt"),
                   "--states-per-cluster", "4", "--state-dropout", "0", "--hmm-embed-dim", "16",
                   "--optimizer", "adam", "--lr", "0.05", "--batch-size", "32", "--max-epoch", "3", "--save-dir", str(lm / "tagger"), "--no-save",
                   "--seed", "1", "--num-workers", "0", "--no-progress-bar", "--log-format", "simple",
                   "--required-batch-size-multiple", "1")
    acc = [float(x) for x in re.findall(r"valid on 'valid' subset .*?\| accuracy ([\d.]+)", proc.stderr + proc.stdout)]
    # every word of the grammar has one tag (numbers unseen in training are <unk>); 84.4 measured after 3 epochs
    assert len(acc) == 3 and acc[-1] > 80 and acc[-1] > acc[0], acc


def test_bad_options_are_refused(tmp_path):
    from argparse import Namespace

    from fairseq.data import Dictionary

    from hmm_nmt.models.hmm_lm import base_hmm_lm, build_constraints

    d = Dictionary()
    for w in ("a", "b", "c"):
        d.add_symbol(w)
    (tmp_path / "c.txt").write_text("a 0\nb 1\nc 1\n")

    def args(**kw):
        a = Namespace(**kw)
        base_hmm_lm(a)
        return a

    with pytest.raises(FileNotFoundError, match="missing.txt"):
        build_constraints(args(brown_clusters=str(tmp_path / "missing.txt")), d)
    with pytest.raises(ValueError, match="--num-states 7"):
        build_constraints(args(brown_clusters=str(tmp_path / "c.txt"), num_states=7), d)
    with pytest.raises(ValueError, match="needs --brown-clusters"):
        build_constraints(args(), d)
    c = build_constraints(args(brown_clusters=str(tmp_path / "c.txt"), states_per_cluster=3), d)
    assert c.num_states == 6 and c.word_group[d.pad()] == -1 and c.word_group[d.bos()] == -1
    c = build_constraints(args(constraint="uniform", num_clusters=2, num_states=8), d)
    assert c.support.shape == (len(d) - 2, 4) and not c.blocked
