"""Alignment ensembles: the mean of the members' matrices, still distributions; refused for mixed kinds."""
import pytest
import torch
from dhmm_testlib import batch, build

from hmm_nmt.aligner.ensemble import AlignerEnsemble


def _members():
    m1, d = build("transformer_dhmm_first_order")
    torch.manual_seed(1)
    m2, _ = build("transformer_dhmm_first_order", d)
    for p in m2.parameters():  # a second model: other weights, same dictionary and shape
        p.data.add_(0.3 * torch.randn_like(p))
    return [m1.double().eval(), m2.double().eval()], d


def test_the_ensemble_averages_its_members_matrices_and_they_stay_distributions():
    models, d = _members()
    src, lens, prev, target = batch(d)
    ens = AlignerEnsemble(models)
    got = ens.alignment_matrices(src, lens, prev, target, methods=("alignment", "posterior"), transition=True)
    each = [m.alignment_matrices(src, lens, prev, target, methods=("alignment", "posterior"), transition=True)
            for m in models]
    assert not torch.allclose(each[0]["posterior"], each[1]["posterior"])  # the members differ
    for k in ("alignment", "posterior", "transition"):
        torch.testing.assert_close(got[k], (each[0][k].float() + each[1][k].float()) / 2)
    real = target.ne(d.pad())
    sums = got["posterior"].sum(-1)[real]
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)
    assert ens.alignment_model_type() == "dhmm1" and ens.max_positions() == models[0].max_positions()
    # one member: the member itself
    one = AlignerEnsemble(models[:1]).alignment_matrices(src, lens, prev, target, methods=("posterior",))
    torch.testing.assert_close(one["posterior"], each[0]["posterior"].float())


def test_an_ensemble_of_mixed_orders_or_of_non_hmm_models_is_refused():
    m1, d = build("transformer_dhmm_first_order")
    m0, _ = build("transformer_dhmm", d)
    with pytest.raises(ValueError, match="mix alignment orders"):
        AlignerEnsemble([m1, m0])
    with pytest.raises(ValueError, match="only transformer_dhmm"):
        AlignerEnsemble([m1, torch.nn.Linear(2, 2)])
