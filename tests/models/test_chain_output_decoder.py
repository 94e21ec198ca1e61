"""Chain decoders over a transformer decoder (``--hnmc-decoder transformer``, ``--iohmm-decoder transformer``):
the state-biased softmax against the (M, N, V) tensor, the decoders against independent oracles (generic
EFB forward / the IOHMM core's likelihood with materialised emissions), incremental == full forward with
beam reordering, and gradients."""
import pytest
import torch
from dhmm_testlib import batch, build, decode_incrementally

from hmm_nmt.hmm import efb, iohmm, state_softmax
from hmm_nmt.models.chain_output_decoder import HNMCOutputDecoder, IOHMMOutputDecoder

torch.set_num_threads(1)

VARIANTS = {
    "hnmc_exp": ("transformer_hnmc", ["--hnmc-states", "5", "--hnmc-activation", "exp"]),
    "hnmc_melu": ("transformer_hnmc", ["--hnmc-states", "4", "--hnmc-activation", "melu"]),
    "iohmm": ("transformer_iohmm", ["--iohmm-states", "4"]),
    "iohmm_l2r_hidden": ("transformer_iohmm", ["--iohmm-states", "5", "--iohmm-graph", "left-to-right",
                                               "--iohmm-state-hidden", "3"]),
}


def make(name, shared=False):
    arch, extra = VARIANTS[name]
    extra = extra + (["--share-decoder-input-output-embed"] if shared else [])
    model, d = build(arch, dim=16, extra=extra)
    return model.double().eval(), d


# ------------------------------------------------------------------ the state-biased softmax
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_state_softmax_equals_materialised_tensor(scale):
    g = torch.Generator().manual_seed(0)
    M, N, V = 7, 5, 11
    logits = torch.randn(M, V, generator=g, dtype=torch.float64) * scale  # scale 1e4: spans 10^4 nats
    log_bias = state_softmax.bounded_bias(torch.randn(N, V, generator=g, dtype=torch.float64) * 6, 8.0)
    assert log_bias.abs().max() < 8.0
    log_w = torch.log_softmax(torch.randn(M, N, generator=g, dtype=torch.float64) * 3, -1)
    full = logits.unsqueeze(1) + log_bias  # (M, N, V)
    log_z = state_softmax.log_normalizers(logits, log_bias)
    torch.testing.assert_close(log_z, torch.logsumexp(full, -1), rtol=1e-12, atol=1e-9)
    log_eta = full - torch.logsumexp(full, -1, keepdim=True)
    mix = state_softmax.mixture_log_probs(logits, log_bias, log_w - log_z)
    ref = torch.logsumexp(log_eta + log_w.unsqueeze(-1), 1)
    torch.testing.assert_close(mix, ref, rtol=1e-12, atol=1e-9)
    assert torch.isfinite(mix).all()
    tok = torch.randint(V, (M,), generator=g)
    torch.testing.assert_close(state_softmax.log_emission(logits, log_bias, log_z, tok),
                               log_eta.gather(-1, tok[:, None, None].expand(M, N, 1)).squeeze(-1))
    # float32 with peaked logits: no underflow to -inf / nan (the bound c keeps every sum >= e^-2c)
    mix32 = state_softmax.mixture_log_probs(logits.float(), log_bias.float(),
                                            (log_w - log_z).float())
    assert torch.isfinite(mix32).all()
    torch.testing.assert_close(mix32.double(), ref, rtol=1e-5, atol=1e-3 * max(1.0, scale / 1e3))


def test_state_softmax_gradcheck():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 2, 6, generator=g, dtype=torch.float64, requires_grad=True)
    raw = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    log_w = torch.randn(3, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)

    def f(logits, raw, log_w):
        b = state_softmax.bounded_bias(raw, 2.0)
        log_z = state_softmax.log_normalizers(logits, b)
        return state_softmax.mixture_log_probs(logits, b, log_w - log_z)

    assert torch.autograd.gradcheck(f, (logits, raw, log_w))


# ------------------------------------------------------------------ the decoders against oracles
def materialised_log_eta(dec, prev, enc):
    """log eta (B, T, N, V) written out: log_softmax_v(E_v . s_t + b_v + B_i(v))."""
    u, logits, _ = dec.features(prev, enc)
    log_eta = torch.log_softmax(logits.unsqueeze(2) + dec.log_bias(), -1)
    return u, log_eta


@pytest.mark.parametrize("name", ["hnmc_exp", "hnmc_melu"])
def test_hnmc_equals_generic_efb_forward_and_mixture(name):
    model, d = make(name)
    dec = model.decoder
    assert isinstance(dec, HNMCOutputDecoder)
    src, src_lengths, prev, _ = batch(d)
    out, extra = model(src, src_lengths, prev)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(out.shape[:2], dtype=out.dtype))
    u, log_eta = materialised_log_eta(dec, prev, model.encoder(src, src_lengths))
    # generic order-1 chain DP (efb.chain_forward) over the HNMC's (B, T, N, N) potentials
    log_alpha = efb.chain_forward(dec.hnmc.log_potentials(u), None, prev.ne(d.pad()))[0]
    ref = torch.logsumexp(log_eta + log_alpha.unsqueeze(-1), 2)
    real = prev.ne(d.pad())
    torch.testing.assert_close(out[real], ref[real], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(extra["log_states"][real], log_alpha[real], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["iohmm", "iohmm_l2r_hidden"])
def test_iohmm_sentence_log_prob_is_the_iohmm_likelihood(name):
    """sum_t log p(e_t | e_<t, f) == log P(e | u) of the core forward algorithm (Eq. 6) with the emission
    densities log eta_{t,i}(e_t) taken from the materialised (B, T, N, V) tensor."""
    model, d = make(name)
    dec = model.decoder
    assert isinstance(dec, IOHMMOutputDecoder)
    src, src_lengths, prev, target = batch(d)
    out, _ = model(src, src_lengths, prev)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(out.shape[:2], dtype=out.dtype))
    mask = target.ne(d.pad())
    sent = (out.gather(-1, target.unsqueeze(-1)).squeeze(-1) * mask).sum(1)
    u, log_eta = materialised_log_eta(dec, prev, model.encoder(src, src_lengths))
    B, T, N, _ = log_eta.shape
    log_f = log_eta.gather(-1, target[:, :, None, None].expand(B, T, N, 1)).squeeze(-1)
    ref = iohmm.log_likelihood(dec.state_networks(u), log_f, dec.log_zeta0(), mask)
    torch.testing.assert_close(sent, ref, rtol=1e-10, atol=1e-10)
    if name == "iohmm_l2r_hidden":
        phi = dec.state_networks(u).exp()
        assert (phi[..., ~dec.state_networks.allowed] == 0).all()


# ------------------------------------------------------------------ incremental decoding
class FrozenFeatures:
    """Serve the full-sequence transformer features to incremental calls (position = prefix length - 1):
    isolates the chain's incremental recursion from fairseq's attention, which rounds its softmax to float32
    even in a float64 model (so the end-to-end comparison below has a float32-sized tolerance)."""

    def __init__(self, dec, src, src_lengths, prev, model):
        self.orig = dec.features
        self.rows = torch.arange(prev.size(0))
        self.full = self.orig(prev, model.encoder(src, src_lengths))

    def __call__(self, prev_output_tokens, encoder_out, incremental_state=None):
        t = prev_output_tokens.size(1) - 1
        if incremental_state is None:
            return self.orig(prev_output_tokens, encoder_out)
        return tuple(x[self.rows, t:t + 1] for x in self.full)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_incremental_equals_full_forward(name, shared, monkeypatch):
    model, d = make(name, shared)
    src, src_lengths, prev, _ = batch(d)
    full, _ = model(src, src_lengths, prev)
    real = prev.ne(d.pad())
    # 1) the chain's recursion alone, float64, exact up to rounding
    order = torch.tensor([1, 0, 0])
    with monkeypatch.context() as m:
        frozen = FrozenFeatures(model.decoder, src, src_lengths, prev, model)
        m.setattr(model.decoder, "features", frozen)
        inc, _ = decode_incrementally(model, src, src_lengths, prev)
        torch.testing.assert_close(inc[real], full[real], rtol=1e-12, atol=1e-12)
        # beam-style reorder (swap and duplicate rows) after step 2; the frozen features follow the order
        full3, _ = model(src.index_select(0, order), src_lengths.index_select(0, order), prev.index_select(0, order))
        enc = model.encoder(src, src_lengths)
        state, outs = {}, []
        for t in range(prev.size(1)):
            if t == 2:
                model.decoder.reorder_incremental_state_scripting(state, order)
                enc = model.encoder.reorder_encoder_out(enc, order)
                outs = [o.index_select(0, order) for o in outs]
                frozen.rows = order
            p = prev.index_select(0, frozen.rows) if t >= 2 else prev
            out, _ = model.decoder(p[:, :t + 1], encoder_out=enc, incremental_state=state)
            outs.append(out)
        inc3 = torch.cat(outs, 1)
        real3 = prev.index_select(0, order).ne(d.pad())
        torch.testing.assert_close(inc3[real3], full3[real3], rtol=1e-12, atol=1e-12)
    # 2) end to end through fairseq's incremental transformer decoder and beam reordering
    inc, _ = decode_incrementally(model, src, src_lengths, prev)
    torch.testing.assert_close(inc[real], full[real], rtol=0, atol=1e-5)
    inc3, prev3 = decode_incrementally(model, src, src_lengths, prev, reorder_at=2, new_order=order)
    full3, _ = model(src.index_select(0, order), src_lengths.index_select(0, order), prev3)
    torch.testing.assert_close(inc3[prev3.ne(d.pad())], full3[prev3.ne(d.pad())], rtol=0, atol=1e-5)
    # the chain matters: other state vectors change the output
    with torch.no_grad():
        model.decoder.state_vectors.mul_(-1.0)
    other, _ = model(src, src_lengths, prev)
    assert (other - full)[real].abs().max() > 1e-3


@pytest.mark.parametrize("name", ["hnmc_exp", "iohmm"])
def test_gradients_reach_every_parameter(name):
    model, d = make(name)
    model.train()
    src, src_lengths, prev, target = batch(d)
    out, _ = model(src, src_lengths, prev)
    loss = -out.gather(-1, target.unsqueeze(-1)).squeeze(-1)[target.ne(d.pad())].sum()
    loss.backward()
    missing = [n for n, p in model.named_parameters()
               if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert not missing, missing


def test_chain_only_variants_stay_selectable():
    from hmm_nmt.models.transformer_hnmc import HNMCDecoder
    from hmm_nmt.models.transformer_iohmm import IOHMMDecoder
    assert isinstance(build("transformer_hnmc", dim=16, extra=["--hnmc-decoder", "chain"])[0].decoder, HNMCDecoder)
    assert isinstance(build("transformer_iohmm", dim=16, extra=["--iohmm-decoder", "chain"])[0].decoder, IOHMMDecoder)
    assert isinstance(build("transformer_hnmc", dim=16)[0].decoder, HNMCOutputDecoder)  # the default
    assert isinstance(build("transformer_iohmm", dim=16)[0].decoder, IOHMMOutputDecoder)


@pytest.mark.parametrize("arch,flag", [("transformer_hnmc", "--hnmc-states"), ("transformer_iohmm", "--iohmm-states")])
def test_one_state_is_a_transformer_output_layer_with_a_word_bias(arch, flag):
    model, d = build(arch, dim=16, extra=[flag, "1"])
    model = model.double().eval()
    dec = model.decoder
    src, src_lengths, prev, _ = batch(d)
    out, _ = model(src, src_lengths, prev)
    s, _ = dec.transformer.extract_features(prev, encoder_out=model.encoder(src, src_lengths))
    ref = torch.log_softmax(s @ dec._out_weight().t() + dec.output_bias + dec.log_bias()[0], -1)
    real = prev.ne(d.pad())
    torch.testing.assert_close(out[real], ref[real], rtol=1e-12, atol=1e-12)
