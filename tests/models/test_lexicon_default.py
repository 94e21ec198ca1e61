"""The default lexicon: a new direct HMM is separable, a checkpoint keeps the lexicon it was saved with.

``--lexicon`` has the explicit default ``separable`` (fairseq-train's parsing fills it), and the architecture
functions give saved args that lack the key, those of checkpoints from before the option, the softmax lexicon they
were trained with. The frozen checkpoints under tests/data/checkpoints are such checkpoints: they load as softmax
and score as recorded (float64, 1e-6), here without the `slow` mark of their full comparison.
"""
import argparse
import os
import subprocess
import sys

import checkpoint_fixtures as cf
import pytest
import torch
from dhmm_testlib import build

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
ARCHS = ["transformer_dhmm", "transformer_dhmm_first_order", "transformer_dhmm_iwslt_de_en",
         "transformer_dhmm_agreement", "transformer_dhmm_first_order_agreement"]
DHMM_FIXTURES = [name for name, (kind, _, _) in cf.FIXTURES.items() if kind == "dhmm"]
EXPECTED = cf.read_expected()["fixtures"]


def decoders(model):
    """The direct-HMM decoders of a model: one, or the two directions of an agreement model."""
    return [model.fwd.decoder, model.rev.decoder] if hasattr(model, "fwd") else [model.decoder]


@pytest.mark.parametrize("arch", ARCHS)
def test_a_new_model_without_lexicon_is_separable_and_an_asked_one_is_kept(arch):
    model, d = build(arch)
    assert [dec.lexicon_kind for dec in decoders(model)] == ["separable"] * len(decoders(model))
    for kind in ("softmax", "class"):
        model, _ = build(arch, d, extra=["--lexicon", kind])
        assert {dec.lexicon_kind for dec in decoders(model)} == {kind}


def test_saved_args_without_the_key_get_softmax_and_unset_args_the_default():
    from hmm_nmt.models.transformer_dhmm import DEFAULT_LEXICON, transformer_dhmm, transformer_dhmm_first_order

    assert DEFAULT_LEXICON == "separable"
    for arch_fn in (transformer_dhmm, transformer_dhmm_first_order):
        old = argparse.Namespace()  # the saved args of a checkpoint from before --lexicon
        arch_fn(old)
        assert old.lexicon == "softmax"
        unset = argparse.Namespace(lexicon=None)  # parsed, not given, no parser default
        arch_fn(unset)
        assert unset.lexicon == "separable"
        named = argparse.Namespace(lexicon="class")
        arch_fn(named)
        assert named.lexicon == "class"


def _score64(name, model, task, criterion):
    return cf.score(cf.FIXTURES[name][0], model.double(), task, criterion, EXPECTED[name]["batch"])


def _mismatches(got, expected):
    return [k for k in expected if not torch.allclose(torch.tensor(got[k], dtype=torch.float64),
                                                      torch.tensor(expected[k], dtype=torch.float64),
                                                      rtol=cf.TOL64, atol=cf.TOL64)]


@pytest.mark.parametrize("name", DHMM_FIXTURES)
def test_a_checkpoint_from_before_the_option_loads_as_softmax_and_scores_the_same(name):
    state = load_checkpoint_state(os.path.join(cf.FIXTURE_DIR, f"{name}.pt"))
    assert not hasattr(state["cfg"]["model"], "lexicon")  # what makes it an old checkpoint
    model, task, criterion = cf.load(name)
    assert {dec.lexicon_kind for dec in decoders(model)} == {"softmax"}
    expected = EXPECTED[name]["float64"]
    assert _mismatches(_score64(name, model, task, criterion), expected) == []


@pytest.mark.parametrize("lexicon", ["softmax", "separable"])
def test_a_checkpoint_keeps_the_lexicon_its_args_name(lexicon, tmp_path):
    from fairseq import checkpoint_utils

    name = "transformer_dhmm_first_order"
    state = load_checkpoint_state(os.path.join(cf.FIXTURE_DIR, f"{name}.pt"))
    state["cfg"]["model"].lexicon = lexicon  # the two lexicons share their parameters: the weights load either way
    path = tmp_path / f"{lexicon}.pt"
    torch.save(state, path)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=cf.load_overrides(name),
                                                                      strict=True)
    model = models[0].eval()
    assert model.decoder.lexicon_kind == lexicon
    bad = _mismatches(_score64(name, model, task, task.build_criterion(cfg.criterion)), EXPECTED[name]["float64"])
    if lexicon == "softmax":
        assert bad == []
    else:  # really the other lexicon: every score moves
        assert "sentence_logprob" in bad and "dp_sentence_nll" in bad


def test_fairseq_train_without_lexicon_saves_a_separable_checkpoint(tmp_path):
    raw, data, save = tmp_path / "raw", tmp_path / "bin", tmp_path / "ck"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw),
                    "--train", "60", "--valid", "10", "--test", "10"], check=True, capture_output=True, env=ENV)

    def fairseq(tool, *args):
        proc = subprocess.run([sys.executable, "-m", f"fairseq_cli.{tool}", *args], env=ENV, cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]

    fairseq("preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", f"{raw}/train",
            "--validpref", f"{raw}/valid", "--destdir", str(data), "--joined-dictionary", "--workers", "1")
    fairseq("train", str(data), "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--arch", "transformer_dhmm",
            "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
            "--decoder-attention-heads", "2", "--share-all-embeddings", "--criterion",
            "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.001",
            "--max-tokens", "500", "--max-update", "2", "--save-dir", str(save), "--no-epoch-checkpoints",
            "--num-workers", "0", "--no-progress-bar", "--cpu")
    state = load_checkpoint_state(save / "checkpoint_last.pt")
    assert state["cfg"]["model"].lexicon == "separable"
    assert state["optimizer_history"][-1]["num_updates"] == 2

    from fairseq import checkpoint_utils

    import hmm_nmt  # noqa: F401
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(save / "checkpoint_last.pt")],
                                                                 arg_overrides={"data": str(data)})
    assert models[0].decoder.lexicon_kind == "separable"


def test_init_fwd_refuses_a_checkpoint_of_another_lexicon(tmp_path):
    # the lexicons share their parameter names: without the check the weights would load into the other lexicon
    from fairseq import checkpoint_utils

    from hmm_nmt.models.dhmm_agreement import load_direction

    name = "transformer_dhmm_first_order"
    old = os.path.join(cf.FIXTURE_DIR, f"{name}.pt")  # saved before --lexicon: softmax
    state = load_checkpoint_state(old)
    state["cfg"]["model"].lexicon = "separable"
    torch.save(state, tmp_path / "separable.pt")
    separable = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "separable.pt")],
                                                              arg_overrides=cf.load_overrides(name))[0][0]
    with pytest.raises(ValueError, match="its lexicon is softmax, this model's separable: train with --lexicon softmax"):
        load_direction(separable, old, "transformer_dhmm_first_order_agreement", 1)
    softmax, _, _ = cf.load(name)
    with pytest.raises(ValueError, match="its lexicon is separable, this model's softmax"):
        load_direction(softmax, str(tmp_path / "separable.pt"), "transformer_dhmm_first_order_agreement", 1)
    load_direction(softmax, old, "transformer_dhmm_first_order_agreement", 1)  # the same lexicon loads
