"""Bounded decoding memory of transformer_dhmm: chunked decoding equals the materialised mixture (float64)
and the lexicon workspace of a decoding step never exceeds max(J, B x beam) x V, the size of the
transformer's own logits at the same batch and beam (scripts/bench_decode.py measures the RSS)."""
import pytest
import torch
from dhmm_testlib import batch, build
from fairseq.sequence_generator import SequenceGenerator

from hmm_nmt.hmm import lexicon
from hmm_nmt.hmm.lexicon import log_mixture, release_workspace


def workspace_rows(vocab):
    """The largest chunk buffer allocated since the last release, in vocabulary rows."""
    return max(buf.numel() for buf in lexicon._WORKSPACE.buffers.values()) // vocab


@pytest.mark.parametrize("rows,width,chunk", [(20, 7, 1024), (3, 9, 1024), (50, 4, 16), (6, 5, 1)])
def test_decoding_chunk_bounds_the_workspace_and_equals_the_materialised_mixture(rows, width, chunk):
    g = torch.Generator().manual_seed(rows + width)
    d, vocab = 6, 13
    src_feat = torch.randn(rows, width, d, generator=g, dtype=torch.float64)
    tgt_feat = torch.randn(rows, 1, d, generator=g, dtype=torch.float64)  # one decoding step per row
    log_align = torch.randn(rows, 1, width, generator=g, dtype=torch.float64).log_softmax(-1)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    bias = torch.randn(vocab, generator=g, dtype=torch.float64)
    release_workspace()
    with torch.no_grad():
        out = log_mixture(src_feat, tgt_feat, log_align, weight, bias, chunk)
    # at most one chunk of max(width, min(chunk, rows)) (i, j) rows, however large --lexicon-chunk-size is
    assert workspace_rows(vocab) <= max(width, min(chunk, rows))
    lex = torch.log_softmax(torch.relu(src_feat[:, None] + tgt_feat[:, :, None]) @ weight.t() + bias, -1)
    torch.testing.assert_close(out, torch.logsumexp(log_align[..., None] + lex, dim=2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", ["transformer_dhmm", "transformer_dhmm_first_order"])
def test_beam_search_workspace_and_step_outputs(arch):
    model, d = build(arch, extra=["--lexicon", "softmax"])  # the chunked softmax kernel's workspace
    model = model.eval()  # float32: the float64 equality is the test above; here chunking only regroups rows
    src, lens, _, _ = batch(d)
    beam, vocab = 3, len(d)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lens}}
    results = {}
    for chunk in (1, 10 ** 6):  # one (i, j) row per chunk, and a chunk size far above the output's size
        model.decoder.lexicon_chunk_size = chunk
        release_workspace()
        gen = SequenceGenerator([model], d, beam_size=beam, min_len=4, max_len_b=4, max_len_a=0)
        with torch.no_grad():
            hyps = gen.generate([model], sample)
        rows = max(buf.numel() for buf in lexicon._WORKSPACE.buffers.values()) // vocab
        # a step scores (2 sentences x beam) rows at J <= 5 source positions each
        assert rows <= max(src.size(1), 2 * beam), (chunk, rows)
        results[chunk] = [(h["tokens"].tolist(), h["score"].item()) for hs in hyps for h in hs]
    assert [t for t, _ in results[1]] == [t for t, _ in results[10 ** 6]]
    for (_, a), (_, b) in zip(results[1], results[10 ** 6]):
        assert abs(a - b) < 1e-5  # float32 matmuls over differently sized row blocks
    # and a decoding step equals the mixture over materialised lexicon logits
    enc = model.encoder(src, src_lengths=lens)
    prev = torch.full((2, 1), d.eos())
    inc = {}
    for word in ("w1", "w2", "w3"):
        with torch.no_grad():
            step, extra = model.decoder(prev, encoder_out=enc, incremental_state=inc)
            x, _ = model.decoder.extract_features(prev, encoder_out=enc)
            src_feat, tgt_feat = model.decoder.lexicon_features(x, extra["encoder_out"])
            weight, bias = model.decoder.output_weight_bias()
            logits = torch.relu(src_feat[:, None] + tgt_feat[:, -1:, None]) @ weight.t()
            lex = torch.log_softmax(logits if bias is None else logits + bias, -1)
            ref = torch.logsumexp(extra["log_align"][..., None] + lex, dim=2)
        torch.testing.assert_close(step, ref, rtol=1e-5, atol=1e-5)
        prev = torch.cat([prev, torch.full((2, 1), d.index(word))], dim=1)
