"""benchmarks/align_flops.py: the analytic matmul count of the alignment stage equals torch's FlopCounterMode on
the real teacher-forced posterior pass (tiny random models of both alignment orders and with the Eq. 6 block in
every decoder layer; single pairs of several sizes, and a padded batch, which executes B x the count at its
longest pair)."""
import pytest
import torch
from dhmm_testlib import build
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from benchmarks import align_flops as af

# torch's counter has no formula for the CPU flash kernel that scaled_dot_product_attention dispatches to on
# the CPU (fairseq's self-attention): the same formula as its GPU kernels, from the op's own shapes
CPU_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _cpu_flash(q, k, v, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(q, k, v)


MODELS = {"order1": ("transformer_dhmm_first_order", []),
          "order0": ("transformer_dhmm", []),
          "order1-all": ("transformer_dhmm_first_order", ["--dhmm-layers", "all"])}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    arch, extra = MODELS[request.param]
    # unequal widths and FFN sizes, so that a d swapped for another in a formula shows
    m, d = build(arch, dim=16, heads=2, layers=2,
                 extra=["--lexicon", "separable", "--decoder-embed-dim", "24", "--decoder-ffn-embed-dim", "40",
                        "--encoder-layers", "3"] + extra)
    return m.eval(), d


def _batch(d, src_lens, tgt_lens, seed=0):
    """A fairseq batch of random words: source left-padded, target right-padded, EOS last on both."""
    g = torch.Generator().manual_seed(seed)
    pad, eos, first = d.pad(), d.eos(), d.nspecial
    B, J, I = len(src_lens), max(src_lens), max(tgt_lens)
    src, tgt = torch.full((B, J), pad), torch.full((B, I), pad)
    for b, (j, i) in enumerate(zip(src_lens, tgt_lens)):
        src[b, J - j:] = torch.randint(first, len(d), (j,), generator=g)
        tgt[b, :i] = torch.randint(first, len(d), (i,), generator=g)
        src[b, -1], tgt[b, i - 1] = eos, eos
    prev = torch.full_like(tgt, pad)
    for b, i in enumerate(tgt_lens):
        prev[b, 0], prev[b, 1:i] = eos, tgt[b, :i - 1]
    return src, torch.tensor(src_lens), prev, tgt


def _counted(m, d, src_lens, tgt_lens):
    src, lens, prev, tgt = _batch(d, src_lens, tgt_lens)
    with FlopCounterMode(display=False, custom_mapping={CPU_FLASH: _cpu_flash}) as fc:
        post = m.alignment_matrices(src, lens, prev, tgt, methods=["posterior"])["posterior"]
    # the pass is the real one: every real target position's posterior is a distribution over the source
    for b, i in enumerate(tgt_lens):
        torch.testing.assert_close(post[b, :i].sum(-1), torch.ones(i, dtype=post.dtype), rtol=0, atol=1e-4)
    return fc.get_total_flops(), fc.get_flop_counts()


def _by_component(per_module):
    """FlopCounterMode's counts grouped as the analytic ones, by the modules that ran them. A module's count holds
    what ran inside its forward: the first order's source projections run in the decoder's forward but outside
    their parent's (a per-sentence cache), the lexicon's projections after the decoder's forward, and the
    separable lexicon's logits and normalisers and the DP's products in no module (the rest of the total)."""
    def of(name):
        return sum(per_module.get(name, {}).values())

    dec = "TransformerDHMMDecoder"
    layers = sum(of(k) for k in per_module if k.startswith(dec + ".layers.") and k.count(".") == 2)
    lex = of(dec + ".lex_src_proj") + of(dec + ".lex_tgt_proj")
    return {"encoder": of("DHMMEncoder"), "decoder": layers,
            "alignment": of(dec + ".first_order") + sum(of(f"{dec}.first_order.{k}_proj") for k in "kpr"),
            "lexicon projections": lex,
            "lexicon logits and normalisers, DP": of("Global") - of("DHMMEncoder") - of(dec) - lex}


@pytest.mark.parametrize("J, I", [(1, 1), (2, 5), (7, 4), (13, 17)])
def test_the_count_of_one_pair_equals_the_flop_counter(model, J, I):
    m, d = model
    sizes = af.Sizes.of(m)
    counted, per_module = _counted(m, d, [J], [I])
    c = af.pair_flops(sizes, J, I)
    assert af.total(c) == counted
    assert _by_component(per_module) == {
        "encoder": sum(c["encoder"].values()), "decoder": sum(c["decoder"].values()),
        "alignment": sum(c["alignment"].values()), "lexicon projections": c["lexicon"]["projections"],
        "lexicon logits and normalisers, DP": c["lexicon"]["logits"] + c["lexicon"]["normalisers"]
        + sum(c["dp"].values())}
    # the first order's scaled DP: one (1 x J) by (J x J) product per step after the first, forward and backward
    assert c["dp"] == ({"products": 4 * (I - 1) * J * J} if sizes.order == 1 else {})
    assert (sizes.order == 1) == bool(c["alignment"])


def test_a_padded_batch_executes_b_times_the_count_at_its_longest_pair(model):
    m, d = model
    sizes = af.Sizes.of(m)
    src_lens, tgt_lens = [9, 4, 6], [3, 8, 5]
    counted, _ = _counted(m, d, src_lens, tgt_lens)
    needed, executed = af.layout_flops(sizes, [(src_lens, tgt_lens)])
    assert af.total(executed) == counted == 3 * af.total(af.pair_flops(sizes, 9, 8))
    assert af.total(needed) == sum(af.total(af.pair_flops(sizes, j, i)) for j, i in zip(src_lens, tgt_lens))
    assert af.total(needed) < af.total(executed)


def test_the_lexicon_dominates_at_a_real_vocabulary_and_grows_as_the_formulas_say():
    # d = 128, FFN 512, 2 + 2 layers, V = 4,000, first order: the size hmm-nmt-align-corpus trains by default
    s = af.Sizes(d_enc=128, ffn_enc=512, enc_layers=2, d_dec=128, ffn_dec=512, dec_layers=2, dhmm_blocks=1,
                 d_out=128, vocab=4000, order=1, d_align=128)
    c = af.pair_flops(s, 30, 30)
    assert c["lexicon"]["logits"] == 2 * 60 * 128 * 4000 and c["lexicon"]["normalisers"] == 2 * 900 * 4000
    assert max(c, key=lambda k: sum(c[k].values())) == "lexicon"
    assert c["dp"] == {"products": 4 * 29 * 900} and af.elementwise_ops(s, 30, 30)["dp"] == 3 * 30 * 900 + 8 * 900
    # the trilinear alignment scores are the one I x J^2 x d matmul
    assert af.pair_flops(s, 60, 30)["alignment"]["scores"] - c["alignment"]["scores"] == \
        2 * 30 * (60 ** 2 - 30 ** 2) * 128 + 4 * 30 * 30 * 128


def test_the_report_splits_the_executed_matmuls_into_needed_and_padding_and_divides_by_the_limits():
    s = af.Sizes(d_enc=8, ffn_enc=16, enc_layers=1, d_dec=8, ffn_dec=16, dec_layers=1, dhmm_blocks=1, d_out=8,
                 vocab=50, order=1, d_align=8)
    fwd = {"batches": [([3, 5], [4, 2]), ([7], [6])], "model_s": 0.5}
    rev = {"batches": [([4, 2], [3, 5]), ([6], [7])], "model_s": 0.25}
    rates = {k: {"shape": [1, 2, 3, 4], "gflops": g} for k, g in
             (("square", 2.0), ("logits", 1.0), ("normalisers", 0.5), ("ffn", 1.0), ("trilinear", 0.25))}
    cpu = {"cpu": "a CPU", "avx512f": True, "avx512_bf16": False, "amx": False, "logical_cpus": 2}
    doc = af.report(2.0, 1.9, 4, {"fwd": (s, 1, fwd), "rev": (s, 1, rev)}, rates, 1e9, cpu)
    pairs = [(3, 4), (5, 2), (7, 6), (4, 3), (2, 5), (6, 7)]
    needed = sum(af.total(af.pair_flops(s, j, i)) for j, i in pairs)
    executed = 2 * af.total(af.pair_flops(s, 5, 4)) + af.total(af.pair_flops(s, 7, 6)) \
        + 2 * af.total(af.pair_flops(s, 4, 5)) + af.total(af.pair_flops(s, 6, 7))
    assert doc["needed_flops_per_pair"] * 4 == needed and doc["executed_flops_per_pair"] * 4 == executed
    assert sum(sum(p.values()) for p in doc["flops_per_pair"].values()) * 4 == needed
    assert doc["limit_s_per_pair"]["needed at the 2048^3 rate"] == pytest.approx(needed / 2e9 / 4)
    assert doc["ratio"]["executed at the 2048^3 rate"] == pytest.approx(0.5 / (executed / 2e9 / 4))
    # the shapes' rates: each component at its own, so the limit lies above the one at the square's rate
    assert doc["limit_s_per_pair"]["executed at the shapes' rates"] > doc["limit_s_per_pair"]["executed at the 2048^3 rate"]
    assert doc["model_s_per_pair"] == pytest.approx(0.75 / 4)
    text = af.table(doc)
    assert "a CPU (avx512f yes, avx512_bf16 no, amx no)" in text and "| **matmuls executed** |" in text


def test_the_matmul_rate_is_measured_in_the_dtype_asked():
    seen = []
    real_mm = torch.mm

    def mm(x, y, out=None):
        seen.append((x.dtype, y.dtype, out.dtype))
        return real_mm(x, y, out=out)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "mm", mm)
        assert af.matmul_rate(1, 8, 8, 8, min_s=0.0, repeats=1, dtype=torch.bfloat16) > 0
        assert af.matmul_rate(1, 8, 8, 8, min_s=0.0, repeats=1) > 0
    assert set(seen) == {(torch.bfloat16,) * 3, (torch.float32,) * 3}


def test_the_table_names_the_precision():
    s = af.Sizes(d_enc=8, ffn_enc=16, enc_layers=1, d_dec=8, ffn_dec=16, dec_layers=1, dhmm_blocks=1, d_out=8,
                 vocab=50, order=1, d_align=8)
    log = {"batches": [([3], [4])], "model_s": 0.1}
    rates = {k: {"shape": [1, 2, 3, 4], "gflops": 1.0} for k in ("square", "logits", "normalisers", "ffn", "trilinear")}
    cpu = {"cpu": "a CPU", "avx512f": True, "avx512_bf16": True, "amx": False, "logical_cpus": 2}
    doc = af.report(1.0, 1.0, 1, {"fwd": (s, 1, log), "rev": (s, 1, log)}, rates, 1e9, cpu)
    assert "1 thread, float32" in af.table(doc) and "| float32 matmul, 1 thread |" in af.table(doc)
    doc["precision"] = "bf16"
    assert "1 thread, bf16 autocast" in af.table(doc) and "| bf16 matmul, 1 thread |" in af.table(doc)


def test_the_gold_parts_are_scored_from_the_merged_links():
    from hmm_nmt_align.io import parse_pharaoh_line

    gold = [parse_pharaoh_line("0-0 1-1"), parse_pharaoh_line("0-0 1p1"), parse_pharaoh_line("0-1")]
    merged = [[(0, 0), (1, 1)], [(0, 0)], [(0, 0)]]
    doc = af.gold_scores(gold, merged, dev_pairs=1)
    assert doc["dev"] == {"AER": 0.0, "P": 100.0, "R": 100.0}
    # test: 1 of 2 hypothesis links right, 1 of 2 sure links found: AER = 1 - (1 + 1) / (2 + 2)
    assert doc["test"] == {"AER": 50.0, "P": 50.0, "R": 50.0}


def test_the_lines_whose_links_differ_are_counted(tmp_path):
    other = tmp_path / "other.align"
    other.write_text("0-0 1-1\n\n2-2\n")
    assert af.differing_lines([[(1, 1), (0, 0)], [], [(2, 1)]], str(other)) == {"lines": 3, "differing": 1}
    with pytest.raises(SystemExit, match="has 3 lines, this run 2"):
        af.differing_lines([[], []], str(other))
