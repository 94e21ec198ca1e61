"""transformer_dhmm with --lexicon class: the class map, class-level smoothing, gradcheck, checkpoints, options.

What the class lexicon shares with the other cheaper lexicons (a distribution, exact DP, kernel gradients,
decoding) is tested in test_lexicon_kinds.py.
"""
import pytest
import torch
from dhmm_testlib import batch, build, full_lexicon, lexicon_gradcheck_inputs
from dhmm_testlib import zipf_dict as class_dict

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.hmm import direct

F64 = torch.float64
ORDERS = [("transformer_dhmm", 0), ("transformer_dhmm_first_order", 1)]


def build_class(arch, extra=(), **kw):
    return build(arch, dictionary=class_dict(), extra=["--lexicon", "class", "--lexicon-classes", "4"] + list(extra),
                 **kw)


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


@pytest.mark.slow
def test_gradcheck_float64_through_class_kernel_and_dp():
    for arch, _ in ORDERS:
        m, d = build_class(arch, dim=4, layers=1, heads=1, extra=["--lexicon-chunk-size", "1"])
        m = m.double().eval()
        x, extra, target, tgt_mask, row_mask, align = lexicon_gradcheck_inputs(m, d)
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


def test_softmax_when_asked_and_old_args_get_softmax():
    # a new model's default is separable (tests/models/test_lexicon_default.py); softmax is asked for
    m, _ = build(extra=["--lexicon", "softmax"])
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
