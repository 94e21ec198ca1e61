"""transformer_dhmm with --lexicon class: a distribution, exact DP, gradients, chunking, decoding, checkpoints."""
import itertools
import math

import pytest
import torch
from dhmm_testlib import batch, build, check_incremental_equals_full_with_beam_reordering, make_dict
from fairseq.sequence_generator import SequenceGenerator

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.hmm import direct
from hmm_nmt.hmm.class_lexicon import class_log_probs

F64 = torch.float64
ORDERS = [("transformer_dhmm", 0), ("transformer_dhmm_first_order", 1)]


def class_dict():
    """Eleven words with Zipf-like counts, so the frequency classes have different sizes."""
    d = make_dict()
    for k in range(9):
        d.count[d.index(f"w{k}")] = 1000 // (k + 1)
    return d


def build_class(arch, extra=(), **kw):
    return build(arch, dictionary=class_dict(), extra=["--lexicon", "class", "--lexicon-classes", "4"] + list(extra),
                 **kw)


@pytest.fixture(scope="module", params=ORDERS + [(a, o, "topk") for a, o in ORDERS],
                ids=["order0", "order1", "order0-topk2", "order1-topk2"])
def model(request):
    arch, order = request.param[:2]
    m, d = build_class(arch, extra=["--lexicon-topk", "2"] if len(request.param) > 2 else [])
    m.double().eval()
    assert m.decoder.alignment_order == order and m.decoder.lexicon_kind == "class"
    return m, d


def full_lexicon(m, x, extra):
    """log p(v | j) (B, I, J, V) of the class lexicon, materialised."""
    dec = m.decoder
    src_feat, tgt_feat = dec.lexicon_features(x, extra["encoder_out"])
    hidden = torch.relu(src_feat[:, None] + tgt_feat[:, :, None])
    weight, bias = dec.output_weight_bias()
    return class_log_probs(hidden, dec.lex_class_proj.weight, dec.lex_class_proj.bias, weight, bias,
                           dec.class_layout())


def test_classes_are_a_partition_with_a_buffer_and_a_class_layer():
    m, d = build_class("transformer_dhmm")
    dec = m.decoder
    class_of = dec.lexicon_class_of
    assert class_of.shape == (len(d),) and "decoder.lexicon_class_of" in m.state_dict()
    sizes = torch.bincount(class_of)
    assert len(sizes) == dec.lex_class_proj.weight.size(0) <= 4 and (sizes > 0).all()
    # frequency binning: the most frequent word (EOS counts as the most frequent) is in class 0
    assert class_of[d.eos()] == 0 and class_of[d.index("w0")] == 0
    assert int(class_of[d.index("w8")]) == len(sizes) - 1


def test_class_lexicon_sums_to_one_over_the_vocabulary(model):
    m, d = model
    src, lens, prev, _ = batch(d)
    x, extra = m(src, lens, prev, features_only=True)
    lex = full_lexicon(m, x, extra)
    assert lex.dtype == F64
    torch.testing.assert_close(lex.exp().sum(-1), torch.ones(lex.shape[:-1], dtype=F64))


def test_mixture_is_a_distribution(model):
    m, d = model
    src, lens, prev, _ = batch(d)
    log_probs, extra = m(src, lens, prev)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(prev.shape, dtype=F64))


def brute_force_loglik(m, src, lens, prev, target):
    """log p(E | F) summed over every alignment sequence of the real source positions, from the materialised
    class lexicon (zero order: p(j | i); first order: p(j | j') from the model's transition tables)."""
    x, extra = m(src, lens, prev, features_only=True)
    lex = full_lexicon(m, x, extra)
    gold = lex.gather(-1, target[:, :, None, None].expand(-1, -1, lex.size(2), 1)).squeeze(-1)
    first = m.decoder.first_order is not None
    out = []
    for b in range(src.size(0)):
        real = (~extra["src_pad"][b]).nonzero().squeeze(1).tolist()
        n_tgt = int(target[b].ne(m.decoder.padding_idx).sum())
        total = 0.0
        for align in itertools.product(real, repeat=n_tgt):
            lp = 0.0
            for i, j in enumerate(align):
                if not first:
                    lp += extra["log_align"][b, i, j].item()
                elif i == 0:
                    lp += extra["log_init"][b, 0, j].item()
                else:
                    lp += extra["log_trans"][b, i, align[i - 1], j].item()
                lp += gold[b, i, j].item()
            total += math.exp(lp)
        out.append(math.log(total))
    return torch.tensor(out, dtype=F64)


@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_dp_likelihood_equals_brute_force_over_alignments(arch):
    m, d = build_class(arch)
    m.double().eval()
    src, lens, prev, target = batch(d)
    prev, target = prev[:, :4], target[:, :4]  # 4^4 + 2^2 alignment sequences
    loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    torch.testing.assert_close(-loss, brute_force_loglik(m, src, lens, prev, target).sum())


def test_criterion_eps0_equals_nll_of_the_mixture(model):
    m, d = model
    src, lens, prev, target = batch(d)
    log_probs, _ = m(src, lens, prev)
    tgt_mask = target.ne(d.pad())
    brute = -log_probs.gather(-1, target[..., None]).squeeze(-1)[tgt_mask].sum()
    loss, nll, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    torch.testing.assert_close(loss, brute)  # with --lexicon-topk: the pruned model decoding uses
    if not m.decoder.lexicon_topk:
        torch.testing.assert_close(nll, brute)


def test_label_smoothing_is_class_level_and_within_the_gold_class():
    m, d = build_class("transformer_dhmm")
    m.double().eval()
    src, lens, prev, target = batch(d)
    eps = 0.1
    x, extra = m(src, lens, prev, features_only=True)
    dec = m.decoder
    lex = full_lexicon(m, x, extra)
    src_feat, tgt_feat = dec.lexicon_features(x, extra["encoder_out"])
    hidden = torch.relu(src_feat[:, None] + tgt_feat[:, :, None])
    log_class = torch.log_softmax(dec.lex_class_proj(hidden), -1)  # (B, I, J, C)
    class_of = dec.lexicon_class_of
    gold_class = class_of[target]  # (B, I)
    log_word = lex - log_class.gather(-1, class_of.expand(lex.shape))  # log p(v | c(v), j)
    in_class = (class_of[None, None, :] == gold_class[:, :, None]).to(F64)[:, :, None, :]
    mean = log_class.mean(-1) + (log_word * in_class).sum(-1) / in_class.sum(-1)
    gold = lex.gather(-1, target[:, :, None, None].expand(-1, -1, lex.size(2), 1)).squeeze(-1)
    tgt_mask = target.ne(d.pad())
    align = dec.alignment_potentials(extra, None)
    expected = -direct.log_likelihood((1 - eps) * gold + eps * mean, tgt_mask, **align).sum()
    loss, nll, _ = dhmm_loss(m, (x, extra), target, eps)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, -direct.log_likelihood(gold, tgt_mask, **align).sum())
    assert (loss - nll).abs() > 1e-3


def test_chunked_equals_unchunked_values_and_gradients(model):
    m, d = model
    src, lens, prev, target = batch(d)
    results = []
    for chunk in (1, 3, 10 ** 6):
        m.zero_grad()
        m.decoder.lexicon_chunk_size = chunk
        loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]))
    m.decoder.lexicon_chunk_size = 1024
    assert m.decoder.lex_class_proj.weight.grad.abs().max() > 0
    for loss, grads in results[1:]:
        torch.testing.assert_close(loss, results[0][0])
        assert len(grads) == len(results[0][1])
        for a, b in zip(grads, results[0][1]):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_kernel_gradients_equal_the_materialised_lexicon(arch):
    """The chunked class kernel's loss and every parameter gradient equal plain autograd through (B, I, J, V)
    (the exact lexicon: with --lexicon-topk there is no materialised reference)."""
    m, d = build_class(arch)
    m.double().eval()
    src, lens, prev, target = batch(d)
    grads = []
    for materialise in (False, True):
        m.zero_grad()
        x, extra = m(src, lens, prev, features_only=True)
        tgt_mask = target.ne(d.pad())
        if materialise:
            lex = full_lexicon(m, x, extra)
            gold = lex.gather(-1, target[:, :, None, None].expand(-1, -1, lex.size(2), 1)).squeeze(-1)
            loss = -direct.log_likelihood(gold, tgt_mask, **m.decoder.alignment_potentials(extra, None)).sum()
        else:
            loss, _, _ = dhmm_loss(m, (x, extra), target, 0.0)
        loss.backward()
        grads.append([p.grad.clone() for p in m.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_gradcheck_float64_through_class_kernel_and_dp():
    for arch, _ in ORDERS:
        m, d = build_class(arch, dim=4, layers=1, heads=1, extra=["--lexicon-chunk-size", "1"])
        m = m.double().eval()
        src, lens, prev, target = batch(d)
        x, extra = m(src, lens, prev, features_only=True)
        tgt_mask = target.ne(d.pad())
        row_mask = m.decoder.lexicon_rows(extra, tgt_mask)
        align = {k: v.detach() for k, v in m.decoder.alignment_potentials(extra, row_mask).items()}
        dec = m.decoder
        weight, bias = dec.output_weight_bias()

        def f(x, h, cw, cb):
            dec.lex_class_proj.weight, dec.lex_class_proj.bias = cw, cb
            gold, mean = dec.lexicon_scores(x, dict(extra, encoder_out=h), target, row_mask)
            return direct.log_likelihood(0.9 * gold + 0.1 * mean, tgt_mask, **align)

        params = (dec.lex_class_proj.weight, dec.lex_class_proj.bias)
        inputs = (x.detach().requires_grad_(), extra["encoder_out"].detach().requires_grad_(),
                  params[0].detach().clone().requires_grad_(), params[1].detach().clone().requires_grad_())
        try:
            del dec.lex_class_proj.weight, dec.lex_class_proj.bias
            assert torch.autograd.gradcheck(f, inputs)
        finally:
            dec.lex_class_proj.weight, dec.lex_class_proj.bias = params


def test_incremental_decoding_equals_full_forward_with_beam_reordering(model):
    check_incremental_equals_full_with_beam_reordering(*model)


def test_beam_hypothesis_score_equals_forward_likelihood(model):
    m, d = model
    src, lens, _, _ = batch(d)
    gen = SequenceGenerator([m], d, beam_size=3, max_len_b=6)
    hypos = gen.generate([m], {"net_input": {"src_tokens": src, "src_lengths": lens}})
    for b, hyps in enumerate(hypos):
        for hyp in hyps:
            tokens = hyp["tokens"]
            prev = torch.cat([tokens.new_tensor([d.eos()]), tokens[:-1]])[None]
            loss, _, _ = dhmm_loss(m, m(src[b:b + 1], lens[b:b + 1], prev, features_only=True), tokens[None], 0.0)
            torch.testing.assert_close(-loss.float(), hyp["positional_scores"].sum(), atol=1e-4, rtol=1e-5)


def test_posteriors_autograd_equal_explicit(model):
    m, d = model
    src, lens, prev, target = batch(d)
    auto = m.alignment_posteriors(src, lens, prev, target, method="autograd")
    explicit = m.alignment_posteriors(src, lens, prev, target, method="explicit")
    torch.testing.assert_close(auto, explicit)
    torch.testing.assert_close(auto.sum(-1), target.ne(d.pad()).to(F64))


def test_class_map_is_loaded_not_recomputed():
    """A state dict's class map wins over the one a (changed) dictionary would give."""
    m, d = build_class("transformer_dhmm")
    state = {k: v.clone() for k, v in m.state_dict().items()}
    other = class_dict()
    for k in range(9):
        other.count[other.index(f"w{k}")] = 10 * (k + 1)  # reversed frequencies: other classes
    m2, _ = build(dictionary=other, extra=["--lexicon", "class", "--lexicon-classes", "4"])
    assert not torch.equal(m2.decoder.lexicon_class_of, state["decoder.lexicon_class_of"])
    m2.load_state_dict(state)
    assert torch.equal(m2.decoder.lexicon_class_of, state["decoder.lexicon_class_of"])
    layout = m2.decoder.class_layout()
    assert torch.equal(layout.class_of, state["decoder.lexicon_class_of"])


def test_softmax_stays_the_default_and_old_args_get_softmax():
    m, _ = build()
    assert m.decoder.lexicon_kind == "softmax" and not hasattr(m.decoder, "lex_class_proj")
    import argparse

    from hmm_nmt.models.transformer_dhmm import _dhmm_defaults
    old = argparse.Namespace()  # saved args of a checkpoint from before --lexicon
    _dhmm_defaults(old)
    assert old.lexicon == "softmax"


def test_mixture_smoothing_refuses_the_class_lexicon():
    m, d = build_class("transformer_dhmm")
    src, lens, prev, target = batch(d)
    with pytest.raises(ValueError, match="--lexicon softmax"):
        dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1, smoothing="mixture",
                  prev_output_tokens=prev)


@pytest.mark.parametrize("flag, value", [("--lexicon", "hier"), ("--lexicon-classes", "0")])
def test_bad_lexicon_options_are_refused_with_the_flag_named(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build(extra=[flag, value])
    assert exit_info.value.code == 2
    assert flag in capsys.readouterr().err
