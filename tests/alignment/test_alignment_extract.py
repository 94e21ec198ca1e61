"""Extraction of word alignments from trained checkpoints (hmm-nmt-align, heat map --path mode, scripts).

Tiny models are trained on the toy corpus through the real fairseq-train CLI: transformer_dhmm of order 0
and 1, a plain transformer (2 decoder layers), a reverse-direction order-0 model and an order-0 model on
BPE-segmented text. Oracles:

* AER against the toy generator's gold must beat the expected AER of a uniformly random link per target
  word (computed exactly below) by a clear margin;
* fairseq's own ``fairseq-generate --score-reference --print-alignment`` (argmax of ``attn`` over the real
  source tokens, sentence by sentence) must give exactly our ``alignment`` links, and for the plain
  transformer (whose ``attn`` is the last layer's head mean) our ``attention --layers 2`` links;
* the attention average is recomputed from forward hooks on every layer's cross-attention;
* matrices of batched, padded extraction equal a model call on the single unpadded sentence;
* BPE links mapped to words must fit the word-level sentences and still beat random.
"""
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_alignment_heatmap import assert_png

from hmm_nmt_align.base.symmetrize import symmetrize
from hmm_nmt_align.io import read_pharaoh, read_tokens
from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_DIR = os.path.join(ROOT, "hmm_nmt")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
N_TEST = 100
SMALL = ["--encoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--share-all-embeddings"]


def run(*args, check=True, timeout=900, **kw):
    proc = subprocess.run([sys.executable, *args], env=ENV, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[:3]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def align_cli(*args, check=True):
    return run("-m", "hmm_nmt_align.extract", "--no-progress", *args, check=check)


def preprocess(raw, dest, *extra):
    run("-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", f"{raw}/train",
        "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir", str(dest), "--joined-dictionary",
        "--workers", "1", *extra)


def train(data, save, arch, *extra, epochs=5):
    # the direct HMMs keep the softmax lexicon these tests were written with: at these sizes and 5 epochs the
    # separable one does not yet end every stock hypothesis before test_hub_align_and_translate's length cap
    crit = (["--criterion", "dhmm_label_smoothed_cross_entropy", "--lexicon", "softmax"] if arch == "transformer_dhmm"
            else ["--criterion", "label_smoothed_cross_entropy"])
    run("-m", "fairseq_cli.train", str(data), "--user-dir", USER_DIR, "--arch", arch, *SMALL, *crit,
        "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "20", "--max-tokens", "400", "--max-epoch", str(epochs), "--save-dir", str(save),
        "--no-epoch-checkpoints", "--no-last-checkpoints", "--no-save-optimizer-state", "--seed", "1",
        "--num-workers", "0", "--no-progress-bar", "--log-format", "simple", *extra)
    return save / "checkpoint_best.pt"


def random_aer(gold, src_lens, tgt_lens):
    """Expected AER of linking every target word to a uniformly random source word (all gold links sure).

    A sure link (i, j) is hit with probability 1/J; |A| is the number of target words.
    E|A & S| / (|A| + |S|) is used in place of E[...] of the ratio (the denominator is fixed here).
    """
    hits = sum(len(g.sure) / n_src for g, n_src in zip(gold, src_lens))
    n_links = sum(len(g.sure) for g in gold)
    return 100 * (1 - 2 * hits / (sum(tgt_lens) + n_links))


def aer(gold, hyp):
    from hmm_nmt_align.aer import corpus_scores

    return 100 * corpus_scores(gold, hyp)["AER"]


# ------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    work = tmp_path_factory.mktemp("extract")
    raw = work / "raw"
    run(os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw), "--train", "800", "--valid", "60",
        "--test", str(N_TEST))
    preprocess(raw, work / "bin")
    src, tgt = read_tokens(str(raw / "test.src")), read_tokens(str(raw / "test.tgt"))
    src_lens, tgt_lens = [len(s) for s in src], [len(t) for t in tgt]
    gold = read_pharaoh(str(raw / "test.align"), src_lens=src_lens, tgt_lens=tgt_lens)
    return {"work": work, "raw": raw, "bin": work / "bin", "gold": gold, "src_lens": src_lens,
            "tgt_lens": tgt_lens, "random": random_aer(gold, src_lens, tgt_lens)}


_MODELS = {}


@pytest.fixture(scope="module")
def model(toy):
    """model(name) -> checkpoint path; each model is trained once, on first use."""

    def get(name):
        if name not in _MODELS:
            work = toy["work"]
            if name in ("dhmm0", "dhmm1"):
                ck = train(toy["bin"], work / name, "transformer_dhmm", "--decoder-layers", "1",
                           "--alignment-order", name[-1])
            elif name == "rev0":
                ck = train(toy["bin"], work / name, "transformer_dhmm", "--decoder-layers", "1",
                           "--source-lang", "tgt", "--target-lang", "src")
            elif name == "transformer":
                ck = train(toy["bin"], work / name, "transformer", "--decoder-layers", "2")
            else:
                raise KeyError(name)
            _MODELS[name] = ck
        return _MODELS[name]

    yield get
    _MODELS.clear()


def extract(toy, ckpt, method, *extra, name=None, cli=True):
    """hmm-nmt-align as a subprocess (the real command line), or its ``main`` in this process (faster)."""
    out = toy["work"] / (name or f"{os.path.basename(os.path.dirname(ckpt))}.{method}.align")
    args = ["--path", str(ckpt), "--data", str(toy["bin"]), "--subset", "test", "--method", method, *extra,
            "-o", str(out)]
    if cli:
        proc = align_cli(*args)
        assert "Traceback" not in proc.stderr
    else:
        from hmm_nmt_align.extract import main

        assert main(args + ["--no-progress"]) == 0
    # word-level output: one line per test sentence, every index inside its sentence (else this raises)
    hyp = read_pharaoh(str(out), src_lens=toy["src_lens"], tgt_lens=toy["tgt_lens"])
    return out, hyp


def score_reference_links(toy, ckpt, data=None):
    """fairseq-generate --score-reference --print-alignment: {sample id: set of (src, tgt) links}."""
    proc = run("-m", "fairseq_cli.generate", str(data or toy["bin"]), "--user-dir", USER_DIR, "--path", str(ckpt),
               "--score-reference", "--print-alignment", "--batch-size", "16", "--gen-subset", "test",
               # ve-fairseq 0.12.3 drops a last batch whose size is not a multiple of this (default 8)
               "--required-batch-size-multiple", "1")
    out = {}
    for sid, links in re.findall(r"^A-(\d+)\t(.*)$", proc.stdout, re.M):
        out[int(sid)] = {tuple(map(int, t.split("-"))) for t in links.split()}
    assert len(out) == N_TEST
    return out


# ------------------------------------------------------------------------------------------- AER
@pytest.mark.slow
@pytest.mark.parametrize("name", ["dhmm0", "dhmm1"])
def test_dhmm_alignment_and_posterior_beat_random(toy, model, name):
    ckpt = model(name)
    scores = {}
    for method in ("alignment", "posterior"):
        # the real command line for one method per order (alignment for order 0, posterior for order 1)
        _, hyp = extract(toy, ckpt, method, cli=(method == "alignment") == (name == "dhmm0"))
        # default: the argmax is over real source words, so every target word has exactly one link
        for h, n_tgt in zip(hyp, toy["tgt_lens"]):
            assert sorted(j for _, j in h.links) == list(range(n_tgt))
        scores[method] = aer(toy["gold"], hyp)
    # uniform random: about 90 AER on this test set; the tiny models reach about 40-65
    assert toy["random"] > 85, toy["random"]
    for method, value in scores.items():
        assert value < toy["random"] - 20, (name, method, value, toy["random"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dhmm0", "dhmm1"])
def test_alignment_equals_fairseq_score_reference(toy, model, name):
    """Our batching, padding removal, EOS handling and corpus order against fairseq's own scorer."""
    ckpt = model(name)
    out, hyp = extract(toy, ckpt, "alignment", "--batch-size", "7", name=f"{name}.b7.align",
                       cli=False)
    ref = score_reference_links(toy, ckpt)
    assert [set(h.links) for h in hyp] == [ref[k] for k in range(N_TEST)]


@pytest.mark.slow
def test_attention_baseline(toy, model):
    ckpt = model("transformer")
    _, default = extract(toy, ckpt, "attention")
    _, both = extract(toy, ckpt, "attention", "--layers", "1,2", name="t.12.align", cli=False)
    assert [h.links for h in default] == [h.links for h in both]  # default = the last two layers
    _, last = extract(toy, ckpt, "attention", "--layers", "2", name="t.2.align", cli=False)
    assert [h.links for h in last] != [h.links for h in default]  # the layer choice matters
    value = aer(toy["gold"], default)
    assert value < toy["random"] - 8, (value, toy["random"])


# ------------------------------------------------------------------------------------------- matrices
def _load(toy, ckpt):
    from hmm_nmt_align import extract as ex

    torch.set_num_threads(1)
    return ex.load_model(str(ckpt), str(toy["bin"]), cpu=True)


def _single(task, sid):
    """One unpadded sentence pair as a batch of one (what fairseq's collater gives for a batch of one)."""
    ds = task.dataset("test")
    return ds.collater([ds[sid]])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dhmm0", "dhmm1"])
def test_batched_matrices_equal_single_sentence_model_calls(toy, model, name):
    from hmm_nmt_align import extract as ex

    m, task = _load(toy, model(name))
    methods = ("alignment", "posterior")
    items = {it.id: it for it in ex.extract_matrices(m, task, "test", None, methods, transition=(name == "dhmm1"),
                                                     batch_size=16)}
    assert sorted(items) == list(range(N_TEST))
    ds = task.dataset("test")
    longest = int(np.argmax(ds.src_sizes))
    for sid in sorted({0, 1, 37, longest, int(np.argmin(ds.src_sizes))}):
        s = _single(task, sid)
        net = s["net_input"]
        with torch.no_grad():
            post = m.alignment_posteriors(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], s["target"])
            _, extra = m(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])
        it = items[sid]
        assert it.src_tokens == [task.source_dictionary[t] for t in net["src_tokens"][0].tolist()]
        assert it.tgt_tokens == [task.target_dictionary[t] for t in s["target"][0].tolist()]
        assert it.src_tokens[-1] == it.tgt_tokens[-1] == "</s>"
        # float32 probabilities (<= 1) from a batched extraction vs one sentence alone: the paths differ by
        # rounding of a few float32 ulps (~1e-7 each); 1e-5 is ~100x that and far below any real error
        np.testing.assert_allclose(it.matrices["posterior"], post[0].numpy(), atol=1e-5)
        np.testing.assert_allclose(it.matrices["alignment"], extra["attn"][0][0].numpy(), atol=1e-5)
        np.testing.assert_allclose(it.matrices["posterior"].sum(1), 1.0, atol=1e-4)
        np.testing.assert_allclose(it.matrices["alignment"].sum(1), 1.0, atol=1e-4)
        if name == "dhmm1":
            np.testing.assert_allclose(it.transition, extra["log_trans"][0].exp().numpy(), atol=1e-5)
            np.testing.assert_allclose(it.transition.sum(-1), 1.0, atol=1e-4)
        else:
            assert it.transition is None
    # the links do not depend on the batching
    a = ex.align_subset(m, task, "test", "posterior", batch_size=1)[0]
    b = ex.align_subset(m, task, "test", "posterior", batch_size=None, max_tokens=60)[0]
    assert a == b == [ex.word_links(ex.argmax_links(items[k].matrices["posterior"]), [], []) for k in range(N_TEST)]
    # --null-eos: a target word loses its link exactly where the EOS column is its argmax
    null = ex.align_subset(m, task, "test", "posterior", null_eos=True)[0]
    for k in range(N_TEST):
        post = items[k].matrices["posterior"][:-1]  # without the target EOS row
        eos_wins = {i for i in range(len(post)) if post[i].argmax() == post.shape[1] - 1}
        assert set(null[k]) == {(j, i) for j, i in a[k] if i not in eos_wins}


@pytest.mark.slow
def test_attention_matrix_is_mean_of_hooked_cross_attention(toy, model):
    """Independent of fairseq's ``alignment_layer``: capture each layer's head-averaged weights by hooks."""
    from hmm_nmt_align import extract as ex

    m, task = _load(toy, model("transformer"))
    assert ex.default_layers(m) == [1, 2]
    items = {it.id: it for it in ex.extract_matrices(m, task, "test", [3, 11, 50], ("attention",), [1, 2])}
    for sid, it in items.items():
        s = _single(task, sid)
        net = s["net_input"]
        captured = []
        # eval mode: every layer returns its weights, averaged over heads, except fairseq's alignment layer
        # (the last by default), which returns them per head (H, B, T, S)
        hooks = [layer.encoder_attn.register_forward_hook(
            lambda mod, inp, out: captured.append(out[1] if out[1].dim() == 3 else out[1].mean(0)))
            for layer in m.decoder.layers]
        try:
            with torch.no_grad():
                m(**net)
        finally:
            for h in hooks:
                h.remove()
        assert len(captured) == 2 and all(c.shape == (1, len(it.tgt_tokens), len(it.src_tokens)) for c in captured)
        want = torch.stack(captured).mean(0)[0].numpy()
        np.testing.assert_allclose(it.matrices["attention"], want, atol=1e-5)
        np.testing.assert_allclose(it.matrices["attention"].sum(1), 1.0, atol=1e-4)


def test_argmax_links_and_eos():
    from hmm_nmt_align.extract import argmax_links

    m = np.array([[0.1, 0.2, 0.7],    # EOS column wins
                  [0.5, 0.3, 0.2],
                  [0.2, 0.2, 0.6],    # EOS wins; tie between the real words -> the first
                  [0.1, 0.1, 0.8]])   # target EOS row
    assert argmax_links(m) == [(1, 0), (0, 1), (0, 2)]
    assert argmax_links(m, null_eos=True) == [(0, 1)]
    assert argmax_links(m, src_eos=False, tgt_eos=False) == [(2, 0), (0, 1), (2, 2), (2, 3)]
    assert argmax_links(np.zeros((1, 3))) == []  # only the target EOS
    assert argmax_links(np.ones((3, 1))) == []  # only the source EOS


# ------------------------------------------------------------------------------------------- subwords
def _spm_style(line):
    """The same segmentation written SentencePiece-style: ``ka@@ mu`` -> ``▁ka mu``."""
    out, new_word = [], True
    for piece in line.split():
        cont = piece.endswith("@@")
        piece = piece[:-2] if cont else piece
        out.append(("\u2581" + piece) if new_word else piece)
        new_word = not cont
    return " ".join(out)


@pytest.fixture(scope="module")
def bpe_toy(toy):
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    raw, work = toy["raw"], toy["work"]
    seg = work / "bpe"
    seg.mkdir()
    codes = io.StringIO()
    text = (raw / "train.src").read_text() + (raw / "train.tgt").read_text()
    learn_bpe(io.StringIO(text), codes, 120)
    (seg / "codes").write_text(codes.getvalue())
    bpe = BPE(io.StringIO(codes.getvalue()))
    for split in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            lines = (raw / f"{split}.{lang}").read_text().splitlines()
            (seg / f"{split}.{lang}").write_text("".join(bpe.process_line(l) + "\n" for l in lines))
            if split == "test":
                (seg / f"spm.{lang}").write_text("".join(_spm_style(bpe.process_line(l)) + "\n" for l in lines))
    preprocess(seg, work / "bpe-bin")
    ckpt = train(work / "bpe-bin", work / "bpe-model", "transformer_dhmm", "--decoder-layers", "1", epochs=4)
    return {"seg": seg, "bin": work / "bpe-bin", "ckpt": ckpt, "codes": seg / "codes"}


@pytest.mark.slow
def test_bpe_links_map_to_words(toy, bpe_toy, capsys):
    seg = bpe_toy["seg"]
    pieces = read_tokens(str(seg / "test.src"))
    n_pieces, n_words = sum(map(len, pieces)), sum(toy["src_lens"])
    assert n_pieces > 1.3 * n_words  # the segmentation really splits words
    out = toy["work"] / "bpe.align"
    align_cli("--path", str(bpe_toy["ckpt"]), "--data", str(bpe_toy["bin"]), "--method", "posterior", "--bpe",
              "subword_nmt", "-o", str(out))
    # word-level indices: every link inside the *word* sentence (else read_pharaoh raises)
    hyp = read_pharaoh(str(out), src_lens=toy["src_lens"], tgt_lens=toy["tgt_lens"])
    # every target word has a piece, every piece a link: each target word is linked
    assert all({j for _, j in h.links} == set(range(n)) for h, n in zip(hyp, toy["tgt_lens"]))
    assert aer(toy["gold"], hyp) < toy["random"] - 15, (aer(toy["gold"], hyp), toy["random"])
    # the same pieces written SentencePiece-style, given with --pieces: the same word links
    from hmm_nmt_align.extract import main

    common = ["--path", str(bpe_toy["ckpt"]), "--data", str(bpe_toy["bin"]), "--method", "posterior", "--no-progress"]
    out2 = toy["work"] / "spm.align"
    assert main(common + ["--bpe", "sentencepiece", "--pieces", str(seg / "spm"), "-o", str(out2)]) == 0
    assert out2.read_text() == out.read_text()
    # without the mapping, links are piece indices: out of range for the word sentences
    out3 = toy["work"] / "pieces.align"
    assert main(common + ["-o", str(out3)]) == 0
    with pytest.raises(Exception, match="out of range"):
        read_pharaoh(str(out3), src_lens=toy["src_lens"], tgt_lens=toy["tgt_lens"])
    # --pieces that are not the binarized text: refused, nothing written
    capsys.readouterr()
    out4 = toy["work"] / "bad.align"
    assert main(common + ["--bpe", "subword_nmt", "--pieces", str(toy["raw"] / "test"), "-o", str(out4)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--pieces" in err and "test.src:1:" in err, err
    assert _no_output(out4)


# ------------------------------------------------------------------------------------------- scripts
@pytest.mark.slow
def test_align_bidirectional_script(toy, model):
    fwd, rev = model("dhmm0"), model("rev0")
    out = toy["work"] / "bidir"
    script = os.path.join(ROOT, "scripts", "align_bidirectional.sh")
    proc = subprocess.run(["bash", script, "--fwd", str(fwd), "--rev", str(rev), "--data", str(toy["bin"]),
                           "--gold", str(toy["raw"] / "test.align"), "--method", "posterior",
                           "--src", str(toy["raw"] / "test.src"), "--tgt", str(toy["raw"] / "test.tgt"),
                           "--out-dir", str(out), "--", "--no-progress"],
                          env=dict(ENV, PYTHON=sys.executable), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = dict(re.findall(r"^(\S+)\s+AER=([\d.]+) ", proc.stdout, re.M))
    assert list(rows) == ["posterior.fwd", "posterior.rev", "posterior.grow-diag"], proc.stdout
    lens = dict(src_lens=toy["src_lens"], tgt_lens=toy["tgt_lens"])
    f, r, s = (read_pharaoh(str(out / n), **lens) for n in ("fwd.align", "rev.align", "grow-diag.align"))
    # fwd is exactly hmm-nmt-align's output for the forward model
    assert (out / "fwd.align").read_text() == extract(toy, fwd, "posterior", name="bidir.fwd.ref",
                                                         cli=False)[0].read_text()
    # rev is source-target: every *source* word has exactly one link (the reverse model aligns each of them)
    assert all(sorted(i for i, _ in a.links) == list(range(n)) for a, n in zip(r, toy["src_lens"]))
    # the merged file is our grow-diag of the two, and the printed AERs are the files' AERs
    assert [sorted(a.sure) for a in s] == [sorted(symmetrize(a.sure, b.sure, "grow-diag")) for a, b in zip(f, r)]
    for name, al in (("fwd", f), ("rev", r), ("grow-diag", s)):
        assert abs(float(rows[f"posterior.{name}"]) - aer(toy["gold"], al)) < 0.006
        assert aer(toy["gold"], al) < toy["random"] - 20
    bad = subprocess.run(["bash", script, "--fwd", str(fwd), "--rev", str(rev), "--data", str(toy["bin"]),
                          "--heuristic", "grow"], env=ENV, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--heuristic" in bad.stderr


@pytest.mark.slow
def test_toy_aer_script(toy, model):
    demo = toy["work"] / "demo"
    (demo / "checkpoints").mkdir(parents=True)
    os.symlink(toy["raw"], demo / "raw")
    os.symlink(toy["bin"], demo / "data-bin")
    os.symlink(model("dhmm0"), demo / "checkpoints" / "checkpoint_last.pt")
    proc = subprocess.run(["bash", os.path.join(ROOT, "examples", "toy", "aer.sh"), str(demo)],
                          env=dict(ENV, PYTHON=sys.executable), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    for line, method in zip(lines, ("alignment", "posterior")):
        m = re.fullmatch(rf"AER \({method}\) AER=([\d.]+) P=[\d.]+ R=[\d.]+ F=[\d.]+ sentences={N_TEST}", line)
        assert m, line
        hyp = read_pharaoh(str(demo / f"test.{method}.align"))
        assert float(m.group(1)) == pytest.approx(aer(toy["gold"], hyp), abs=0.006)
    missing = subprocess.run(["bash", os.path.join(ROOT, "examples", "toy", "aer.sh"), str(toy["work"] / "nodemo")],
                             env=ENV, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "not found" in missing.stderr


# ------------------------------------------------------------------------------------------- heat maps
@pytest.mark.slow
def test_heatmap_path_mode(toy, model, tmp_path, capsys):
    ck1, ckt = model("dhmm1"), model("transformer")
    out = tmp_path / "maps1"
    proc = run("-m", "hmm_nmt_align", "heatmap", "--path", str(ck1), "--data", str(toy["bin"]), "--index", "4",
               "--position", "2", "--out-dir", str(out), "--save-npz", str(tmp_path / "m1.npz"))
    assert proc.stdout.split() == [str(out / n) for n in ("alignment.png", "posterior.png", "transition_i2.png")]
    for n in ("alignment.png", "posterior.png", "transition_i2.png"):
        assert_png(out / n)
    # the saved matrices are sentence 4's, and --npz mode renders them again
    from hmm_nmt_align import extract as ex

    m, task = _load(toy, ck1)
    (it,) = ex.extract_matrices(m, task, "test", [4], ("alignment", "posterior"), transition=True)
    with np.load(tmp_path / "m1.npz") as z:
        # the same computation as the saved one (a separate process): identical up to a float32 ulp or two
        np.testing.assert_allclose(z["posterior"], it.matrices["posterior"], atol=1e-6)
        np.testing.assert_allclose(z["transition"], it.transition, atol=1e-6)
        assert z["src_tokens"].tolist() == it.src_tokens and len(it.src_tokens) == toy["src_lens"][4] + 1
    from hmm_nmt_align.heatmap import main as heatmap_main

    capsys.readouterr()
    assert heatmap_main(["--npz", str(tmp_path / "m1.npz"), "--out-dir", str(tmp_path / "again"), "--position", "2"]) == 0
    assert len(capsys.readouterr().out.split()) == 3
    outt = tmp_path / "mapst"
    assert heatmap_main(["--path", str(ckt), "--data", str(toy["bin"]), "--index", "0", "--out-dir", str(outt)]) == 0
    assert capsys.readouterr().out.split() == [str(outt / "attention.png")]
    assert_png(outt / "attention.png")

    for args, msg in ((["--index", str(N_TEST)], "out of range"), (["--index", "4", "--position", "99"], "--position"),
                      (["--index", "4", "--layers", "1"], "--layers")):
        bad_dir = tmp_path / "bad"
        assert heatmap_main(["--path", str(ck1), "--data", str(toy["bin"]), *args, "--out-dir", str(bad_dir)]) == 2
        assert msg in capsys.readouterr().err.strip().splitlines()[-1]
        assert not bad_dir.exists() or os.listdir(bad_dir) == []


# ------------------------------------------------------------------------------------------- errors
def _no_output(path):
    folder = path.parent
    return not path.exists() and not [n for n in os.listdir(folder) if n.startswith("." + path.name)]


@pytest.mark.slow
def test_cli_errors_subprocess(toy, model, tmp_path):
    out = tmp_path / "out.align"
    cases = [
        (["--path", str(tmp_path / "missing.pt"), "--data", str(toy["bin"]), "--method", "alignment"],
         "checkpoint not found"),
        (["--path", str(model("transformer")), "--data", str(toy["bin"]), "--method", "posterior"],
         "--method posterior needs a transformer_dhmm checkpoint"),
    ]
    for args, msg in cases:
        proc = align_cli(*args, "-o", str(out), check=False)
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("hmm-nmt-align: error:") and msg in last, last
        assert "Traceback" not in proc.stderr
        assert _no_output(out)


@pytest.mark.parametrize("case", ["attention_on_dhmm", "bad_subset", "layers_range", "layers_syntax",
                                  "layers_with_dhmm", "bad_data", "no_outdir", "batch_size"])
@pytest.mark.slow
def test_cli_errors_in_process(toy, model, tmp_path, capsys, case):
    from hmm_nmt_align.extract import main

    out = tmp_path / "out.align"
    dhmm, tr = str(model("dhmm0")), str(model("transformer"))
    data = str(toy["bin"])
    args, msg = {
        "attention_on_dhmm": (["--path", dhmm, "--data", data, "--method", "attention"], "plain fairseq transformer"),
        "bad_subset": (["--path", dhmm, "--data", data, "--method", "alignment", "--subset", "nope"], "--subset nope"),
        "layers_range": (["--path", tr, "--data", data, "--method", "attention", "--layers", "2,3"],
                         "layer 3 out of range"),
        "layers_syntax": (["--path", tr, "--data", data, "--method", "attention", "--layers", "five"], "--layers"),
        "layers_with_dhmm": (["--path", dhmm, "--data", data, "--method", "alignment", "--layers", "1"],
                             "--layers applies to --method attention only"),
        "bad_data": (["--path", dhmm, "--data", str(tmp_path), "--method", "alignment"], "cannot load checkpoint"),
        "no_outdir": (["--path", dhmm, "--data", data, "--method", "alignment", "-o", str(tmp_path / "no" / "x")],
                      "does not exist"),
        "batch_size": (["--path", dhmm, "--data", data, "--method", "alignment", "--batch-size", "0"],
                       "--batch-size must be positive"),
    }[case]
    if "-o" not in args:
        args = args + ["-o", str(out)]
    assert main(args + ["--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("hmm-nmt-align: error:") and msg in err, err
    assert _no_output(out)


# ------------------------------------------------------------------------------------------- one encoder pass
@pytest.mark.slow
@pytest.mark.parametrize("name", ["dhmm0", "dhmm1"])
def test_methods_share_one_encoder_pass(toy, model, name):
    from hmm_nmt_align import extract as ex

    m, task = _load(toy, model(name))
    calls = []
    hook = m.encoder.register_forward_hook(lambda *a: calls.append(1))
    try:
        both = {it.id: it for it in ex.extract_matrices(m, task, "test", list(range(20)), ("alignment", "posterior"),
                                                        batch_size=8)}
    finally:
        hook.remove()
    assert len(calls) == 3  # 20 sentences in batches of 8: one encoder call per batch for both methods
    for method in ("alignment", "posterior"):
        alone = {it.id: it for it in ex.extract_matrices(m, task, "test", list(range(20)), (method,), batch_size=8)}
        for k in range(20):
            np.testing.assert_allclose(both[k].matrices[method], alone[k].matrices[method], atol=1e-6)


# ------------------------------------------------------------------------------------------- both directions
@pytest.mark.slow
def test_rev_path_symmetrization(toy, model, tmp_path):
    from hmm_nmt_align import extract as ex
    from hmm_nmt_align.base.links import decide, soft_combine

    fwd, rev = model("dhmm0"), model("rev0")
    lens = dict(src_lens=toy["src_lens"], tgt_lens=toy["tgt_lens"])
    base = ["--path", str(fwd), "--data", str(toy["bin"]), "--method", "posterior", "--rev-path", str(rev),
            "--no-progress"]
    # an atools heuristic: our symmetrize() of the two single-direction files
    out = tmp_path / "gd.align"
    assert ex.main(base + ["--symmetrize", "grow-diag", "-o", str(out)]) == 0
    _, f = extract(toy, fwd, "posterior", cli=False)
    _, r = extract(toy, rev, "posterior", "--reverse", name="rev0.reversed.align", cli=False)
    got = read_pharaoh(str(out), **lens)
    assert [sorted(a.sure) for a in got] == [symmetrize(a.sure, b.sure, "grow-diag") for a, b in zip(f, r)]
    # soft: the product of the two posteriors, thresholded, recomputed from each model's own matrices
    out = tmp_path / "prod.align"
    assert ex.main(base + ["--symmetrize", "prod", "--links", "threshold:0.3", "-o", str(out)]) == 0
    mf, tf = _load(toy, fwd)
    mr, tr = _load(toy, rev)
    pf = {it.id: it.matrices["posterior"] for it in ex.extract_matrices(mf, tf, "test", None, ("posterior",))}
    pr = {it.id: it.matrices["posterior"] for it in ex.extract_matrices(mr, tr, "test", None, ("posterior",))}
    want = [sorted(decide(soft_combine(pf[k][:-1, :-1], pr[k][:-1, :-1], "prod"), "threshold", 0.3))
            for k in range(N_TEST)]
    got = read_pharaoh(str(out), **lens)
    assert [sorted(a.sure) for a in got] == want
    assert aer(toy["gold"], got) < toy["random"] - 20
    # --symmetrize without a reverse model is refused
    assert ex.main(["--path", str(fwd), "--data", str(toy["bin"]), "--method", "posterior", "--symmetrize", "prod",
                    "-o", str(tmp_path / "no.align")]) == 2


# ------------------------------------------------------------------------------------------- raw text
def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.slow
def test_text_input_equals_binarized_and_handles_bad_lines(toy, model, tmp_path, capsys):
    from hmm_nmt_align.extract import main

    ck, raw = model("dhmm0"), toy["raw"]
    ref = tmp_path / "ref.{method}.align"
    assert main(["--path", str(ck), "--data", str(toy["bin"]), "--method", "posterior,alignment", "-o", str(ref),
                 "--no-progress"]) == 0
    # words in, no data-bin given: the dictionaries come from the data-bin recorded in the checkpoint
    out = tmp_path / "text.{method}.align"
    proc = align_cli("--path", str(ck), "--src-text", str(raw / "test.src"), "--tgt-text", str(raw / "test.tgt"),
                     "--bpe", "none", "--method", "posterior,alignment", "-o", str(out))
    assert "Traceback" not in proc.stderr
    for m in ("posterior", "alignment"):
        assert (tmp_path / f"text.{m}.align").read_text() == (tmp_path / f"ref.{m}.align").read_text()
    # both directions from text: the reverse model's dictionaries found the same way; same links as binarized
    both = ["--method", "posterior", "--rev-path", str(model("rev0")), "--symmetrize", "mean", "--links",
            "threshold:0.3", "--no-progress"]
    assert main(["--path", str(ck), "--data", str(toy["bin"]), *both, "-o", str(tmp_path / "both.bin")]) == 0
    assert main(["--path", str(ck), "--src-text", str(raw / "test.src"), "--tgt-text", str(raw / "test.tgt"),
                 "--bpe", "none", *both, "-o", str(tmp_path / "both.text")]) == 0
    assert (tmp_path / "both.text").read_text() == (tmp_path / "both.bin").read_text()
    # an empty side, an over-long line: empty output lines, one error line each, the rest aligned
    src, tgt = (raw / "test.src").read_text().splitlines(), (raw / "test.tgt").read_text().splitlines()
    ref_lines = (tmp_path / "ref.posterior.align").read_text().splitlines()
    long = " ".join(src[0].split() * 80)  # > 1024 positions
    s = _write(tmp_path / "mix.src", [src[0], "", long, src[1], ""])
    t = _write(tmp_path / "mix.tgt", [tgt[0], tgt[5], tgt[6], tgt[1], ""])
    out = tmp_path / "mix.align"
    capsys.readouterr()
    args = ["--path", str(ck), "--src-text", str(s), "--tgt-text", str(t), "--bpe", "none", "--method", "posterior",
            "--no-progress"]
    assert main(args + ["-o", str(out)]) == 0  # docs/input-errors.md: a line too long is a warning, not a failure
    err = capsys.readouterr().err.strip().splitlines()
    assert [e for e in err if "error" in e or "warning" in e] == [
        f"hmm-nmt-align: warning: {s}:3: {len(long.split()) + 1} source / {len(tgt[6].split()) + 1} target pieces "
        "with EOS, longer than the model allows (1024 / 1024 positions); its output line is left empty"]
    assert out.read_text().splitlines() == [ref_lines[0], "", "", ref_lines[1], ""]
    # fatal input errors: exit 2, one line naming the files or flags, no output file
    short = _write(tmp_path / "short.tgt", [tgt[0]])
    for extra, msg in (([], "exactly one of --bpe-codes"),
                       (["--bpe", "none", "--bpe-codes", str(s)], "got --bpe-codes and --bpe none"),
                       (["--bpe", "subword_nmt", "--spm-model", str(s)], "needs --bpe-codes"),
                       (["--bpe", "none", "--links", "threshold:2"], "--links: threshold must be in"),
                       (["--bpe", "none", "--pieces", str(s)], "--pieces is for binarized input"),
                       (["--bpe", "none", "--data", str(tmp_path)], "cannot load checkpoint")):
        bad = tmp_path / "bad.align"
        a = [x for x in args if x not in ("--bpe", "none")]
        assert main(a + extra + ["-o", str(bad)]) == 2
        assert msg in capsys.readouterr().err.strip().splitlines()[-1]
        assert _no_output(bad)
    bad = tmp_path / "bad.align"
    assert main(["--path", str(ck), "--src-text", str(s), "--tgt-text", str(short), "--bpe", "none", "--method",
                 "posterior", "-o", str(bad)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--src-text {s} has 5 lines but --tgt-text {short} has 1" in last, last
    assert _no_output(bad)


def _unk_text(toy):
    """20 test pairs with a word the BPE model never saw on each side (upper case: characters outside
    the dictionary, so every piece of it is <unk>)."""
    src, tgt = (toy["raw"] / "test.src").read_text().splitlines()[:20], \
        (toy["raw"] / "test.tgt").read_text().splitlines()[:20]
    out_s, out_t = [], []
    for k, (s, t) in enumerate(zip(src, tgt)):
        s, t = s.split(), t.split()
        s.insert(k % (len(s) + 1), "QUUX")
        t.insert((3 * k) % (len(t) + 1), "ZORPW")
        out_s.append(" ".join(s))
        out_t.append(" ".join(t))
    return out_s, out_t


@pytest.mark.slow
def test_unknown_pieces_never_leave_the_sentence(toy, bpe_toy, tmp_path):
    """The issue's failure: pieces that are <unk> in the dictionary lose their @@; links must stay inside
    the sentence with the text (raw-text input, --pieces) and without it (binarized input alone)."""
    from fairseq.data import Dictionary
    from subword_nmt.apply_bpe import BPE

    from hmm_nmt_align.base.subword import word_index
    from hmm_nmt_align.extract import main

    src, tgt = _unk_text(toy)
    lens = dict(src_lens=[len(s.split()) for s in src], tgt_lens=[len(t.split()) for t in tgt])
    words = tmp_path / "words"
    words.mkdir()
    _write(words / "unk.src", src)
    _write(words / "unk.tgt", tgt)
    common = ["--path", str(bpe_toy["ckpt"]), "--method", "posterior", "--no-progress"]
    # raw text with the codes: word boundaries from the text
    out_text = tmp_path / "text.align"
    assert main(common + ["--src-text", str(words / "unk.src"), "--tgt-text", str(words / "unk.tgt"),
                          "--bpe-codes", str(bpe_toy["codes"]), "-o", str(out_text)]) == 0
    hyp = read_pharaoh(str(out_text), **lens)  # raises on a link outside its sentence
    assert all({j for _, j in h.links} == set(range(n)) for h, n in zip(hyp, lens["tgt_lens"]))
    # binarized with the model's dictionary, as a user would do
    bpe = BPE(io.StringIO(bpe_toy["codes"].read_text()))
    seg = tmp_path / "seg"
    seg.mkdir()
    _write(seg / "unk.src", [bpe.process_line(x) for x in src])
    _write(seg / "unk.tgt", [bpe.process_line(x) for x in tgt])
    dict_file = str(bpe_toy["bin"] / "dict.src.txt")
    run("-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt", "--testpref",
        str(seg / "unk"), "--destdir", str(tmp_path / "bin"), "--srcdict", dict_file, "--tgtdict", dict_file,
        "--workers", "1")
    d = Dictionary.load(dict_file)
    strings = [[d[d.index(p)] for p in line.split()] for line in (seg / "unk.src").read_text().splitlines()]
    assert sum(line.count("<unk>") for line in strings) >= 60
    # what the dictionary's strings say without the <unk> rule: more words than the sentence has
    assert all(max(word_index(x, "bpe", eos=None)) + 1 > n for x, n in zip(strings, lens["src_lens"]))
    out_bin = tmp_path / "bin.align"
    assert main(common + ["--data", str(tmp_path / "bin"), "--bpe", "subword_nmt", "-o", str(out_bin)]) == 0
    hyp_bin = read_pharaoh(str(out_bin), **lens)  # inside every sentence
    assert all({j for _, j in h.links} <= set(range(n)) for h, n in zip(hyp_bin, lens["tgt_lens"]))
    # with the segmented text, the binarized input gives exactly the raw-text result
    out_pieces = tmp_path / "pieces.align"
    assert main(common + ["--data", str(tmp_path / "bin"), "--bpe", "subword_nmt", "--pieces", str(seg / "unk"),
                          "-o", str(out_pieces)]) == 0
    assert out_pieces.read_text() == out_text.read_text()


# ------------------------------------------------------------------------------------------- hub
@pytest.mark.slow
def test_hub_align_and_translate(toy, model, bpe_toy):
    from hmm_nmt.aligner.hub import AlignmentHubInterface, from_pretrained
    from hmm_nmt.models.transformer_dhmm import TransformerDHMMModel

    torch.set_num_threads(1)
    src = (toy["raw"] / "test.src").read_text().splitlines()[:12]
    tgt = (toy["raw"] / "test.tgt").read_text().splitlines()[:12]
    ck = model("dhmm0")
    kw = dict(data_name_or_path=str(toy["bin"]), source_lang="src", target_lang="tgt")
    hub = TransformerDHMMModel.from_pretrained(str(ck.parent), checkpoint_file=ck.name, **kw)
    assert isinstance(hub, AlignmentHubInterface)
    cli, _ = extract(toy, ck, "posterior", name="hub.ref.align", cli=False)
    got = hub.align(src, tgt)
    assert [a.pharaoh for a in got] == cli.read_text().splitlines()[:12]
    assert got[3].source == src[3].split() and got[3].target == tgt[3].split()
    assert hub.align(src[3], tgt[3]).links == got[3].links
    assert [a.pharaoh for a in hub.align(src, tgt, method="alignment")] == \
        extract(toy, ck, "alignment", name="hub.ref2.align", cli=False)[0].read_text().splitlines()[:12]
    # translations with alignments: fairseq's text, and the forced alignment of each hypothesis
    res = hub.translate(src[:4], beam=2, alignment=True)
    assert [t for t, _ in res] == hub.translate(src[:4], beam=2)
    for s, (text, a) in zip(src, res):
        assert a.target == text.split() and a.links == hub.align(s, text).links
        assert {j for _, j in a.links} == set(range(len(a.target)))
    # the EOS penalty from Python: 0 is the stock search; a huge one lets no hypothesis end before the length cap
    stock = hub.translate(src[:4], beam=2, max_len_a=0, max_len_b=9)
    assert hub.translate(src[:4], beam=2, max_len_a=0, max_len_b=9, eos_penalty=0.0) == stock
    assert max(len(t.split()) for t in stock) < 9
    long = hub.translate(src[:4], beam=2, max_len_a=0, max_len_b=9, eos_penalty=1e3)
    assert [len(t.split()) for t in long] == [9] * 4
    assert [t for t, _ in hub.translate(src[:4], beam=2, max_len_a=0, max_len_b=9, eos_penalty=1e3,
                                        alignment=True)] == long
    assert hub.translate(src[:4], beam=2, max_len_a=0, max_len_b=9) == stock  # the hub's task is left unchanged
    assert "build_generator" not in vars(hub.task)
    # both directions from Python: the CLI's --rev-path result
    rev = model("rev0")
    rhub = TransformerDHMMModel.from_pretrained(str(rev.parent), checkpoint_file=rev.name,
                                                data_name_or_path=str(toy["bin"]), source_lang="tgt", target_lang="src")
    from hmm_nmt_align.extract import main

    out = toy["work"] / "hub.gd.align"
    assert main(["--path", str(ck), "--rev-path", str(rev), "--data", str(toy["bin"]), "--method", "posterior",
                 "--symmetrize", "grow-diag", "--no-progress", "-o", str(out)]) == 0
    assert [a.pharaoh for a in hub.align(src, tgt, reverse=rhub, symmetrize="grow-diag")] == \
        out.read_text().splitlines()[:12]
    # a stock fairseq transformer: attention, as hmm-nmt-align computes it
    tr = model("transformer")
    thub = from_pretrained(str(tr.parent), checkpoint_file=tr.name, **kw)
    assert [a.pharaoh for a in thub.align(src, tgt)] == \
        extract(toy, tr, "attention", name="hub.att.align", cli=False)[0].read_text().splitlines()[:12]
    _, a = thub.translate(src[0], beam=2, alignment=True)
    assert {j for _, j in a.links} == set(range(len(a.target)))
    with pytest.raises(ValueError, match="transformer_dhmm"):
        thub.align(src, tgt, method="posterior")
    assert [a.pharaoh for a in thub.align(src, tgt, null_eos=True)] == \
        extract(toy, tr, "attention", "--null-eos", name="hub.att0.align", cli=False)[0].read_text().splitlines()[:12]
    # BPE: each word segmented alone, so unknown words keep their links inside the sentence
    b = bpe_toy["ckpt"]
    bhub = TransformerDHMMModel.from_pretrained(str(b.parent), checkpoint_file=b.name,
                                                data_name_or_path=str(bpe_toy["bin"]), source_lang="src",
                                                target_lang="tgt", bpe="subword_nmt", bpe_codes=str(bpe_toy["codes"]))
    usrc, utgt = _unk_text(toy)
    for a, s, t in zip(bhub.align(usrc[:6], utgt[:6]), usrc, utgt):
        assert a.source == s.split() and a.target == t.split()
        assert {j for _, j in a.links} == set(range(len(a.target))) and max(i for i, _ in a.links) < len(a.source)


@pytest.mark.slow
def test_align_variants_script(toy, model, tmp_path, capsys):
    """The script behind the variant table of docs/alignment.md scores exactly what hmm-nmt-align writes."""
    import json

    from benchmarks import align_variants
    from hmm_nmt_align.extract import main

    fwd, rev = model("dhmm0"), model("rev0")
    out = tmp_path / "rows.json"
    common = ["--fwd", str(fwd), "--rev", str(rev), "--data", str(toy["bin"]), "--subset", "test",
              "--gold", str(toy["raw"] / "test.align")]
    align_variants.main(common + ["--methods", "posterior", "--thresholds", "0.3", "--json", str(out)])
    printed = capsys.readouterr().out
    both = {(r["direction"], r["symmetrize"], r["links"], r["pool"]): r for r in json.loads(out.read_text())}
    assert len(both) == 2 * (2 * 4 + 5 + 2 * 4)
    # every variant with both pools; the binarized input is word-level, so pooling changes nothing
    for (d, s, links, pool), r in both.items():
        assert r["AER"] == both[(d, s, links, "pieces")]["AER"]
    assert re.search(r"^posterior\s+both\s+mean\s+threshold:0.3\s+AER=\s*\S+ P=\s*\S+ R=\s*\S+ pool=words$",
                     printed, re.M), printed
    rows = {k[:3]: r for k, r in both.items() if k[3] == "pieces"}
    # --rows from an older file (no pool): scored on the pieces, as before
    old = tmp_path / "old.json"
    old.write_text(json.dumps([{k: v for k, v in rows[("both", "prod", "argmax")].items() if k != "pool"}]))
    again = tmp_path / "again.json"
    align_variants.main(common + ["--rows", str(old), "--json", str(again)])
    assert [(r["pool"], r["AER"]) for r in json.loads(again.read_text())] == \
        [("pieces", rows[("both", "prod", "argmax")]["AER"])]
    base = ["--path", str(fwd), "--data", str(toy["bin"]), "--method", "posterior", "--no-progress"]
    for key, extra in ((("fwd", "-", "threshold:0.3"), ["--links", "threshold:0.3"]),
                       (("both", "grow-diag", "argmax"), ["--rev-path", str(rev)]),
                       (("both", "prod", "argmax"), ["--rev-path", str(rev), "--symmetrize", "prod"])):
        f = tmp_path / "x.align"
        assert main(base + extra + ["-o", str(f)]) == 0
        assert rows[key]["AER"] == pytest.approx(aer(toy["gold"], read_pharaoh(str(f))), abs=0.006), key


# ------------------------------------------------------------------------------------------- hmm-nmt-adapt
def _text_loss(ck, raw):
    """Per-token training loss (label-smoothed, eval mode: no dropout) of a checkpoint on the raw test pairs."""
    from fairseq import checkpoint_utils

    from hmm_nmt.aligner.pairs import encode_pair, pair_dataset
    from hmm_nmt_align.adapt import _criterion
    from hmm_nmt_align.base.segment import load_segmenter
    from hmm_nmt_align.loading import load_model

    model, task = load_model(str(ck))
    crit = _criterion(task, checkpoint_utils.load_checkpoint_to_cpu(str(ck)))
    seg = load_segmenter()
    pairs = [encode_pair(s, t, seg, task.source_dictionary, task.target_dictionary)
             for s, t in zip(read_tokens(str(raw / "test.src")), read_tokens(str(raw / "test.tgt")))]
    ds = pair_dataset(pairs, task)
    total, n = 0.0, 0
    with torch.no_grad():
        for sample in task.get_batch_iterator(ds, max_sentences=50).next_epoch_itr(shuffle=False):
            loss, size, _ = crit(model, sample)
            total, n = total + loss.item(), n + size
    return total / n


@pytest.mark.slow
def test_adapt_fine_tunes_on_the_pairs_to_align_and_the_result_aligns(toy, model, tmp_path):
    ck, raw = model("dhmm0"), toy["raw"]
    before = ck.read_bytes()
    out = tmp_path / "adapted.pt"
    args = ["-m", "hmm_nmt_align.adapt", "--path", str(ck), "--src-text", str(raw / "test.src"), "--tgt-text",
            str(raw / "test.tgt"), "--bpe", "none", "--updates", "15", "--lr", "0.003", "--max-tokens", "400",
            "--no-progress"]
    proc = run(*args, "-o", str(out))
    assert "15 updates, training loss" in proc.stderr and "Traceback" not in proc.stderr
    assert ck.read_bytes() == before  # the input checkpoint is left as it was
    state = load_checkpoint_state(out)
    meta = state["adaptation"]
    assert meta["updates"] == 15 and meta["pairs"] == N_TEST and meta["loss_last"] < meta["loss_first"]
    old = load_checkpoint_state(ck)["model"]
    assert old.keys() == state["model"].keys()
    assert any(not torch.equal(old[k], state["model"][k]) for k in old)
    # the training loss on the adapted text, measured here without dropout, went down
    assert _text_loss(out, raw) < _text_loss(ck, raw) - 0.05
    # the adapted checkpoint aligns like any other (the dictionaries come from the recorded data-bin)
    ali = tmp_path / "adapted.align"
    align_cli("--path", str(out), "--src-text", str(raw / "test.src"), "--tgt-text", str(raw / "test.tgt"),
              "--bpe", "none", "--method", "posterior", "-o", str(ali))
    hyp = read_pharaoh(str(ali), src_lens=toy["src_lens"], tgt_lens=toy["tgt_lens"])
    assert len(hyp) == N_TEST and aer(toy["gold"], hyp) < toy["random"]
    # one seed, one trajectory: --updates 5,15 writes the 5-update point and the same 15-update weights
    i = args.index("--updates")
    run(*args[:i + 1], "5,15", *args[i + 2:], "-o", str(tmp_path / "multi.{updates}.pt"))
    again = load_checkpoint_state(tmp_path / "multi.15.pt")["model"]
    assert all(torch.equal(again[k], state["model"][k]) for k in again)
    early = load_checkpoint_state(tmp_path / "multi.5.pt")
    assert early["adaptation"]["updates"] == 5 and any(not torch.equal(early["model"][k], again[k]) for k in again)


@pytest.mark.slow
def test_adapt_bad_input_is_a_clear_error_and_writes_nothing(toy, model, tmp_path):
    from hmm_nmt_align.adapt import main

    ck, raw = model("dhmm0"), toy["raw"]
    short = _write(tmp_path / "short.tgt", ["a b"])
    out = tmp_path / "never.pt"
    base = ["--path", str(ck), "--src-text", str(raw / "test.src"), "--bpe", "none", "--no-progress", "-o", str(out)]
    cases = [(["--tgt-text", str(short), "--updates", "3"], f"has {N_TEST} lines but --tgt-text {short} has 1"),
             (["--tgt-text", str(raw / "test.tgt"), "--updates", "0"], "--updates and --max-tokens must be positive"),
             (["--tgt-text", str(raw / "test.tgt"), "--updates", "2,4"], "the name needs {updates}"),
             (["--tgt-text", str(raw / "test.tgt"), "--updates", "3", "--bpe-codes", str(short)],
              "got --bpe-codes and --bpe none"),
             (["--tgt-text", str(tmp_path / "missing"), "--updates", "3"], "--tgt-text: file not found")]
    for extra, message in cases:
        proc = run("-m", "hmm_nmt_align.adapt", *base, *extra, check=False)
        assert proc.returncode == 2 and message in proc.stderr, (extra, proc.stderr[-500:])
        assert "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob("never.pt.tmp*"))
    assert main(base + ["--tgt-text", str(raw / "test.tgt"), "--updates", "2", "-o",
                        str(tmp_path / "no_dir" / "x.pt")]) == 2
