"""--arch transformer_iohmm with ``--iohmm-decoder chain`` (the chain-over-transformer default: see
test_chain_output_decoder.py; the CLI test runs both): exact IOHMM likelihood, incremental == full forward, beam reordering, CLI."""
import os
import subprocess
import sys

import pytest
import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import hmm_nmt  # noqa: F401  (registers the model)
from hmm_nmt.hmm import iohmm
from hmm_nmt.models.transformer_iohmm import TransformerIOHMMModel

torch.set_num_threads(1)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeTask:
    def __init__(self, n_src, n_tgt):
        self.source_dictionary, self.target_dictionary = Dictionary(), Dictionary()
        for i in range(n_src):
            self.source_dictionary.add_symbol(f"s{i}")
        for i in range(n_tgt):
            self.target_dictionary.add_symbol(f"t{i}")


def build(chunk=2 ** 24, states=5, **over):
    small = dict(encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=1, encoder_attention_heads=2,
                 decoder_embed_dim=16, decoder_attention_heads=2, dropout=0.0, attention_dropout=0.0,
                 iohmm_states=states, iohmm_chunk_elements=chunk, iohmm_decoder="chain", max_source_positions=64, max_target_positions=64)
    small.update(over)
    argv = ["unused-data-dir", "--task", "translation", "--arch", "transformer_iohmm",
            "--user-dir", os.path.join(ROOT, "hmm_nmt")]
    for k, v in small.items():
        argv += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    torch.manual_seed(0)
    model = TransformerIOHMMModel.build_model(args, FakeTask(9, 11)).double().eval()
    return model


def batch(model, B=3, S=6, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    sd, td = model.encoder.dictionary, model.decoder.dictionary
    src_len = torch.tensor([S, S - 2, 2][:B])
    src = torch.randint(sd.nspecial, len(sd), (B, S), generator=g)
    src[torch.arange(S)[None] >= src_len[:, None]] = sd.pad()
    tgt_len = torch.tensor([T, T - 3, 2][:B])
    tgt = torch.randint(td.nspecial, len(td), (B, T), generator=g)
    prev = torch.cat([torch.full((B, 1), td.eos()), tgt[:, :-1]], 1)
    prev[torch.arange(T)[None] >= tgt_len[:, None]] = td.pad()
    tgt[torch.arange(T)[None] >= tgt_len[:, None]] = td.pad()
    return src, src_len, prev, tgt, tgt_len


def test_arch_registered():
    assert "transformer_iohmm" in ARCH_MODEL_REGISTRY


def test_sentence_log_prob_is_the_iohmm_likelihood():
    """sum_t log p(e_t | e_<t, f) from the decoder == log P(y | u) of the core forward algorithm (Eq. 6),
    with log_phi from the state networks and log_f = log eta_it(e_t) computed independently here."""
    model = build()
    src, src_len, prev, tgt, tgt_len = batch(model)
    lprobs, extra = model(src, src_len, prev)
    dec = model.decoder
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones_like(lprobs[..., 0]))
    tok_lp = lprobs.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    mask = tgt.ne(dec.padding_idx)
    sent = (tok_lp * mask).sum(1)
    enc = model.encoder(src, src_len)
    u, _ = dec.inputs(prev, enc)
    B, T = prev.shape
    log_phi = dec.state_networks(u)
    h = torch.tanh(dec.output_hidden(u)).view(B, T, dec.n_states, -1)
    log_eta = torch.log_softmax(h @ dec.output_embed.t() + dec.output_bias, -1)  # (B, T, n, V) whole
    log_f = log_eta.gather(-1, tgt.clamp(min=0)[:, :, None, None].expand(B, T, dec.n_states, 1)).squeeze(-1)
    ref = iohmm.log_likelihood(log_phi, log_f, dec.log_zeta0(), mask)
    torch.testing.assert_close(sent, ref)


def test_tied_embeddings_and_constrained_graph():
    model = build(share_decoder_input_output_embed=True, iohmm_graph="left-to-right")
    dec = model.decoder
    assert dec.output_embed is None and dec._out_weight() is dec.embed_tokens.weight
    src, src_len, prev, tgt, _ = batch(model)
    lprobs, extra = model(src, src_len, prev)
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones_like(lprobs[..., 0]))
    u, _ = dec.inputs(prev, model.encoder(src, src_len))
    phi = dec.state_networks(u).exp()
    allowed = dec.state_networks.allowed
    assert (phi[..., ~allowed] == 0).all() and (~allowed).any()


def test_chunking_does_not_change_values_or_gradients():
    full, chunked = build(), build(chunk=40)
    assert chunked.decoder._rows_per_chunk() == 1 and full.decoder._rows_per_chunk() > 100
    chunked.train(), full.train()
    src, src_len, prev, tgt, _ = batch(full)
    outs = []
    for m in (full, chunked):
        lp, _ = m(src, src_len, prev)
        loss = -lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)[tgt.ne(1)].sum()
        loss.backward()
        outs.append((lp, [p.grad.clone() for p in m.parameters()]))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    for a, b in zip(outs[0][1], outs[1][1]):
        torch.testing.assert_close(a, b)


def test_incremental_equals_full_forward_and_reorder():
    model = build()
    src, src_len, prev, tgt, _ = batch(model, B=3, T=7)
    prev = prev.masked_fill(prev.eq(1), 5)  # incremental decoding never sees padding
    full, _ = model(src, src_len, prev)
    enc = model.encoder(src, src_len)
    state = {}
    steps = []
    for t in range(prev.shape[1]):
        out, _ = model.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full)
    # beam search reorders hypotheses: continue from a permuted/duplicated state
    order = torch.tensor([2, 0, 0])
    state2 = {}
    for t in range(4):
        model.decoder(prev[:, :t + 1], encoder_out=enc, incremental_state=state2)
    model.decoder.reorder_incremental_state_scripting(state2, order)
    enc2 = model.encoder.reorder_encoder_out(enc, order)
    ref, _ = model(src[order], src_len[order], prev[order])
    for t in range(4, prev.shape[1]):
        out, _ = model.decoder(prev[order, :t + 1], encoder_out=enc2, incremental_state=state2)
        torch.testing.assert_close(out[:, 0], ref[:, t])


def _run(args, cwd):
    proc = subprocess.run([sys.executable, "-m"] + args, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["chain", "transformer"])
def test_cli_train_and_generate_toy_corpus(tmp_path, monkeypatch, decoder):
    """fairseq-preprocess / fairseq-train --user-dir hmm_nmt / fairseq-generate (stock beam search)."""
    from fairseq_cli import preprocess

    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(tmp_path / "raw"),
                    "--train", "400", "--valid", "40", "--test", "25"], check=True, capture_output=True)
    # fairseq-preprocess's entry point in-process (saves an interpreter start); train/generate as subprocesses
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
                                      "--trainpref", "raw/train", "--validpref", "raw/valid", "--testpref", "raw/test",
                                      "--destdir", "bin", "--workers", "1"])
    preprocess.cli_main()
    user_dir = os.path.join(ROOT, "hmm_nmt")
    log = _run(["fairseq_cli.train", "bin", "--user-dir", user_dir, "--arch", "transformer_iohmm",
                "--encoder-layers", "1", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
                "--encoder-attention-heads", "2", "--decoder-embed-dim", "32", "--decoder-attention-heads", "2",
                "--iohmm-states", "4", "--iohmm-decoder", decoder, "--decoder-layers", "1",
                "--decoder-ffn-embed-dim", "64", "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "3000",
                "--max-update", "12", "--criterion", "cross_entropy", "--save-dir", "ckpt", "--no-epoch-checkpoints",
                "--log-interval", "1", "--log-format", "simple", "--num-workers", "0", "--seed", "1", "--cpu"], tmp_path)
    losses = [float(x.split("loss=")[1].split(",")[0]) for x in log.splitlines() if "loss=" in x]
    assert len(losses) >= 10 and losses[-1] < losses[0] - 0.5, losses
    assert (tmp_path / "ckpt" / "checkpoint_best.pt").exists()
    out = _run(["fairseq_cli.generate", "bin", "--user-dir", user_dir, "--path", "ckpt/checkpoint_best.pt",
                "--beam", "3", "--batch-size", "25", "--required-batch-size-multiple", "1", "--max-len-b", "20",
                "--cpu", "--gen-subset", "test"], tmp_path)
    hyps = [ln for ln in out.splitlines() if ln.startswith("H-")]
    # every test sentence is decoded (fairseq 0.12 silently drops a final batch that is not a multiple
    # of --required-batch-size-multiple, default 8: facebookresearch/fairseq#5036)
    assert sorted(int(ln.split("\t")[0][2:]) for ln in hyps) == list(range(25))
    assert "BLEU4" in out
    # scores are log-probabilities of the IOHMM mixture: finite and negative
    scores = [float(ln.split("\t")[1]) for ln in hyps]
    assert all(-1e4 < s < 0 for s in scores)
