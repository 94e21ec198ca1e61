"""Real fairseq command lines on the embedded toy corpus: train, generate, interactive, hub, bad input."""
import json
import os
import re
import subprocess
import sys

import pytest

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_DIR = os.path.join(ROOT, "hmm_nmt")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
SMALL = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
         "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
         "--decoder-attention-heads", "2", "--share-all-embeddings"]


def fairseq(tool, *args, input=None, check=True):
    proc = subprocess.run([sys.executable, "-m", f"fairseq_cli.{tool}", *args], env=ENV, cwd=ROOT,
                          capture_output=True, text=True, input=input, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"fairseq-{tool} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def train_inner_logs(output):
    """The per-update records of fairseq-train's --log-format json output."""
    return [json.loads(line[line.index("{"):]) for line in output.splitlines() if "| train_inner |" in line]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    work = tmp_path_factory.mktemp("toy")
    raw = work / "raw"
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "toy", "generate.py"), "--out", str(raw),
                    "--train", "800", "--valid", "60", "--test", "40"], check=True, capture_output=True)
    fairseq("preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", f"{raw}/train",
            "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir", str(work / "bin"),
            "--joined-dictionary", "--workers", "1")
    return work


def train(toy, name, *extra):
    save = toy / name
    proc = fairseq("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm", *SMALL,
                   "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                   "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "10",
                   "--max-tokens", "2000", "--max-epoch", "4", "--save-dir", str(save), "--no-epoch-checkpoints",
                   "--seed", "1", "--num-workers", "0", "--no-progress-bar", "--log-format", "simple", *extra)
    losses = [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", proc.stderr + proc.stdout)]
    return save, losses


@pytest.fixture(scope="module", params=[0, 1], ids=["order0", "order1"])
def trained(request, toy):
    save, losses = train(toy, f"ckpt{request.param}", "--alignment-order", str(request.param))
    return request.param, save, losses


@pytest.mark.slow
def test_training_lowers_validation_loss(trained):
    _, save, losses = trained
    assert len(losses) == 4, losses
    assert losses[-1] < losses[0] - 0.5, losses
    assert (save / "checkpoint_best.pt").exists()


@pytest.mark.slow
def test_generate_loads_checkpoint_and_prints_alignments(trained, toy):
    _, save, _ = trained
    proc = fairseq("generate", str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_best.pt"),
                   "--beam", "5", "--batch-size", "16", "--required-batch-size-multiple", "1", "--print-alignment")
    hyps = re.findall(r"^H-(\d+)\t", proc.stdout, re.M)
    aligns = re.findall(r"^A-(\d+)\t(.*)$", proc.stdout, re.M)
    assert len(hyps) == 40 and len(aligns) == 40
    assert all(re.fullmatch(r"(\d+-\d+ ?)+", a.strip()) for _, a in aligns)
    assert "weights_only" not in proc.stderr


@pytest.mark.slow
def test_generate_translates_every_sentence_of_a_set_not_a_multiple_of_8(trained, toy):
    """fairseq 0.12 drops the last batch when it is not a multiple of --required-batch-size-multiple (8):
    the 60 valid sentences would come out as 56 (hmm_nmt.compat.batch_tail)."""
    _, save, _ = trained
    proc = fairseq("generate", str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_best.pt"),
                   "--gen-subset", "valid", "--beam", "2", "--batch-size", "16")
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", proc.stdout, re.M)) == list(range(60))


@pytest.mark.slow
def test_interactive_translates(trained, toy):
    _, save, _ = trained
    first = open(toy / "raw" / "test.src").readline()
    args = [str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_best.pt"),
            "--source-lang", "src", "--target-lang", "tgt", "--beam", "3"]
    proc = fairseq("interactive", *args, input=first)
    assert re.search(r"^H-0\t-?[\d.]+\t\S+", proc.stdout, re.M)


@pytest.mark.slow
def test_generate_and_interactive_translate_an_empty_source_line(trained, toy, tmp_path):
    """An empty source line (EOS alone) is translated like any other, as by the plain transformer: every
    line of the set gets its hypothesis, in fairseq-generate (binarized) and fairseq-interactive (batched)."""
    _, save, _ = trained
    lines = open(toy / "raw" / "test.src").read().splitlines()[:6]
    lines[3] = ""
    (tmp_path / "t.src").write_text("\n".join(lines) + "\n")
    (tmp_path / "t.tgt").write_text("\n".join(open(toy / "raw" / "test.tgt").read().splitlines()[:6]) + "\n")
    fairseq("preprocess", "--source-lang", "src", "--target-lang", "tgt", "--testpref", str(tmp_path / "t"),
            "--destdir", str(tmp_path / "bin"), "--srcdict", str(toy / "bin" / "dict.src.txt"),
            "--tgtdict", str(toy / "bin" / "dict.tgt.txt"), "--workers", "1")
    ckpt = str(save / "checkpoint_best.pt")
    gen = fairseq("generate", str(tmp_path / "bin"), "--user-dir", USER_DIR, "--path", ckpt, "--beam", "3",
                  "--batch-size", "8", "--required-batch-size-multiple", "1")
    assert sorted(int(i) for i in re.findall(r"^H-(\d+)\t", gen.stdout, re.M)) == list(range(6)), gen.stdout
    assert re.search(r"^S-3\t$", gen.stdout, re.M), gen.stdout  # the empty source, translated
    inter = fairseq("interactive", str(toy / "bin"), "--user-dir", USER_DIR, "--path", ckpt, "--source-lang", "src",
                    "--target-lang", "tgt", "--beam", "3", "--buffer-size", "6", "--batch-size", "6",
                    input="\n".join(lines) + "\n")
    hyps = dict(re.findall(r"^H-(\d+)\t-?[\d.]+\t(.*)$", inter.stdout, re.M))
    assert sorted(int(i) for i in hyps) == list(range(6)), inter.stdout
    assert "Traceback" not in inter.stderr


@pytest.mark.slow
def test_hub_interface_translates(trained, toy):
    _, save, _ = trained
    from hmm_nmt.models.transformer_dhmm import TransformerDHMMModel

    hub = TransformerDHMMModel.from_pretrained(str(save), checkpoint_file="checkpoint_best.pt",
                                               data_name_or_path=str(toy / "bin"), source_lang="src", target_lang="tgt")
    first = open(toy / "raw" / "test.src").readline().strip()
    out = hub.translate(first, beam=3)
    assert isinstance(out, str) and len(out.split()) >= 1


@pytest.mark.slow
def test_unknown_alignment_order_is_refused(toy):
    proc = fairseq("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm",
                   "--alignment-order", "2", "--max-update", "1", check=False)
    assert proc.returncode != 0
    assert "--alignment-order" in proc.stderr and "invalid choice" in proc.stderr


@pytest.mark.slow
def test_missing_data_directory_is_refused(tmp_path):
    missing = tmp_path / "no-such-data-bin"
    proc = fairseq("train", str(missing), "--user-dir", USER_DIR, "--arch", "transformer_dhmm",
                   "--criterion", "dhmm_label_smoothed_cross_entropy", "--max-tokens", "100", "--max-update", "1",
                   check=False)
    assert proc.returncode != 0
    assert str(missing) in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("order", [0, 1])
def test_train_and_generate_with_topk_and_bf16(toy, order):
    save = toy / f"fast{order}"
    proc = fairseq("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm", *SMALL,
                   # bf16 as asked (order 0), or auto: bf16 only where the CPU has it natively (order 1)
                   "--alignment-order", str(order), "--lexicon-topk", "2", "--lexicon-dtype", ["bf16", "auto"][order],
                   "--lexicon", "softmax",  # --lexicon-dtype is the softmax lexicon's
                   # both criteria through the CLI: the bound (order 0), the pruned model's likelihood (order 1)
                   "--lexicon-topk-objective", ["bound", "pruned"][order],
                   "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                   "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "2000", "--max-epoch", "2",
                   "--save-dir", str(save), "--no-epoch-checkpoints", "--seed", "1", "--num-workers", "0",
                   "--no-progress-bar", "--log-format", "simple")
    masses = [float(x) for x in re.findall(r"valid on 'valid' subset .*\| align_mass ([\d.]+)", proc.stderr + proc.stdout)]
    assert len(masses) == 2 and all(0 < m <= 1 for m in masses), masses
    if order == 1:  # auto says what it chose, once
        assert len(re.findall(r"--lexicon-dtype auto: (?:bf16|fp32) on cpu", proc.stderr + proc.stdout)) == 1
    gen = fairseq("generate", str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_last.pt"),
                  "--beam", "5", "--batch-size", "16", "--required-batch-size-multiple", "1", "--print-alignment")
    assert len(re.findall(r"^H-\d+\t", gen.stdout, re.M)) == 40
    # K is a decoding choice too: exact (0) and K=1 decoding of the same checkpoint, scored on the references
    scores = {}
    for k in (0, 1):
        out = fairseq("generate", str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_last.pt"),
                      "--score-reference", "--batch-size", "16", "--required-batch-size-multiple", "1",
                      "--model-overrides", f"{{'lexicon_topk': {k}}}").stdout
        scores[k] = [float(x) for x in re.findall(r"^H-\d+\t(\S+)\t", out, re.M)]
        assert len(scores[k]) == 40
    assert scores[0] != scores[1]


@pytest.mark.slow
@pytest.mark.parametrize("order", [0, 1])
def test_train_and_generate_with_the_class_lexicon(toy, order):
    save, losses = train(toy, f"class{order}", "--alignment-order", str(order), "--lexicon", "class",
                         "--max-epoch", "2")
    assert len(losses) == 2 and losses[-1] < losses[0], losses

    state = load_checkpoint_state(save / "checkpoint_last.pt")
    class_of = state["model"]["decoder.lexicon_class_of"]
    assert state["cfg"]["model"].lexicon == "class" and int(class_of.max()) + 1 <= round(len(class_of) ** 0.5)
    gen = fairseq("generate", str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_last.pt"),
                  "--beam", "5", "--batch-size", "16", "--required-batch-size-multiple", "1", "--print-alignment")
    assert len(re.findall(r"^H-\d+\t", gen.stdout, re.M)) == 40
    assert len(re.findall(r"^A-\d+\t", gen.stdout, re.M)) == 40
    # the exact mixture and --lexicon-topk 1 decoding of the same checkpoint, scored on the references
    scores = {}
    for k in (0, 1):
        out = fairseq("generate", str(toy / "bin"), "--user-dir", USER_DIR, "--path", str(save / "checkpoint_last.pt"),
                      "--score-reference", "--batch-size", "16", "--required-batch-size-multiple", "1",
                      "--model-overrides", f"{{'lexicon_topk': {k}}}").stdout
        scores[k] = [float(x) for x in re.findall(r"^H-\d+\t(\S+)\t", out, re.M)]
        assert len(scores[k]) == 40 and all(x < 0 for x in scores[k])
    assert scores[0] != scores[1]


@pytest.mark.slow
def test_topk_warmup_switches_at_the_trainer_update_count(toy):
    # fairseq's task calls model.set_num_updates every update: exact likelihood (no align_mass logged) for the
    # first 3 updates, then the top-1 bound (align_mass < 1 logged), for the updates fairseq-train counts
    proc = fairseq("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm", *SMALL,
                   "--lexicon-topk", "1", "--lexicon-topk-warmup", "3", "--lexicon-topk-objective", "bound", "--criterion",
                   "dhmm_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "500",
                   "--max-update", "6", "--log-interval", "1", "--save-dir", str(toy / "warm"), "--no-save",
                   "--seed", "1", "--num-workers", "0", "--no-progress-bar", "--log-format", "json")
    logs = train_inner_logs(proc.stdout + proc.stderr)
    assert [int(r["num_updates"]) for r in logs] == [1, 2, 3, 4, 5, 6]
    # the loss of update u is computed with the counter at u - 1
    assert ["align_mass" in r for r in logs] == [False, False, False, True, True, True]
    assert all(0 < float(r["align_mass"]) < 1 for r in logs[3:])


@pytest.mark.slow
def test_topk_schedule_prunes_then_trains_exactly_by_percentage_of_max_update(toy):
    # 1@0,0@50% with --max-update 6: the top-1 pruned likelihood (align_mass < 1 logged) for updates 1-3, the
    # exact one for 4-6; the percentage needs --max-update, which fairseq passes to the model's args
    proc = fairseq("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm", *SMALL,
                   "--lexicon-topk-schedule", "1@0,0@50%", "--lexicon-topk-objective", "pruned", "--criterion",
                   "dhmm_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "500",
                   "--max-update", "6", "--log-interval", "1", "--save-dir", str(toy / "sched"), "--no-save",
                   "--seed", "1", "--num-workers", "0", "--no-progress-bar", "--log-format", "json")
    logs = train_inner_logs(proc.stdout + proc.stderr)
    assert [int(r["num_updates"]) for r in logs] == [1, 2, 3, 4, 5, 6]
    # fairseq keeps a meter once created: after the switch it is logged empty (None)
    assert [r.get("align_mass") is not None for r in logs] == [True, True, True, False, False, False]
    assert all(0 < float(r["align_mass"]) < 1 for r in logs[:3])


@pytest.mark.slow
def test_a_plateau_starts_the_next_topk_step_in_plain_fairseq_train_and_survives_a_resume(toy):
    # lr 0: the validation loss is flat, so --patience 2 with a validation every 2 updates would stop at 6; the
    # schedule 1@0,0@1000 still has its exact step to come, so that step starts at 6 and patience stops at 10
    def run(save, max_update):
        proc = fairseq("train", str(toy / "bin"), "--user-dir", USER_DIR, "--arch", "transformer_dhmm", *SMALL,
                       "--lexicon-topk-schedule", "1@0,0@1000", "--criterion", "dhmm_label_smoothed_cross_entropy",
                       "--optimizer", "adam", "--lr", "0", "--lr-scheduler", "fixed", "--max-tokens", "500",
                       "--max-update", str(max_update), "--validate-interval-updates", "2", "--patience", "2",
                       "--log-interval", "1", "--save-dir", str(save), "--no-epoch-checkpoints", "--seed", "1",
                       "--num-workers", "0", "--no-progress-bar", "--log-format", "json")
        out = proc.stdout + proc.stderr
        logs = train_inner_logs(out)
        return out, logs

    out, logs = run(toy / "plateau", 40)
    assert "so its next step starts at update 6; training goes on" in out and out.count("early stop since") == 1
    assert int(logs[-1]["num_updates"]) == 10
    assert [r.get("align_mass") is not None for r in logs] == [True] * 6 + [False] * 4  # pruned, then exact


    save = toy / "plateau-resumed"
    out, _ = run(save, 8)  # the bound stops it after the switch at 6: the switch is in its checkpoint
    assert "starts at update 6" in out
    state = load_checkpoint_state(save / "checkpoint_last.pt")
    assert state["extra_state"]["hmm_nmt_topk_switches"] == [6]
    out, logs = run(save, 40)  # resumed: exact from the first update on, no second switch
    assert "starts at update" not in out and "early stop since" in out
    assert int(logs[0]["num_updates"]) == 9 and not any(r.get("align_mass") is not None for r in logs)


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["/no/such/data-bin", "--arch", "transformer_dhmm"], "fairseq-train: error: /no/such/data-bin: no such file"),
    (["BIN", "--arch", "transformer_dhmm", "--lexicon-topk", "2", "--lexicon-topk-warmup", "3",
      "--lexicon-topk-schedule", "2@0,0@10"], "fairseq-train: error: --lexicon-topk-warmup N is the schedule"),
])
def test_fairseq_train_reports_what_the_user_can_fix_in_one_line(toy, args, message):
    args = [str(toy / "bin") if a == "BIN" else a for a in args]
    proc = fairseq("train", *args, "--user-dir", USER_DIR, "--criterion", "dhmm_label_smoothed_cross_entropy",
                   "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "500", "--max-update", "1", "--no-save",
                   check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


class _NotAllowListed:
    pass


@pytest.mark.slow
def test_checkpoint_loading_allow_list(trained, toy, tmp_path):
    """Stock and re-saved (averaged-style, omegaconf cfg) checkpoints load with weights_only; others do not."""
    import pickle

    import torch
    from fairseq import checkpoint_utils

    import hmm_nmt  # noqa: F401

    _, save, _ = trained
    state = checkpoint_utils.load_checkpoint_to_cpu(str(save / "checkpoint_best.pt"))
    torch.save(state, tmp_path / "resaved.pt")  # what fairseq's average_checkpoints.py writes
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(tmp_path / "resaved.pt")], arg_overrides={"data": str(toy / "bin")})
    assert type(models[0]).__name__ == "TransformerDHMMModel"
    torch.save({"model": {}, "evil": _NotAllowListed()}, tmp_path / "other.pt")
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint_state(tmp_path / "other.pt")
