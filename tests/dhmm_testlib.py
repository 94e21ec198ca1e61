"""Helpers shared by the direct-HMM tests: tiny models built through fairseq's own argument parsing."""
import itertools
import math

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks.translation import TranslationTask

import hmm_nmt  # noqa: F401  (registers the plugin)


def make_dict(n_words=9):
    d = Dictionary()
    for k in range(n_words):
        d.add_symbol(f"w{k}")
    return d


def zipf_dict():
    """Eleven words with Zipf-like counts (frequency classes of different sizes, for --lexicon class)."""
    d = make_dict()
    for k in range(9):
        d.count[d.index(f"w{k}")] = 1000 // (k + 1)
    return d


def build(arch="transformer_dhmm", dictionary=None, dim=16, layers=2, heads=2, extra=()):
    dictionary = dictionary or make_dict()
    argv = ["/nonexistent", "--arch", arch, "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim), "--encoder-ffn-embed-dim",
            str(2 * dim), "--decoder-ffn-embed-dim", str(2 * dim), "--encoder-attention-heads", str(heads),
            "--decoder-attention-heads", str(heads), "--dropout", "0.0"] + list(extra)
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = TranslationTask(args, dictionary, dictionary)
    torch.manual_seed(0)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return model, dictionary


def batch(dictionary, seed=0):
    """Two sentence pairs, left-padded source and right-padded target as fairseq makes them."""
    pad, eos = dictionary.pad(), dictionary.eos()
    w = [dictionary.index(f"w{k}") for k in range(9)]
    src = torch.tensor([[w[0], w[1], w[2], w[3], eos], [pad, pad, w[4], w[5], eos]])
    src_lengths = torch.tensor([5, 3])
    target = torch.tensor([[w[6], w[7], w[8], w[1], eos], [w[2], w[3], eos, pad, pad]])
    prev = torch.tensor([[eos, w[6], w[7], w[8], w[1]], [eos, w[2], w[3], pad, pad]])
    return src, src_lengths, prev, target


def decode_incrementally(model, src, src_lengths, prev, reorder_at=None, new_order=None):
    """Step-by-step decoder outputs; optionally reorder the batch (as beam search does) after a step."""
    enc = model.encoder(src, src_lengths)
    state = {}
    outs = []
    for t in range(prev.size(1)):
        if reorder_at is not None and t == reorder_at:
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            enc = model.encoder.reorder_encoder_out(enc, new_order)
            prev = prev.index_select(0, new_order)
            outs = [o.index_select(0, new_order) for o in outs]
        out, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
        assert out.shape[1] == 1
        outs.append(out)
    return torch.cat(outs, dim=1), prev


def check_incremental_equals_full_with_beam_reordering(m, d):
    """Step-by-step decoding under beam reordering and a shrinking batch equals the full forward, step by step."""
    g = torch.Generator().manual_seed(3)
    src, lens, _, _ = batch(d)
    # beam of 2 per sentence: rows (s0, s0, s1, s1)
    order = torch.tensor([0, 0, 1, 1])
    enc = m.encoder(src[order], src_lengths=lens[order])
    words = [d.index(f"w{k}") for k in range(9)]
    hist = torch.full((4, 1), d.eos())
    inc = {}
    for step in range(6):
        if step > 0:
            # the beam keeps, per sentence, a shuffled choice of its hypotheses; at the last step sentence
            # 0 is finished and the batch shrinks (the source caches must then be reordered too)
            new_order = torch.tensor([[1, 1], [0, 1], [1, 0]][step % 3] + [3, 2]) if step < 5 else torch.tensor([3, 2])
            m.decoder.reorder_incremental_state_scripting(inc, new_order)
            enc = m.encoder.reorder_encoder_out(enc, new_order)
            hist = hist[new_order]
            nxt = torch.tensor(words)[torch.randint(0, 9, (len(new_order), 1), generator=g)]
            hist = torch.cat([hist, nxt], dim=1)
        step_out, step_extra = m.decoder(hist, encoder_out=enc, incremental_state=inc)
        full_out, full_extra = m.decoder(hist, encoder_out=enc)
        # fairseq's MultiheadAttention (self-attention here) takes its softmax in float32 even in a float64
        # model (utils.softmax), and one step vs the whole prefix sums it over other shapes: float32 ulps
        # (~1e-7 relative) can differ, so this comparison alone keeps a float32-sized tolerance
        torch.testing.assert_close(step_out[:, -1], full_out[:, -1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(step_extra["attn"][0][:, -1], full_extra["attn"][0][:, -1], atol=1e-5, rtol=1e-5)


def check_beam_scores_equal_likelihood(m, d):
    """Every finished beam hypothesis' step scores sum to its likelihood under the training criterion."""
    from fairseq.sequence_generator import SequenceGenerator

    from hmm_nmt.criterions.dhmm_label_smoothed_cross_entropy import dhmm_loss

    src, lens, _, _ = batch(d)
    gen = SequenceGenerator([m], d, beam_size=3, max_len_b=6)
    hypos = gen.generate([m], {"net_input": {"src_tokens": src, "src_lengths": lens}})
    for b, hyps in enumerate(hypos):
        for hyp in hyps:
            tokens = hyp["tokens"]
            prev = torch.cat([tokens.new_tensor([d.eos()]), tokens[:-1]])[None]
            loss, _, _ = dhmm_loss(m, m(src[b:b + 1], lens[b:b + 1], prev, features_only=True), tokens[None], 0.0)
            # fairseq's generator keeps lprobs and scores in float32 (utils.log_softmax), whatever the model's
            # dtype: a few float32 roundings of terms of size ~1 per token, far inside 1e-4
            torch.testing.assert_close(-loss.float(), hyp["positional_scores"].sum(), atol=1e-4, rtol=1e-5)


def check_posteriors_autograd_equal_explicit(m, d):
    """Autograd posteriors equal the explicit and the scaled forward-backward and sum to 1 per real target position;
    returns them for further checks."""
    src, lens, prev, target = batch(d)
    auto = m.alignment_posteriors(src, lens, prev, target, method="autograd")
    explicit = m.alignment_posteriors(src, lens, prev, target, method="explicit")
    torch.testing.assert_close(auto, explicit)
    torch.testing.assert_close(m.alignment_posteriors(src, lens, prev, target), auto)  # the default: scaled
    torch.testing.assert_close(auto.sum(-1), target.ne(d.pad()).to(auto.dtype))
    return auto


def lexicon_gradcheck_inputs(m, d):
    """(x, extra, target, tgt_mask, row_mask, detached alignment potentials) of the test batch: what a
    gradcheck through the lexicon scores and the DP needs."""
    src, lens, prev, target = batch(d)
    x, extra = m(src, lens, prev, features_only=True)
    tgt_mask = target.ne(d.pad())
    row_mask = m.decoder.lexicon_rows(extra, tgt_mask)
    align = {k: v.detach() for k, v in m.decoder.alignment_potentials(extra, row_mask).items()}
    return x, extra, target, tgt_mask, row_mask, align


def full_lexicon(m, x, extra):
    """log p(v | j) (B, I, J, V) of the model's lexicon (softmax, class or separable), materialised by plain
    autograd ops."""
    from hmm_nmt.hmm.class_lexicon import class_log_probs
    from hmm_nmt.hmm.separable_lexicon import reference_separable_log_probs

    dec = m.decoder
    src_feat, tgt_feat = dec.lexicon_features(x, extra["encoder_out"])
    weight, bias = dec.output_weight_bias()
    if dec.lexicon_kind == "separable":
        return reference_separable_log_probs(src_feat, tgt_feat, weight, bias)
    hidden = torch.relu(src_feat[:, None] + tgt_feat[:, :, None])
    if dec.lexicon_kind == "class":
        return class_log_probs(hidden, dec.lex_class_proj.weight, dec.lex_class_proj.bias, weight, bias,
                               dec.class_layout())
    return torch.log_softmax(torch.nn.functional.linear(hidden, weight, bias), dim=-1)


def gold_of(lex, target):
    """lex (B, I, J, V) at the target words: (B, I, J)."""
    return lex.gather(-1, target[:, :, None, None].expand(-1, -1, lex.size(2), 1)).squeeze(-1)


def brute_force_loglik(m, src, lens, prev, target):
    """log p(E | F) summed over every alignment sequence of the real source positions, from the materialised
    lexicon (zero order: p(j | i); first order: p(j | j') from the model's transition tables)."""
    x, extra = m(src, lens, prev, features_only=True)
    gold = gold_of(full_lexicon(m, x, extra), target)
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
    return torch.tensor(out, dtype=gold.dtype)
