"""The Multi30k recipe end to end: prepare.sh, run.sh and scripts/benchmark_translation.py on a few hundred
real sentences with tiny models, through the real command lines (subprocesses), including an interruption
and resumption.  Each runs on a generated corpus in the same layout (tests/multi30k_testlib.py) and, where
../shared/data/multi30k is present, on the real corpus too (skipped with that reason when absent)."""
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, SHARED_DATA, default_sigint, needs_shared
from multi30k_testlib import write_multi30k_like

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

MULTI30K = os.path.join(SHARED_DATA, "multi30k")
PREPARE = os.path.join(ROOT, "examples", "multi30k", "prepare.sh")
RUN = os.path.join(ROOT, "examples", "multi30k", "run.sh")
BENCH = os.path.join(ROOT, "scripts", "benchmark_translation.py")


N_TRAIN, N_VALID, N_TEST = 200, 30, 30  # 30 is no multiple of 8: fairseq's batch-multiple bug would drop some
MAX_UPDATE = 12
# tiny models, identical for the three slots; the decode length cap keeps untrained models from babbling
SMOKE = ["--embed-dim", "16", "--ffn-dim", "32", "--layers", "1", "--heads", "2", "--max-tokens", "600",
         "--lr", "1e-3", "--warmup-updates", "5", "--budget-minutes", "0", "--max-update", str(MAX_UPDATE),
         "--validate-interval-updates", "4", "--log-interval", "2", "--threads", "1", "--gen-batch-size", "16",
         "--average-best", "2", "--tune-lenpen", "", "--tune-eos-penalty", "",  # lenpen 1, stock search: step 4
         # compares with decode_topk.py's
         "--generate-args", "--max-len-b 12"]
EXPECTED = {  # slot -> (arch, criterion) the benchmark must have trained
    "transformer": ("transformer", "label_smoothed_cross_entropy"),
    "dhmm0": ("transformer_dhmm", "dhmm_label_smoothed_cross_entropy"),
    "dhmm0_fast": ("transformer_dhmm", "dhmm_label_smoothed_cross_entropy"),
}


def env():
    e = dict(os.environ)
    e["PYTHON"] = sys.executable
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e["OMP_NUM_THREADS"] = "1"
    e.pop("FAIRSEQ_INSTRUMENTED_INTERRUPT_AT", None)
    return e


def run(cmd, timeout=600, check=True, extra_env=None):
    e = env()
    e.update(extra_env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT,
                          preexec_fn=default_sigint)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.fixture(scope="module", params=[pytest.param("multi30k", marks=needs_shared("multi30k")), "generated"])
def multi30k_dir(request, tmp_path_factory):
    """The folder of Multi30k task 1 files the test reads: the real corpus, or the generated one."""
    if request.param == "multi30k":
        return MULTI30K
    return write_multi30k_like(str(tmp_path_factory.mktemp("multi30k_like")))


def source_lines(folder, name, n):
    with gzip.open(os.path.join(folder, name), "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


# --------------------------------------------------------------------------------------------- prepare.sh
def test_prepare_errors_are_clear(tmp_path, multi30k_dir):
    p = run([PREPARE, "--local", str(tmp_path / "nowhere"), "--dest", str(tmp_path / "d")], check=False)
    assert p.returncode != 0 and "nowhere is not a directory" in p.stderr
    # German and English of a split differ in length: named, and nothing half-written is left behind
    src = tmp_path / "src"
    src.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            lines = source_lines(multi30k_dir, f"{split}.lc.norm.tok.{lang}.gz", 5)
            if split == "val" and lang == "en":
                lines = lines[:4]
            (src / f"{split}.lc.norm.tok.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    p = run([PREPARE, "--local", str(src), "--dest", str(tmp_path / "d")], check=False)
    assert p.returncode != 0
    assert "val: German and English differ in length (5 vs 4 lines" in p.stderr
    assert str(src / "val.lc.norm.tok.en") in p.stderr
    assert not (tmp_path / "d").exists()
    p = run([PREPARE, "--local", str(src), "--dest", str(tmp_path / "d"), "--bpe", "wordpiece"], check=False)
    assert p.returncode != 0 and "--bpe must be subword-nmt or sentencepiece" in p.stderr
    (src / "val.lc.norm.tok.en").write_text("\n".join(source_lines(multi30k_dir, "val.lc.norm.tok.en.gz", 5)) + "\n")
    (src / "test_2016_flickr.lc.norm.tok.de").unlink()
    p = run([PREPARE, "--local", str(src), "--dest", str(tmp_path / "d")], check=False)
    assert p.returncode != 0 and "no test_2016_flickr file for 'de'" in p.stderr


@pytest.mark.slow
def test_prepare_official_layout_download_cased_sentencepiece(tmp_path, multi30k_dir):
    """--download from a file:// mirror of the official data/task1 layout (raw/*.gz, plain tok/ files), with
    --cased (sacremoses) and a joint SentencePiece model."""
    mirror = tmp_path / "mirror"
    (mirror / "raw").mkdir(parents=True)
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            lines = source_lines(multi30k_dir, f"{split}.{lang}.gz", 40)
            with gzip.open(mirror / "raw" / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
    dest = tmp_path / "data"
    run([PREPARE, "--download", "--url", mirror.as_uri(), "--download-dir", str(tmp_path / "dl"),
         "--dest", str(dest), "--cased", "--bpe", "sentencepiece", "--vocab-size", "300"])
    info = json.loads((dest / "prepare.json").read_text())
    assert info["bpe"] == "sentencepiece" and info["remove_bpe"] == "sentencepiece" and not info["lowercased"]
    assert info["sentences"] == {"train": 40, "valid": 40, "test": 40}
    assert (tmp_path / "dl" / "raw" / "train.de.gz").exists()
    # sacremoses: case kept, punctuation split off, XML-escaped like the official tok/ files
    assert read(dest / "text" / "train.en")[0] == "Two young , White males are outside near many bushes ."
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    for lang in ("de", "en"):
        norm, tok = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)
        expected = [tok.tokenize(norm.normalize(x), escape=True, return_str=True)
                    for x in source_lines(multi30k_dir, f"train.{lang}.gz", 40)]
        assert read(dest / "text" / f"train.{lang}") == expected
    # SentencePiece pieces decode back to the tokenised text (what fairseq's --remove-bpe sentencepiece does)
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            pieces = read(dest / "bpe" / f"{split}.{lang}")
            assert [p.replace(" ", "").replace("\u2581", " ").strip() for p in pieces] == \
                read(dest / "text" / f"{split}.{lang}")
    assert (dest / "bin" / "de-en" / "dict.de.txt").read_text() == (dest / "bin" / "en-de" / "dict.en.txt").read_text()


# --------------------------------------------------------------------------------------------- benchmark
def _table_rows(md):
    """The first table of ``md`` (results.md has the results table first, then training and length tables)."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    body = [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]
    return header, body


@pytest.mark.slow
def test_multi30k_smoke_benchmark_three_models(tmp_path, multi30k_dir):
    work = tmp_path / "work"
    prep = ["--local", multi30k_dir, "--train-lines", str(N_TRAIN), "--valid-lines", str(N_VALID),
            "--test-lines", str(N_TEST), "--merges", "400"]
    cmd = [RUN, "--work", str(work), *prep, "--", *SMOKE]
    out = work / "benchmark"

    # 1. interrupted (a simulated Ctrl-C after update 6 of the first model) ...
    p = run(cmd, check=False, extra_env={"FAIRSEQ_INSTRUMENTED_INTERRUPT_AT": "6"})
    assert p.returncode == 130, p.stderr[-3000:]
    assert "interrupted; run the same command again to resume" in p.stderr
    assert (out / "de-en" / "transformer" / "checkpoints" / "checkpoint_last.pt").exists()
    assert not (out / "de-en" / "transformer" / "train_done.json").exists()
    assert not (out / "results.json").exists()

    # 1b. ... killed with SIGKILL (the benchmark and its fairseq-train child, as an OOM kill or a lost node
    # would) once the second model has saved its first checkpoint ...
    ckpt = out / "de-en" / "dhmm0" / "checkpoints" / "checkpoint_last.pt"
    killed = subprocess.Popen(cmd, env=env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.time() + 600
    while not ckpt.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    assert ckpt.exists() and not (out / "de-en" / "dhmm0" / "train_done.json").exists()

    # 2. ... then the same command resumes from the checkpoints and completes all three models
    p = run(cmd)
    assert "resuming from" in p.stderr and "ETA all" in p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] is True
    rows = doc["results"]["de-en"]
    assert [r["slot"] for r in rows] == ["transformer", "dhmm0", "dhmm0_fast"]
    first = rows[0]
    assert first["fairseq_runs"] == 2 and len(first["resumed_at_updates"]) == 1
    assert 0 < first["resumed_at_updates"][0] < MAX_UPDATE
    second = rows[1]  # killed: resumed from its last checkpoint, trained to the end
    assert second["fairseq_runs"] == 2 and len(second["resumed_at_updates"]) == 1
    assert 0 < second["resumed_at_updates"][0] < MAX_UPDATE and second["updates"] == MAX_UPDATE
    refs = read(work / "data" / "text" / "test.en")
    assert len(refs) == N_TEST
    for r in rows:
        arch, crit = EXPECTED[r["slot"]]
        assert (r["arch"], r["criterion"]) == (arch, crit)
        train_args = json.loads((out / "de-en" / r["slot"] / "train_command.json").read_text())["fairseq_args"]
        assert train_args[train_args.index("--arch") + 1] == arch
        assert train_args[train_args.index("--criterion") + 1] == crit
        sizes = [train_args[train_args.index(f) + 1] for f in ("--encoder-embed-dim", "--decoder-layers", "--seed",
                                                                "--max-update", "--max-tokens", "--lr")]
        assert sizes == ["16", "1", "1", str(MAX_UPDATE), "600", "0.001"]
        assert r["updates"] == MAX_UPDATE
        assert r["parameters"] > 0 and r["train_tokens_per_second"] > 0
        assert r["decode_sentences"] == N_TEST and r["decode_sentences_per_second"] > 0
        assert r["decode_tokens_per_second"] > 0
        assert r["peak_train_rss_bytes"] > 50 * 2**20 and r["peak_decode_rss_bytes"] > 50 * 2**20
        curve = r["valid_curve"]
        assert [c["updates"] for c in curve] == sorted({c["updates"] for c in curve}) and curve[-1]["updates"] == MAX_UPDATE
        assert all(c["nll_loss"] > 0 for c in curve)
        assert 0 <= r["bleu"] <= 100 and r["ter"] >= 0 and 0 <= r["chrf"] <= 100 and r["length_ratio"] > 0
        assert len(read(out / "de-en" / r["slot"] / "test.hyp")) == N_TEST  # every test sentence translated
    # scored as the sacrebleu command line scores the hypothesis files
    hyps = [str(out / "de-en" / r["slot"] / "test.hyp") for r in rows]
    cli = subprocess.run([sys.executable, "-m", "sacrebleu", str(work / "data" / "text" / "test.en"), "-i", *hyps,
                          "-tok", "none", "-lc", "--chrf-lowercase", "-m", "bleu", "ter", "chrf", "-b", "-w", "4"],
                         capture_output=True, text=True, check=True)
    for r, ref_scores in zip(rows, json.loads(cli.stdout)):
        assert (round(r["bleu"], 4), round(r["ter"], 4), round(r["chrf"], 4)) == \
            (float(ref_scores["BLEU"]), float(ref_scores["TER"]), float(ref_scores["chrF2"]))
    # the three are different models of the same size settings
    assert len({r["parameters"] for r in rows}) >= 2
    # the CPU path: top-4 pruned until 80% of --max-update, then exact; the lexicon in bf16 only where the
    # machine multiplies bf16 natively (auto)
    fast = json.loads((out / "de-en" / "dhmm0_fast" / "train_command.json").read_text())["fairseq_args"]
    assert fast[fast.index("--lexicon-topk-schedule") + 1] == "4@0,0@80%"
    assert fast[fast.index("--lexicon-dtype") + 1] == "auto"
    masses = [json.loads(line[line.index("{"):]).get("align_mass")
              for line in (out / "de-en" / "dhmm0_fast" / "train.log").read_text().splitlines()
              if "| train_inner |" in line]
    assert masses[0] is not None and masses[-1] is None  # pruned first, exact at the end

    # decoded with the parameter average of the two best checkpoints on validation
    import torch

    for r in rows:
        assert r["checkpoint_selection"] == "average of the 2 best on validation"
        ckpt_dir = out / "de-en" / r["slot"] / "checkpoints"
        best = sorted(ckpt_dir.glob("checkpoint.best_loss_*.pt"))
        assert len(best) == 2
        states = [load_checkpoint_state(p)["model"] for p in best]
        avg = load_checkpoint_state(out / r["checkpoint"])["model"]
        assert set(avg) == set(states[0])
        for k, v in avg.items():
            # fairseq's average_checkpoints sums then divides in the parameters' dtype, as this line does:
            # equal up to an ulp whatever the CPU
            torch.testing.assert_close(v, (states[0][k] + states[1][k]) / 2, rtol=1e-6, atol=1e-7)
        assert any(not torch.equal(states[0][k], states[1][k]) for k in avg)  # two different checkpoints

    # Markdown table: one complete row per model
    header, body = _table_rows((out / "results.md").read_text())
    assert header[:8] == ["model", "arch", "params", "updates", "BLEU", "TER", "chrF", "len ratio"]
    assert len(body) == 3
    for cells, r in zip(body, rows):
        assert len(cells) == len(header) and all(cells)
        assert cells[1] == f"`{r['arch']}`" and float(cells[4]) == round(r["bleu"], 2)
        assert all(re.fullmatch(r"[\d,.]+", c) for c in cells[2:])
    # plots are real PNG images
    import matplotlib.image as mpimg

    for name in ("valid_loss.de-en.png", "throughput.de-en.png"):
        img = mpimg.imread(out / name)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0

    # 3. a third run has nothing left to do
    p = run(cmd)
    assert p.stderr.count("training already done") == 3 and p.stderr.count("decoding already done") == 3
    assert json.loads((out / "results.json").read_text())["results"] == doc["results"]

    # 4. scripts/decode_topk.py: decode-time K; K = 0 is the benchmark's own (exact) decoding of that checkpoint
    dhmm0 = next(r for r in rows if r["slot"] == "dhmm0")
    p = run([sys.executable, os.path.join(ROOT, "scripts", "decode_topk.py"), "--data", str(work / "data"),
             "--checkpoint", str(out / dhmm0["checkpoint"]), "--subset", "test", "--k", "0", "1",
             "--batch-size", "16", "--generate-args", "--max-len-b 12", "--out", str(tmp_path / "k")])
    k_rows = json.loads((tmp_path / "k.json").read_text())["rows"]
    assert [r["k"] for r in k_rows] == [0, 1]
    assert k_rows[0]["bleu"] == pytest.approx(dhmm0["bleu"]) and k_rows[0]["ter"] == pytest.approx(dhmm0["ter"])
    assert all(r["decode_sentences"] == N_TEST and r["decode_sentences_per_second"] > 0 for r in k_rows)
    assert "| exact |" in p.stdout and "| 1 |" in p.stdout
    p = run([sys.executable, os.path.join(ROOT, "scripts", "decode_topk.py"), "--data", str(work / "data"),
             "--checkpoint", str(tmp_path / "nope.pt")], check=False)
    assert p.returncode == 2 and "nope.pt: no such file" in p.stderr

    # 5. other training settings on the same output are refused, naming the difference
    p = run([sys.executable, BENCH, "--data", str(work / "data"), "--out", str(out), *SMOKE, "--lr", "0.002"],
            check=False)
    assert p.returncode == 1 and "other training settings" in p.stderr and "lr: 0.001 -> 0.002" in p.stderr


@pytest.mark.slow
def test_benchmark_rejects_bad_data_dir(tmp_path):
    p = run([sys.executable, BENCH, "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--max-update", "1"],
            check=False)
    assert p.returncode == 1 and f"{tmp_path}/prepare.json not found" in p.stderr
    (tmp_path / "prepare.json").write_text(json.dumps({"config": "x", "directions": {"de-en": "bin/de-en"}}))
    p = run([sys.executable, BENCH, "--data", str(tmp_path), "--out", str(tmp_path / "o")], check=False)
    assert p.returncode == 1 and "give a training budget" in p.stderr
    p = run([sys.executable, BENCH, "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--max-update", "1",
             "--directions", "fr-en"], check=False)
    assert p.returncode == 1 and "'fr-en' is not in" in p.stderr
    p = run([sys.executable, BENCH, "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--max-update", "1",
             "--arch", "dhmm2=transformer"], check=False)
    assert p.returncode == 1 and "unknown slot 'dhmm2'" in p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("preset,expected", [
    ("converge", {"--patience": "8", "--max-update": "24000", "--embed-dim": "128", "--layers": "2"}),
    ("ladder", {"--patience": "8", "--max-update": "12000", "--embed-dim": "256", "--layers": "3",
                "--ffn-dim": "1024", "--max-tokens": "4096", "--lr": "1e-3", "--warmup-updates": "1000",
                "--models": "transformer,dhmm0_fast"}),
])
def test_run_presets_are_the_converged_protocols(tmp_path, preset, expected, multi30k_dir):
    # the benchmark is replaced by a stub that records its arguments: what the preset passes, after the
    # recipe's defaults and before the user's (argparse keeps the last value)
    stub = tmp_path / "python"
    stub.write_text(f"#!/bin/sh\ncase \"$1\" in *benchmark_translation.py) shift; printf '%s\\n' \"$@\" > "
                    f"{tmp_path}/args; exit 0 ;; esac\nexec {sys.executable} \"$@\"\n")
    stub.chmod(0o755)
    work = tmp_path / "work"
    prep = ["--local", multi30k_dir, "--train-lines", "60", "--valid-lines", "10", "--test-lines", "10"]
    run([RUN, "--work", str(work), "--preset", preset, *prep, "--", "--seed", "2"], extra_env={"PYTHON": str(stub)})
    args = (tmp_path / "args").read_text().splitlines()
    last = {flag: args[len(args) - 1 - args[::-1].index(flag) + 1] for flag in expected}
    assert last == expected
    assert "--dev-bleu" in args and args[-2:] == ["--seed", "2"]
    config = json.loads((work / "data" / "prepare.json").read_text())["config"]
    assert f"merges={8000 if preset == 'ladder' else 2000};" in config
    p = run([RUN, "--preset", "big"], check=False)
    assert p.returncode == 2 and "--preset must be converge or ladder, got 'big'" in p.stderr
