"""transformer_dhmm: distributions, incremental decoding, criterion, posteriors, parameter count."""
import argparse

import pytest
import torch
from dhmm_testlib import (
    batch,
    build,
    check_beam_scores_equal_likelihood,
    check_incremental_equals_full_with_beam_reordering,
    check_posteriors_autograd_equal_explicit,
    decode_incrementally,
    lexicon_gradcheck_inputs,
    make_dict,
)
from fairseq import options

from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss
from hmm_nmt.hmm import direct

ORDERS = [("transformer_dhmm", 0), ("transformer_dhmm_first_order", 1)]
F64 = torch.float64


# the softmax lexicon's model (tests/models/test_lexicon_kinds.py runs the same checks on the other lexicons)
SOFTMAX = ["--lexicon", "softmax"]
VARIANTS = [(arch, order, SOFTMAX + ["--dhmm-layers", "all"]) for arch, order in ORDERS] + [
    (arch, order, SOFTMAX + ["--dhmm-layers", "last"]) for arch, order in ORDERS]


@pytest.fixture(scope="module", params=VARIANTS, ids=["order0", "order1", "order0-last", "order1-last"])
def model(request):
    # float64: these tests compare different computation paths (incremental vs full, chunked vs not, the
    # criterion vs the decoder's mixture, autograd vs explicit posteriors) that sum the same terms in other
    # orders; in float32 they differ by the CPU's rounding, in float64 by ~1e-12, so the defaults of
    # assert_close (rtol 1e-7, atol 1e-7) hold on any machine and a real bug still shows
    m, d = build(request.param[0], extra=request.param[2])
    m.double().eval()
    assert m.decoder.alignment_order == request.param[1]
    return m, d


def test_mixture_is_a_distribution_and_padding_gets_no_alignment_mass(model):
    m, d = model
    src, lens, prev, _ = batch(d)
    log_probs, extra = m(src, lens, prev)
    assert log_probs.dtype == F64
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(prev.shape, dtype=F64))
    attn = extra["attn"][0]
    torch.testing.assert_close(attn.sum(-1), torch.ones(prev.shape, dtype=F64))
    assert attn[1, :, :2].abs().max() == 0.0  # the two left-pad positions of sentence 2
    normalized = m.get_normalized_probs((log_probs, extra), log_probs=True)
    torch.testing.assert_close(normalized, log_probs.float())  # fairseq's utils.log_softmax returns float32


@pytest.mark.parametrize("lexicon", ["softmax", "separable", "class"])
@pytest.mark.parametrize("order", [0, 1])
def test_beam_step_normalises_again_only_under_a_temperature(order, lexicon, monkeypatch):
    # fairseq's EnsembleModel divides net_output[0] in place by --temperature, then calls
    # get_normalized_probs: at temperature 1 the decoder's log-probs are returned without a second
    # log-softmax over V; at any other temperature they are renormalised as fairseq expects
    import hmm_nmt.models.dhmm_decoder as dec_mod

    m, d = build(ORDERS[order][0], extra=["--lexicon", lexicon])
    m = m.double().eval()
    calls = []
    stock = dec_mod.utils.log_softmax
    monkeypatch.setattr(dec_mod.utils, "log_softmax", lambda x, dim: calls.append(1) or stock(x, dim=dim))
    src, lens, prev, _ = batch(d)
    enc = m.encoder(src, lens)
    for temperature in (1.0, 0.5, 2.0):
        state, steps = {}, []
        for t in range(prev.size(1)):
            calls.clear()
            out, extra = m.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            want = torch.log_softmax(out.detach().float() / temperature, -1)
            got = m.get_normalized_probs((out[:, -1:, :].div_(temperature), extra), log_probs=True)
            assert got.dtype == torch.float32
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
            steps.append(len(calls))
        assert steps == [0] * len(steps) if temperature == 1.0 else steps == [1] * len(steps)
    # a full forward (fairseq's scorer) takes the same path; without the probe the stock normalisation runs
    log_probs, extra = m(src, lens, prev)
    calls.clear()
    torch.testing.assert_close(m.get_normalized_probs((log_probs, extra), log_probs=True), log_probs.float())
    assert calls == []
    del extra["eos_log_prob"]
    torch.testing.assert_close(m.get_normalized_probs((log_probs, extra), log_probs=True), log_probs.float())
    assert calls == [1]


def test_incremental_decoding_equals_full_forward_with_beam_reordering(model):
    check_incremental_equals_full_with_beam_reordering(*model)


def test_criterion_eps0_equals_nll_of_the_mixture(model):
    m, d = model
    src, lens, prev, target = batch(d)
    log_probs, _ = m(src, lens, prev)
    tgt_mask = target.ne(d.pad())
    brute = -log_probs.gather(-1, target[..., None]).squeeze(-1)[tgt_mask].sum()
    loss, nll, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.0)
    torch.testing.assert_close(loss, brute)
    torch.testing.assert_close(nll, brute)


def materialised_lexicon(m, x, extra):
    src_feat, tgt_feat = m.decoder.lexicon_features(x, extra["encoder_out"])
    hidden = torch.relu(src_feat[:, None] + tgt_feat[:, :, None])
    return torch.log_softmax(m.decoder.output_projection(hidden), -1)  # (B, I, J, V)


def test_label_smoothing_is_applied_to_the_lexicon_inside_the_sum(model):
    m, d = model
    src, lens, prev, target = batch(d)
    eps = 0.1
    x, extra = m(src, lens, prev, features_only=True)
    lex = materialised_lexicon(m, x, extra)
    gold = lex.gather(-1, target[:, :, None, None].expand(-1, -1, lex.size(2), 1)).squeeze(-1)
    ls = (1 - eps) * gold + eps * lex.mean(-1)
    tgt_mask = target.ne(d.pad())
    align = m.decoder.alignment_potentials(extra, None)
    expected = -direct.log_likelihood(ls, tgt_mask, **align).sum()
    expected_nll = -direct.log_likelihood(gold, tgt_mask, **align).sum()
    loss, nll, _ = dhmm_loss(m, (x, extra), target, eps)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected_nll)
    assert (loss - nll).abs() > 1e-3  # the smoothing term really enters (its sign depends on the random model)


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
    for loss, grads in results[1:]:
        torch.testing.assert_close(loss, results[0][0])
        for a, b in zip(grads, results[0][1]):
            torch.testing.assert_close(a, b)


def test_gradcheck_float64_through_lexicon_and_dp():
    for arch, _ in ORDERS:
        m, d = build(arch, dim=4, layers=1, heads=1, extra=SOFTMAX + ["--lexicon-chunk-size", "3"])
        m = m.double().eval()
        x, extra, target, tgt_mask, row_mask, align = lexicon_gradcheck_inputs(m, d)

        def f(x, h):
            gold, mean = m.decoder.lexicon_scores(x, dict(extra, encoder_out=h), target, row_mask)
            return direct.log_likelihood(0.9 * gold + 0.1 * mean, tgt_mask, **align)

        inputs = (x.detach().requires_grad_(), extra["encoder_out"].detach().requires_grad_())
        assert torch.autograd.gradcheck(f, inputs)


def test_beam_hypothesis_score_equals_forward_likelihood(model):
    check_beam_scores_equal_likelihood(*model)


def test_posteriors_autograd_equal_explicit(model):
    auto = check_posteriors_autograd_equal_explicit(*model)
    assert auto[1, :, :2].abs().max() < 1e-8


def test_first_order_depends_on_the_predecessor():
    m, d = build("transformer_dhmm_first_order")
    m.eval()
    src, lens, prev, _ = batch(d)
    _, extra = m(src, lens, prev, features_only=True)
    trans = extra["log_trans"][0].exp()  # (I, J', J), sentence without padding
    # every pair of predecessors gives a different distribution over j
    diffs = (trans[:, :, None, :] - trans[:, None, :, :]).abs().sum(-1)  # (I, J', J')
    off_diag = ~torch.eye(trans.size(1), dtype=torch.bool)
    assert diffs[:, off_diag].min() > 1e-3
    # and the energy with a plain dot product over [h_j; h_j'] would not (the j' term cancels)
    fo = m.decoder.first_order
    h = extra["encoder_out"][:1]
    s = extra["inner_states"][-2].transpose(0, 1)[:1]
    w = torch.randn(h.size(-1), h.size(-1))
    energy = (fo.q_proj(s) @ fo.k_proj(h).transpose(1, 2))[:, :, None, :] + (fo.q_proj(s) @ (h @ w).transpose(1, 2))[:, :, :, None]
    plain = energy.log_softmax(-1)
    assert (plain[:, :, 0] - plain[:, :, 1]).abs().max() < 1e-5


@pytest.mark.slow
def test_parameter_count_within_a_few_percent_of_transformer():
    d = make_dict(32000)
    sizes = ["--share-all-embeddings"]
    base, _ = build("transformer", d, dim=512, layers=6, heads=8, extra=sizes + ["--encoder-ffn-embed-dim", "2048", "--decoder-ffn-embed-dim", "2048"])
    dhmm, _ = build("transformer_dhmm", d, dim=512, layers=6, heads=8, extra=sizes + ["--encoder-ffn-embed-dim", "2048", "--decoder-ffn-embed-dim", "2048"])
    n_base = sum(p.numel() for p in base.parameters())
    n_dhmm = sum(p.numel() for p in dhmm.parameters())
    assert 1.0 < n_dhmm / n_base < 1.05, (n_base, n_dhmm)


@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_empty_source_is_translated_like_alone(arch):
    """A source of EOS alone (an empty input line) has J = 1 position: the mixture is a distribution, the same
    in a batch (left-padded) as alone, and incremental decoding gives the full-sequence outputs."""
    m, d = build(arch)
    m.eval()
    w = [d.index(f"w{k}") for k in range(9)]
    src = torch.tensor([[w[0], w[1], d.eos()], [d.pad(), d.pad(), d.eos()]])
    lengths = torch.tensor([3, 1])
    prev = torch.tensor([[d.eos(), w[6], w[7]], [d.eos(), w[2], w[3]]])
    with torch.no_grad():
        out = m(src, lengths, prev)
        lp = m.get_normalized_probs(out, log_probs=True).double()
        alone = m(src[1:, 2:], lengths[1:], prev[1:])[0]
        inc, _ = decode_incrementally(m, src, lengths, prev)
    assert torch.isfinite(lp).all()
    assert torch.allclose(lp.exp().sum(-1), torch.ones(2, 3, dtype=F64), atol=1e-5)
    assert torch.allclose(out[0][1].double(), alone[0].double(), atol=1e-5)
    assert torch.allclose(inc.double(), out[0].double(), atol=1e-5)


@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_dhmm_layers_last_keeps_fairseq_cross_attention_below_the_last_layer(arch):
    from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

    from hmm_nmt.models.transformer_dhmm import DHMMDecoderLayer
    m, d = build(arch, layers=3, extra=["--dhmm-layers", "last"])
    kinds = [type(layer) for layer in m.decoder.layers]
    assert kinds == [TransformerDecoderLayerBase, TransformerDecoderLayerBase, DHMMDecoderLayer]
    paper, _ = build(arch, d, layers=3, extra=["--dhmm-layers", "all"])
    assert all(isinstance(layer, DHMMDecoderLayer) for layer in paper.decoder.layers)
    default, _ = build(arch, d, layers=3)
    assert [type(layer) for layer in default.decoder.layers] == kinds  # the default, docs/translation.md
    # Eq. 6 has W1-W3 besides q/k where fairseq's attention has v/out
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    assert count(m) == count(paper) - 2 * (16 * 16 + 16)  # one W3 per replaced layer (W2, W1 ~ v, out)


@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_lexicon_dropout_only_in_training(arch):
    plain, d = build(arch)
    drop, _ = build(arch, d, extra=["--lexicon-dropout", "0.5"])
    drop.load_state_dict(plain.state_dict())
    plain.double().eval()
    drop.double().eval()
    src, lens, prev, target = batch(d)
    losses = [dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1)[0] for m in (plain, drop)]
    torch.testing.assert_close(losses[1], losses[0])  # eval: no dropout
    drop.train()  # --dropout is 0, so only the lexicon dropout acts
    torch.manual_seed(5)
    a = dhmm_loss(drop, drop(src, lens, prev, features_only=True), target, 0.1)[0]
    torch.manual_seed(5)
    b = dhmm_loss(drop, drop(src, lens, prev, features_only=True), target, 0.1)[0]
    torch.testing.assert_close(a, b)
    assert (a - losses[0]).abs() > 1e-3


def test_lexicon_dropout_out_of_range_is_refused(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's one-line error, before anything is built
        build("transformer_dhmm", extra=["--lexicon-dropout", "1.0"])
    assert e.value.code == 2 and "argument --lexicon-dropout: must be in [0, 1), got 1.0" in capsys.readouterr().err


@pytest.mark.parametrize("arch", [a for a, _ in ORDERS])
def test_mixture_smoothing_is_fairseqs_label_smoothing_of_the_output_distribution(arch):
    # --dhmm-smoothing mixture: the loss and its gradients equal fairseq's label_smoothed_nll_loss applied to
    # the decoder's own output distribution (the materialised mixture; first order: the filtered prediction)
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
    m, d = build(arch, extra=SOFTMAX + ["--lexicon-chunk-size", "4"])  # several chunks per batch
    m.double().eval()
    src, lens, prev, target = batch(d)
    eps = 0.1
    m.zero_grad()
    loss, nll, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, eps, smoothing="mixture",
                          prev_output_tokens=prev)
    loss.backward()
    ours = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    m.zero_grad()
    lprobs, _ = m(src, lens, prev)
    ref, ref_nll = label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1), eps,
                                           ignore_index=d.pad(), reduce=True)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, ref_nll.detach())
    for name, g in ours.items():
        torch.testing.assert_close(g, m.get_parameter(name).grad, msg=name)
    lexicon, _, _ = dhmm_loss(m, m(src, lens, prev, features_only=True), target, eps)
    assert (lexicon - loss).abs() > 1e-3  # really another criterion than the paper's


def test_mixture_smoothing_refuses_topk():
    m, d = build("transformer_dhmm", extra=["--lexicon-topk", "2"])
    src, lens, prev, target = batch(d)
    with pytest.raises(ValueError, match="does not support --lexicon-topk"):
        dhmm_loss(m, m(src, lens, prev, features_only=True), target, 0.1, smoothing="mixture")


def test_dhmm_layers_default_and_checkpoints_from_before_the_option():
    from argparse import Namespace

    from hmm_nmt.models.transformer_dhmm import DEFAULT_DHMM_LAYERS, transformer_dhmm
    new = Namespace(dhmm_layers=None)  # what the argument parser gives when the flag is not used
    transformer_dhmm(new)
    assert new.dhmm_layers == DEFAULT_DHMM_LAYERS
    old = Namespace()  # the saved args of a checkpoint trained before the option existed
    transformer_dhmm(old)
    assert old.dhmm_layers == "all"


@pytest.mark.parametrize("flag,value,message", [
    ("--lexicon-chunk-size", "0", "must be >= 1, got 0"), ("--lexicon-chunk-size", "-5", "must be >= 1, got -5"),
    ("--max-jump", "0", "must be >= 1, got 0"), ("--lexicon-topk", "-1", "must be >= 0, got -1"),
    ("--lexicon-topk-warmup", "-3", "must be >= 0, got -3"), ("--lexicon-chunk-size", "x", "an integer is needed"),
])
def test_size_options_out_of_range_are_refused_with_the_flag_named(flag, value, message, capsys):
    # refused, never replaced by the default (`x or 1024` turned 0 into 1024 silently)
    with pytest.raises(SystemExit) as e:
        build("transformer_dhmm_first_order", extra=[flag, value])
    assert e.value.code == 2 and f"argument {flag}: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["1.5", "-0.1", "1"])
def test_label_smoothing_out_of_range_is_refused_by_the_dhmm_criterion(value, capsys):
    argv = ["/nonexistent", "--arch", "transformer_dhmm", "--criterion", "dhmm_label_smoothed_cross_entropy",
            "--label-smoothing", value]
    with pytest.raises(SystemExit) as e:
        options.parse_args_and_arch(options.get_training_parser(), argv)
    assert e.value.code == 2 and "argument --label-smoothing: must be in [0, 1)" in capsys.readouterr().err
    args = options.parse_args_and_arch(options.get_training_parser(), argv[:-1] + ["0.1"])
    assert args.label_smoothing == 0.1


def test_explicit_sizes_are_kept_and_the_topk_objective_defaults_to_pruned():
    m, _ = build("transformer_dhmm_first_order", extra=["--lexicon-chunk-size", "3", "--max-jump", "1"])
    assert m.decoder.lexicon_chunk_size == 3 and m.args.max_jump == 1
    assert m.args.lexicon_topk_objective == "pruned"  # the parser's default for new models
    from hmm_nmt.models.transformer_dhmm import _dhmm_defaults

    old = argparse.Namespace(lexicon_topk_objective=None)  # saved before the default existed: the bound
    _dhmm_defaults(old)
    assert old.lexicon_topk_objective == "bound" and old.lexicon_chunk_size == 1024 and old.max_jump == 16
