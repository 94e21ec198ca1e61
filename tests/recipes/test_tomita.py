"""examples/tomita: the languages, the vectorised trial bank, automaton extraction, and a smoke run."""
import importlib.util
import json
import os

import pytest
import torch
from conftest import ROOT

torch.set_num_threads(1)
_spec = importlib.util.spec_from_file_location("tomita", os.path.join(ROOT, "examples", "tomita", "tomita.py"))
tomita = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tomita)


def test_dfas_match_the_definitions_and_minimal_sizes_match_table1():
    strings = tomita.all_strings(10)
    assert len(tomita.all_strings(12)) == 2 ** 13 - 1
    for g in range(1, 8):
        assert all(tomita.PREDICATES[g](s) == tomita.dfa_accepts(tomita.DFAS[g], s) for s in strings), g
        m = tomita.minimize(tomita.DFAS[g])
        assert len(m[0]) == tomita.PAPER[g][1]  # the paper's "FSA min" column
        assert tomita.equivalent(m, tomita.DFAS[g])
    # spot checks of the definitions
    assert tomita.PREDICATES[3]("100") and not tomita.PREDICATES[3]("10") and not tomita.PREDICATES[3]("1000")
    assert tomita.PREDICATES[7]("0101") and not tomita.PREDICATES[7]("1010")
    assert not tomita.equivalent(tomita.DFAS[1], tomita.DFAS[2])


def dfa_bank(dfas, n_states, sharp=30.0):
    """A bank whose trial r *is* the automaton dfas[r] (transition/output logits +-sharp)."""
    R = len(dfas)
    model = tomita.build_bank(n_states, R, seed=0)
    with torch.no_grad():
        model.state_networks.logits.fill_(-sharp)
        model.output_networks.logits.zero_()
        for r, (delta, acc) in enumerate(dfas):
            model.state_networks.logits[3 * r + tomita.START, 0, 0] = sharp  # START: x_0 = 1 -> state 1
            for j, row in enumerate(delta):
                for c, i in enumerate(row):
                    model.state_networks.logits[3 * r + c, i, j] = sharp
                model.output_networks.logits[r, j, int(j in acc)] = sharp
    return model


def test_bank_classifies_extracts_and_keeps_trials_independent():
    grammars = [4, 6, 2]
    bank = dfa_bank([tomita.DFAS[g] for g in grammars], n_states=5)
    _, _, test = tomita.datasets(4)
    strings = [s for s, _ in test]
    p = tomita.accept_prob(bank, strings, len(grammars))
    for r, g in enumerate(grammars):
        labels = torch.tensor([tomita.PREDICATES[g](s) for s in strings])
        assert ((p[r] > 0.5) == labels).all(), g
        dfa = tomita.extract_dfa(bank, r, 0.99)
        assert dfa is not None and tomita.equivalent(tomita.minimize(dfa), tomita.DFAS[g])
    # a trial whose transitions are not near 0/1 is not extracted
    with torch.no_grad():
        bank.state_networks.logits[3 * 1 + 0] = 0.0
    assert tomita.extract_dfa(bank, 1, 0.99) is None


@pytest.mark.parametrize("algorithm,lr", [("em", 0.0), ("gem", 0.5), ("gradient", 0.05)])
def test_training_the_bank_increases_the_likelihood(algorithm, lr):
    train, _, _ = tomita.datasets(1)
    bank = tomita.build_bank(2, 3, seed=5)
    u, u_out, mask, last = tomita.encode([s for s, _ in train], 3)
    y = torch.tensor([lab for _, lab in train]).repeat(3)[:, None].expand_as(u)
    tm = torch.zeros_like(mask)
    tm[torch.arange(len(last)), last] = True
    before = bank.log_likelihood(u, y, tm, mask, u_out).view(3, -1).sum(1)
    tomita.train_bank(bank, train, 3, algorithm=algorithm, max_iter=30, tol=0, lr=lr)
    after = bank.log_likelihood(u, y, tm, mask, u_out).view(3, -1).sum(1)
    assert (after > before).all()


def test_smoke_run_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "tomita.json"
    tomita.main(["--grammars", "1", "4", "--sizes", "2", "4", "--trials", "3", "--max-iter", "15",
                 "--out", str(out)])
    text = capsys.readouterr().out
    assert "Grammar" in text and "paper (Table 1)" in text
    res = json.loads(out.read_text())["results"]
    assert [r["grammar"] for r in res] == [1, 4]
    for r in res:
        assert r["n_star"] in (2, 4) and r["fsa_min"] == tomita.PAPER[r["grammar"]][1]
        ps = r["per_size"][str(r["n_star"])]
        assert len(ps["test_acc"]) == 3 and all(0 <= a <= 1 for a in ps["test_acc"])
        assert r["convergence"] == sum(ps["converged"]) / 3
    with pytest.raises(SystemExit):
        tomita.main(["--trials", "0"])
