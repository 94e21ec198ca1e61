"""scripts/tune_lenpen.py: one n-best beam search re-ranked offline equals fairseq-generate run with each lenpen
(the finished hypotheses do not depend on lenpen, only their order), and the CLI picks the dev-best value."""
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from test_benchmark_seeds import run, toy_data

from benchmarks import tuning as tune_lenpen
from benchmarks.logs import parse_generate_output
from benchmarks.scoring import score

USER_DIR = os.path.join(ROOT, "hmm_nmt")
TUNE = os.path.join(ROOT, "scripts", "tune_lenpen.py")


def generate(data, ckpt, out, *extra):
    cmd = [sys.executable, "-m", "fairseq_cli.generate", str(data / "bin" / "de-en"), "--user-dir", USER_DIR,
           "--path", str(ckpt), "--gen-subset", "valid", "--beam", "5", "--batch-size", "8",
           "--required-batch-size-multiple", "1", "--remove-bpe", "@@ ", "--max-len-b", "12", *extra]
    with open(out, "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return out


@pytest.mark.slow
def test_rerank_equals_decoding_with_each_lenpen(tmp_path):
    data = toy_data(tmp_path)
    save = tmp_path / "ckpt"
    run([sys.executable, "-m", "fairseq_cli.train", str(data / "bin" / "de-en"), "--user-dir", USER_DIR,
         "--arch", "transformer_dhmm", "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
         "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
         "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--share-all-embeddings",
         "--criterion", "dhmm_label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", "3e-3",
         "--max-tokens", "400", "--max-update", "25", "--save-dir", str(save), "--no-epoch-checkpoints",
         "--disable-validation", "--num-workers", "0", "--seed", "1", "--no-progress-bar"])
    ckpt = save / "checkpoint_last.pt"
    nbest = tune_lenpen.parse_nbest(generate(data, ckpt, tmp_path / "nbest.out", "--nbest", "5", "--lenpen", "1.0"),
                                    20)
    assert all(1 <= len(h) <= 5 for h in nbest)
    picked = {}
    for lp in (0.2, 1.0, 3.0):
        direct = parse_generate_output(generate(data, ckpt, tmp_path / f"lp{lp}.out", "--lenpen", str(lp)), 20)
        picked[lp] = tune_lenpen.rerank(nbest, 1.0, lp)
        assert picked[lp] == direct
    assert picked[0.2] != picked[3.0]  # the lenpens really chose differently here

    refs = (data / "text" / "valid.en").read_text().splitlines()
    proc = run([sys.executable, TUNE, "--data", str(data), "--checkpoint", str(ckpt), "--lenpen", "0.2", "1.0", "3.0",
                "--generate-args", "--max-len-b 12", "--batch-size", "8", "--out", str(tmp_path / "t")])
    doc = json.loads((tmp_path / "t.json").read_text())
    bleus = {r["lenpen"]: r["bleu"] for r in doc["rows"]}
    for lp in (0.2, 1.0, 3.0):
        assert bleus[lp] == score(picked[lp], refs)["bleu"]
    best = max(bleus.values())
    assert bleus[doc["lenpen"]] == best and proc.stdout.strip().endswith(f"lenpen {doc['lenpen']:g}")
    assert "(chosen)" in (tmp_path / "t.md").read_text()

    bad = run([sys.executable, TUNE, "--data", str(tmp_path), "--checkpoint", str(ckpt)], check=False)
    assert bad.returncode == 2 and "no prepare.json" in bad.stderr
    bad = run([sys.executable, TUNE, "--data", str(data), "--checkpoint", str(tmp_path / "nope.pt")], check=False)
    assert bad.returncode == 2 and "nope.pt: no such file" in bad.stderr

    # --eos-penalty: each value is one real search under --task translation_eos_penalty, re-ranked per lenpen
    stock = generate(data, ckpt, tmp_path / "stock.out", "--nbest", "5")
    zero = generate(data, ckpt, tmp_path / "zero.out", "--nbest", "5", "--task", "translation_eos_penalty",
                    "--eos-penalty", "0")
    assert stock.read_text() == zero.read_text()
    pen = tune_lenpen.parse_nbest(generate(data, ckpt, tmp_path / "pen.out", "--nbest", "5", "--task",
                                           "translation_eos_penalty", "--eos-penalty", "2.0"), 20)
    assert [[h[0] for h in x] for x in pen] != [[h[0] for h in x] for x in nbest]  # the search itself changed
    proc = run([sys.executable, TUNE, "--data", str(data), "--checkpoint", str(ckpt), "--lenpen", "0.2", "1.0",
                "--eos-penalty", "0", "2", "--generate-args", "--max-len-b 12", "--batch-size", "8",
                "--out", str(tmp_path / "e")])
    doc = json.loads((tmp_path / "e.json").read_text())
    got = {(r["eos_penalty"], r["lenpen"]): r["bleu"] for r in doc["rows"]}
    assert set(got) == {(0.0, 0.2), (0.0, 1.0), (2.0, 0.2), (2.0, 1.0)}
    for lp in (0.2, 1.0):
        assert got[(0.0, lp)] == bleus[lp]
        assert got[(2.0, lp)] == score(tune_lenpen.rerank(pen, 1.0, lp), refs)["bleu"]
    assert got[(doc["eos_penalty"], doc["lenpen"])] == max(got.values())
    assert proc.stdout.strip().endswith(f"eos-penalty {doc['eos_penalty']:g} lenpen {doc['lenpen']:g}")
