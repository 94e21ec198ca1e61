"""transformer_dhmm --target-context both: the lexicon and the alignment of position i see every target word but
e_i (and the past-only model none after i); the DP over it is exact, its posteriors are autograd's, and
decoding is refused with a message. Both orders, softmax and separable lexicons."""
import pytest
import torch
from dhmm_testlib import batch, brute_force_loglik, build, check_posteriors_autograd_equal_explicit, full_lexicon

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.models.dhmm_decoder import NO_DECODING

ORDERS = {0: "transformer_dhmm", 1: "transformer_dhmm_first_order"}
CASES = [(o, lex, layers) for o in ORDERS for lex in ("softmax", "separable") for layers in (1, 2)]


def build_ctx(order, lexicon="softmax", context="both", layers=2):
    m, d = build(ORDERS[order], layers=layers, extra=["--target-context", context, "--lexicon", lexicon])
    return m.double().eval(), d


def per_position(m, src, lens, prev):
    """What position i of the model computes: the lexicon (B, I, J, V) and the alignment rows (zero order:
    p(j | i); first order: the initial row and the transitions into i)."""
    x, extra = m(src, lens, prev, features_only=True)
    lex = full_lexicon(m, x, extra)
    if m.decoder.first_order is None:
        return lex, extra["log_align"]
    return lex, extra["log_trans"]


@pytest.mark.parametrize("order,lexicon,layers", CASES)
def test_position_i_never_sees_its_own_word_and_sees_the_others(order, lexicon, layers):
    m, d = build_ctx(order, lexicon, layers=layers)
    past, _ = build_ctx(order, lexicon, context="past", layers=layers)
    src, lens, prev, _ = batch(d)
    other = d.index("w0")
    for i in range(3):  # a real word of sentence 0 at target position i is prev[:, i + 1]
        changed = prev.clone()
        assert changed[0, i + 1] != other
        changed[0, i + 1] = other
        for model, sees_future in ((m, True), (past, False)):
            lex, align = per_position(model, src, lens, prev)
            lex2, align2 = per_position(model, src, lens, changed)
            torch.testing.assert_close(lex2[0, i], lex[0, i], rtol=0, atol=1e-12)  # e_i itself: never
            torch.testing.assert_close(align2[0, i], align[0, i], rtol=0, atol=1e-12)
            torch.testing.assert_close(lex2[1], lex[1], rtol=0, atol=1e-12)  # another sentence: never
            assert (lex2[0, i + 1] - lex[0, i + 1]).abs().max() > 1e-6  # the past: both models
            if i > 0:
                future = (lex2[0, i - 1] - lex[0, i - 1]).abs().max() > 1e-6
                assert future == sees_future  # the future: only --target-context both
                assert ((align2[0, i - 1] - align[0, i - 1]).abs().max() > 1e-6) == sees_future


@pytest.mark.parametrize("order,lexicon,layers", CASES[::2])
def test_dp_likelihood_equals_brute_force_over_alignments(order, lexicon, layers):
    m, d = build_ctx(order, lexicon, layers=layers)
    src, lens, prev, target = batch(d)
    prev, target = prev[:, :4], target[:, :4]  # 4^4 + 2^2 alignment sequences
    loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    torch.testing.assert_close(-loss, brute_force_loglik(m, src, lens, prev, target).sum())


@pytest.mark.parametrize("order", ORDERS)
def test_posteriors_autograd_equal_explicit(order):
    m, d = build_ctx(order)
    check_posteriors_autograd_equal_explicit(m, d)


def test_training_gradients_reach_the_right_to_left_layers():
    m, d = build_ctx(1)
    m.train()
    src, lens, prev, target = batch(d)
    loss, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1)
    loss.backward()
    grads = [p.grad for p in m.decoder.future_layers.parameters()]
    assert grads and all(g is not None for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_decoding_is_refused_with_a_message():
    m, d = build_ctx(0)
    src, lens, prev, _ = batch(d)
    enc = m.encoder(src, lens)
    with pytest.raises(ValueError, match="cannot decode"):
        m.decoder(prev[:, :1], encoder_out=enc, incremental_state={})
    assert "--target-context past" in NO_DECODING


def test_past_is_the_default_and_old_arguments_load_as_past():
    import argparse

    from hmm_nmt.models.transformer_dhmm import _dhmm_defaults

    m, _ = build(ORDERS[0])
    assert m.decoder.target_context == "past" and not hasattr(m.decoder, "future_layers")
    old = argparse.Namespace()  # saved arguments from before the option
    _dhmm_defaults(old)
    assert old.target_context == "past"
    with pytest.raises(ValueError, match="needs --dhmm-layers last"):
        build(ORDERS[0], extra=["--target-context", "both", "--dhmm-layers", "all"])
