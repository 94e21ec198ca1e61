"""``--task translation_eos_penalty``: δ = 0 is fairseq's own search, δ lowers exactly the score of </s> at every
step (the other tokens keep the model's teacher-forced log-probabilities), and it acts inside the search, where
lenpen cannot: the hypotheses it yields are not among those the stock search finishes."""
import pytest
import torch
from dhmm_testlib import build
from fairseq.dataclass.configs import GenerationConfig
from fairseq.tasks.translation import TranslationTask

from hmm_nmt.tasks.translation_eos_penalty import TranslationEosPenaltyConfig, TranslationEosPenaltyTask

ARCHS = ["transformer", "transformer_dhmm", "transformer_dhmm_first_order", "transformer_hnmc", "transformer_iohmm"]


def sources(d):
    w = [d.index(f"w{k}") for k in range(9)]
    src = torch.tensor([[w[0], w[1], w[2], w[3], d.eos()], [d.pad(), d.pad(), w[4], w[5], d.eos()],
                        [d.pad(), w[8], w[7], w[6], d.eos()]])
    return {"net_input": {"src_tokens": src, "src_lengths": torch.tensor([5, 3, 4])}}


def search(model, d, penalty, beam=4, task_cls=TranslationEosPenaltyTask, **gen):
    if task_cls is TranslationTask:
        task = TranslationTask(TranslationEosPenaltyConfig(), d, d)
    else:
        task = task_cls(TranslationEosPenaltyConfig(eos_penalty=penalty), d, d)
    cfg = GenerationConfig(beam=beam, max_len_a=0, max_len_b=gen.pop("max_len_b", 7), **gen)
    generator = task.build_generator([model], cfg)
    with torch.no_grad():
        return generator.generate([model], sources(d))


def teacher_forced(model, d, i, tokens):
    """log p(tokens | source i) position by position, one full forward."""
    s = sources(d)["net_input"]
    src, n = s["src_tokens"][i:i + 1], s["src_lengths"][i:i + 1]
    prev = torch.cat([tokens.new_tensor([d.eos()]), tokens[:-1]]).unsqueeze(0)
    with torch.no_grad():
        out = model(src, n, prev)
        lp = model.get_normalized_probs(out, log_probs=True)[0]
    return lp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).double()  # fairseq's log_softmax is float32


@pytest.mark.parametrize("arch", ARCHS)
def test_zero_penalty_is_the_stock_search(arch):
    model, d = build(arch)
    model = model.double().eval()
    ours, stock = search(model, d, 0.0), search(model, d, 0.0, task_cls=TranslationTask)
    for a, b in zip(ours, stock):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        assert torch.equal(torch.stack([h["score"] for h in a]), torch.stack([h["score"] for h in b]))


@pytest.mark.parametrize("arch", ARCHS)
def test_penalty_lowers_only_the_eos_score(arch):
    model, d = build(arch)
    model = model.double().eval()
    delta = 0.7
    checked = 0
    for i, hyps in enumerate(search(model, d, delta)):
        for h in hyps:
            ref = teacher_forced(model, d, i, h["tokens"])
            assert h["tokens"][-1].item() == d.eos()
            expected = ref.clone()
            expected[-1] -= delta
            torch.testing.assert_close(h["positional_scores"].double(), expected, rtol=0, atol=1e-5)
            checked += 1
    assert checked == 3 * 4


def test_penalty_acts_inside_the_search():
    model, d = build("transformer")
    model = model.double().eval()  # untrained: it ends after one or two words
    lengths = {}
    for delta in (0.0, 1.0, 50.0):
        out = search(model, d, delta)
        lengths[delta] = [len(h["tokens"]) for hyps in out for h in hyps]
        if delta == 0.0:
            stock = [{tuple(h["tokens"].tolist()) for h in hyps} for hyps in out]
        else:
            best = [tuple(hyps[0]["tokens"].tolist()) for hyps in out]
            # lenpen only re-orders the stock search's finished hypotheses; these were never among them
            assert sum(b not in s for b, s in zip(best, stock)) >= 2
    mean = {k: sum(v) / len(v) for k, v in lengths.items()}
    assert mean[0.0] < 4 and mean[0.0] < mean[1.0] <= mean[50.0]
    assert set(lengths[50.0]) == {8}  # max_len_b 7 tokens + </s>: nothing ends before it must


def test_negative_penalty_shortens_and_score_reference_is_refused():
    model, d = build("transformer")
    model = model.double().eval()
    assert {len(h["tokens"]) for hyps in search(model, d, -50.0) for h in hyps} == {2}  # min_len 1: one word, then </s>
    task = TranslationEosPenaltyTask(TranslationEosPenaltyConfig(eos_penalty=1.0), d, d)
    with pytest.raises(ValueError, match="--eos-penalty 1"):
        task.build_generator([model], GenerationConfig(score_reference=True))
