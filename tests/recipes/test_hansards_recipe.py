"""The English-French Hansards recipe (examples/hansards/): the normalization (hand-worked examples, and on the
real gold files: every Sure and Possible link stays inside its normalized sentence) and run.sh end to end on a
tiny embedded corpus in the shared folder's layout (real fairseq-train, real scripts/align_variants.py and
hmm-nmt-align, real hmm-nmt-aer)."""
import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, SHARED_DATA, needs_shared

from hmm_nmt_align.safe_checkpoint import load_checkpoint_state

HANSARDS = os.path.join(SHARED_DATA, "hansards_enfr")
RUN = os.path.join(ROOT, "examples", "hansards", "run.sh")

_spec = importlib.util.spec_from_file_location("hansards_normalize",
                                               os.path.join(ROOT, "examples", "hansards", "normalize.py"))
norm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(norm)


# --------------------------------------------------------------------------------------------- normalization
def test_train_side_matches_the_gold_conventions():
    f = norm.normalize_train_line
    # elisions expanded (l' -> le always), du/des/au/aux decomposed, accents and case gone, aujourd' hui kept
    assert f("C'est un Canadien qui a decouvert l'insuline aujourd'hui.", "fr") == \
        "ce est un canadien qui a decouvert le insuline aujourd' hui ."
    assert f("Le president du comite parle des droits au nom des aux.", "fr") == \
        "le president de le comite parle de les droits a le nom de les a les ."
    assert f("PREMIERE SESSION-36E LEGISLATURE", "fr") == "premiere session - 36e legislature"
    # s'il -> se il, qu'elle -> que elle, jusqu'ici -> jusque ici; a-t-il -> a il; au-dessus keeps its au
    assert f("S'il dit qu'elle est ici jusqu'ici, a-t-il raison au-dessus?", "fr") == \
        "se il dit que elle est ici jusque ici , a il raison au - dessus ?"
    assert f("Élevé à Montréal", "fr") == "eleve a montreal"
    # English: negations as the gold writes them, 's split, hyphens as the gold's " - "
    assert f("I don't think we can't, it isn't the government's co-operation.", "en") == \
        "i do not think we cannot , it is not the government 's co - operation ."
    assert f("Mr. Speaker, the hon. member won't.", "en") == "mr. speaker , the hon. member will not ."


def test_gold_side_keeps_every_word():
    toks = "Là « Élevé » -LRB- M. Caccia -RRB- de le aujourd' hui".split()
    out = norm.normalize_gold_tokens(toks)
    assert out == ['la', '"', 'eleve', '"', '(', 'm.', 'caccia', ')', 'de', 'le', "aujourd'", 'hui']
    assert len(out) == len(toks)


def test_trial_links_become_one_based_english_first():
    assert norm.convert_trial_links("0-0 1-1-P 3-2-P 9-0") == "1-1 2p2 3p4 1-10"
    assert norm.convert_trial_links("") == ""
    with pytest.raises(ValueError):
        norm.convert_trial_links("1-2-X")


@needs_shared("hansards_enfr")
def test_real_gold_links_stay_in_range(tmp_path):
    """The 447 test and 37 trial pairs: normalized word counts equal the gold's, every link (Sure and Possible,
    the 1-based i-j/ipj file, the original NAACL answers and the 0-based French-first trial file) is in range."""
    from hmm_nmt_align.io import read_naacl, read_pharaoh

    out = tmp_path / "gold"
    assert norm.write_gold(HANSARDS, str(out)) == {"test": 447, "trial": 37}

    def lens(name):
        return [len(line.split()) for line in (out / name).read_text(encoding="utf-8").splitlines()]

    en, fr = lens("test.en"), lens("test.fr")
    pairs = norm.read_src_tgt(os.path.join(HANSARDS, "gold", "enfr.src-tgt"))
    assert en == [len(e) for e, _ in pairs] and fr == [len(f) for _, f in pairs]
    gold = read_pharaoh(str(out / "test.gold"), one_based=True, src_lens=en, tgt_lens=fr)  # raises if out of range
    assert sum(len(a.sure) for a in gold) == 4038
    assert sum(len(a.possible - a.sure) for a in gold) == 13400
    # the original Latin-1 release: the same words after normalization, the NAACL answers in range and equal
    orig = os.path.join(HANSARDS, "gold", "wpt03_original")
    te = norm.read_wpt_sentences(os.path.join(orig, "test", "test.e"))
    tf = norm.read_wpt_sentences(os.path.join(orig, "test", "test.f"))
    assert [" ".join(norm.normalize_gold_tokens(w)) for _, w in te] == (out / "test.en").read_text().splitlines()
    assert [" ".join(norm.normalize_gold_tokens(w)) for _, w in tf] == (out / "test.fr").read_text().splitlines()
    snums = [s for s, _ in te]
    answers = tmp_path / "answers.naacl"  # sentence numbers renumbered 1..447 in file order
    index = {s: k + 1 for k, s in enumerate(snums)}
    with open(os.path.join(orig, "answers", "test.wa.nonullalign"), encoding="latin-1") as f:
        answers.write_text("".join(f"{index[int(p[0])]} {' '.join(p[1:])}\n" for p in (line.split() for line in f)
                                   if p))
    naacl = read_naacl(str(answers), n_sentences=447, one_based=True, src_lens=en, tgt_lens=fr)
    assert naacl == gold
    # trial: the converted links are in range of the normalized trial sentences
    ten, tfr = lens("trial.en"), lens("trial.fr")
    trial = read_pharaoh(str(out / "trial.gold"), one_based=True, src_lens=ten, tgt_lens=tfr)
    raw = open(os.path.join(HANSARDS, "gold", "trial", "trial.align")).read().splitlines()
    assert [len(a.possible) for a in trial] == [len(line.split()) for line in raw]


# --------------------------------------------------------------------------------------------- run.sh
# a tiny corpus in the shared folder's layout: untokenized accent-stripped training text with contractions,
# the gold in its own forms (tokenized, accented, decomposed; 1-based i-j/ipj; trial 0-based French first)
TRAIN = [("The minister of finance is here.", "Le ministre des Finances est ici."),
         ("I don't know the answer.", "Je ne connais pas la reponse."),
         ("We speak of the rights of workers.", "Nous parlons des droits des travailleurs."),
         ("It is the government's duty today.", "C'est le devoir du gouvernement aujourd'hui."),
         ("The House is here.", "La Chambre est ici."),
         ("He went to the committee.", "Il est alle au comite."),
         ("The minister knows the answer.", "Le ministre connait la reponse."),
         ("We are here today.", "Nous sommes ici aujourd'hui.")]
TEST = [("the minister is here .", "le ministre est ici .", "1-1 2-2 3-3 4-4 5-5"),
        ("i do not know .", "je ne connais pas .", "1-1 2p2 3-2 3-4 4-3 5-5"),
        ("the rights of workers .", "les droits de les travailleurs .", "1-1 2-2 3-3 3p4 4-5 5-6"),
        ("the House is here today .", "la Chambre est ici aujourd' hui .", "1-1 2-2 3-3 4-4 5-5 5-6 6-7")]
TRIAL = [("the minister knows the answer .", "le ministre connaît la réponse .", "0-0 1-1 2-2 3-3 4-4 5-5"),
         ("we are here today .", "nous sommes ici aujourd' hui .", "0-0 1-1 2-2 3-3 4-3-P 5-4")]


def _write_local(root):
    (root / "train").mkdir(parents=True)
    (root / "gold" / "trial").mkdir(parents=True)
    for k, suffix in ((0, "e"), (1, "f")):
        with gzip.open(root / "train" / f"isi_train.{suffix}.gz", "wt", encoding="utf-8") as f:
            f.writelines(p[k] + "\n" for p in TRAIN * 25)
    (root / "gold" / "enfr.src-tgt").write_text("".join(f"{e}   ||| {f}  \n" for e, f, _ in TEST), encoding="utf-8")
    (root / "gold" / "enfr.gold").write_text("".join(g + "\n" for _, _, g in TEST), encoding="utf-8")
    for k, suffix in ((0, "e"), (1, "f")):
        (root / "gold" / "trial" / f"trial.{suffix}").write_text(
            "".join(f"<s snum={1001 + n}> {p[k]} </s>\n" for n, p in enumerate(TRIAL)), encoding="utf-8")
    (root / "gold" / "trial" / "trial.align").write_text("".join(p[2] + "\n" for p in TRIAL), encoding="utf-8")


def test_tiny_gold_links_stay_in_range(tmp_path):
    """test_real_gold_links_stay_in_range's code path on the tiny corpus in the same layout (every clone): word
    counts kept, every Sure and Possible link of the 1-based test gold and of the converted trial gold in range."""
    from hmm_nmt_align.io import read_pharaoh

    _write_local(tmp_path / "local")
    out = tmp_path / "gold"
    assert norm.write_gold(str(tmp_path / "local"), str(out)) == {"test": len(TEST), "trial": len(TRIAL)}

    def lens(name):
        return [len(line.split()) for line in (out / name).read_text(encoding="utf-8").splitlines()]

    en, fr = lens("test.en"), lens("test.fr")
    assert en == [len(e.split()) for e, _, _ in TEST] and fr == [len(f.split()) for _, f, _ in TEST]
    gold = read_pharaoh(str(out / "test.gold"), one_based=True, src_lens=en, tgt_lens=fr)  # raises if out of range
    links = [g.split() for _, _, g in TEST]
    assert sum(len(a.sure) for a in gold) == sum("-" in x for g in links for x in g)
    assert sum(len(a.possible - a.sure) for a in gold) == sum("p" in x for g in links for x in g)
    trial = read_pharaoh(str(out / "trial.gold"), one_based=True, src_lens=lens("trial.en"), tgt_lens=lens("trial.fr"))
    assert [len(a.possible) for a in trial] == [len(t.split()) for _, _, t in TRIAL]


def _env():
    e = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    return e


@pytest.mark.parametrize("script, in_help, bad, why", [
    ("run.sh", ["--train-lines N", "grow-diag-final-and"], ["--models", "dhmm2"], "unknown model 'dhmm2'"),
    ("corpus.sh", ["--eflomal-runs N", "hmm-nmt-align-corpus"], ["--eflomal-runs", "x"],
     "--eflomal-runs must be an integer")])
def test_recipe_help_and_errors(tmp_path, script, in_help, bad, why):
    cmd = os.path.join(ROOT, "examples", "hansards", script)
    p = subprocess.run([cmd, "--help"], capture_output=True, text=True, env=_env())
    assert p.returncode == 0 and all(x in p.stdout for x in in_help)
    p = subprocess.run([cmd, "--local", str(tmp_path / "nowhere")], capture_output=True, text=True, env=_env())
    assert p.returncode == 2 and "not the hansards_enfr folder" in p.stderr
    _write_local(tmp_path / "local")
    p = subprocess.run([cmd, "--local", str(tmp_path / "local"), *bad], capture_output=True, text=True, env=_env(),
                       cwd=tmp_path)
    assert p.returncode == 2 and why in p.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_run_sh_end_to_end_tiny(tmp_path):
    """Raw files -> AER table with a first-order model trained for a few updates in both directions, and the
    agreement model (agree1) started from it (--init-from), trained once for both, split and aligned alike."""
    _write_local(tmp_path / "local")
    work = tmp_path / "work"
    cmd = [RUN, "--local", str(tmp_path / "local"), "--work", str(work), "--train-lines", "150", "--merges", "60",
           "--models", "dhmm1,agree1", "--init-from", str(work / "checkpoints"), "--agreement-weight", "0.5",
           "--max-update", "3", "--embed-dim", "16", "--ffn-dim", "32", "--layers", "1",
           "--heads", "2", "--max-tokens", "400", "--warmup", "2", "--baselines", "none", "--adapt-updates", "2,4"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    data = work / "data"
    assert len((data / "train.en").read_text().splitlines()) == 150
    assert (data / "train.fr").read_text().splitlines()[2] == "nous parlons de les droits de les travailleurs ."
    assert (data / "trial.gold").read_text().splitlines()[1] == "1-1 2-2 3-3 4-4 4p5 5-6"
    for d in ("en-fr", "fr-en"):
        assert (work / "checkpoints" / f"dhmm1.{d}" / "checkpoint_last.pt").exists()
    al = work / "align"
    trial = json.loads((al / "dhmm1.trial.json").read_text())
    assert {r["method"] for r in trial} == {"posterior", "alignment"} and len(trial) == 2 * 2 * (2 * 11 + 5 + 2 * 11)
    assert sorted({r["pool"] for r in trial}) == ["pieces", "words"]
    test = json.loads((al / "dhmm1.test.json").read_text())
    choices = {r["choice"] for r in test}
    assert {"best", "one direction", "atools", "soft", "fixed"} <= choices
    assert all(r["pool"] in ("pieces", "words") for r in test)
    assert {r["pool"] for r in test if r["choice"] == "fixed"} == {"pieces"}
    # the timed hmm-nmt-align run (both directions, grow-diag-final-and) scores what align_variants scores
    line = (al / "dhmm1.gdfa.aer").read_text()
    assert re.match(r"AER=\S+ P=\S+ R=\S+ F=\S+ sentences=4$", line.strip()), line
    gdfa = [r for r in test if r["method"] == "posterior" and r["symmetrize"] == "grow-diag-final-and"
            and r["choice"] == "fixed"]
    assert len(gdfa) == 1 and float(line.split()[0][4:]) == pytest.approx(gdfa[0]["AER"], abs=0.006)
    ck = work / "checkpoints"
    log = (ck / "agree1.en-fr" / "train.log").read_text()
    assert "fwd initialised from" in log and "rev initialised from" in log and "agreement" in log
    assert "'agreement_weight': 0.5" in log or "agreement_weight=0.5" in log
    assert (ck / "agree1.split" / "fwd.pt").exists() and not (ck / "agree1.fr-en").exists()
    assert re.match(r"AER=\S+ .* sentences=4$", (al / "agree1.gdfa.aer").read_text().strip())
    assert {r["method"] for r in json.loads((al / "agree1.test.json").read_text())} == {"posterior", "alignment"}
    # --adapt-updates: each model adapted on the trial + test text (hmm-nmt-adapt), aligned and scored alike,
    # the adaptation chosen on the trial pairs named in the table
    for m in ("dhmm1", "agree1"):
        for n in (2, 4):
            for d in ("en-fr", "fr-en"):
                assert load_checkpoint_state(ck / f"{m}.adapt" / f"{d}.{n}.pt")["adaptation"]["updates"] == n
            assert {r["method"] for r in json.loads((al / f"{m}+a{n}.test.json").read_text())} == {"posterior",
                                                                                                    "alignment"}
    assert (al / "adapt.en").read_text() == (data / "trial.en").read_text() + (data / "test.en").read_text()
    results = (work / "results.md").read_text()
    assert "first order, adapted (4 updates on the text to align)" in results
    assert re.search(r"^\* transformer_dhmm, first order: (none|2 updates|4 updates) \(trial AER", results, re.M)
    assert "first order, agreement (joint)" in results
    assert results == p.stdout
    assert "transformer_dhmm, first order" in results and "sentences/s" in results
    # every run resumes: a second call retrains nothing; with the baselines on it adds eflomal and fast_align
    # (the baselines extra) on the same normalized text, or says they are missing and prints the same table
    cmd[cmd.index("none")] = "eflomal,fast_align"
    p2 = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    assert p2.returncode == 0 and "] training " not in p2.stderr, p2.stderr[-3000:]
    if importlib.util.find_spec("eflomal") and importlib.util.find_spec("systran_align"):
        rows = [line for line in p2.stdout.splitlines() if line.startswith("| eflomal") or line.startswith("| fast")]
        assert [r.split()[1] for r in rows] == ["eflomal.fwd", "eflomal.rev", "eflomal.grow-diag-final-and",
                                               "fast_align.sym"]
        assert (al / "baselines" / "eflomal.grow-diag-final-and.align").exists()
    else:
        assert "not installed" in p2.stderr and p2.stdout == p.stdout
    # evaluate.sh on the joint agreement checkpoint: split, trial-chosen AER on the test pairs, BLEU both ways
    ev = [os.path.join(ROOT, "examples", "hansards", "evaluate.sh"), "--work", str(work), "--out", str(tmp_path / "ev")]
    p3 = subprocess.run(ev + ["--joint", str(ck / "agree1.en-fr" / "checkpoint_last.pt"), "--beam", "2"],
                        capture_output=True, text=True, env=_env(), timeout=300)
    assert p3.returncode == 0, p3.stderr[-3000:]
    assert (tmp_path / "ev" / "split" / "rev.pt").exists() and "(best)" in p3.stdout
    assert re.search(r"^en->fr BLEU [\d.]+ chrF [\d.]+; fr->en BLEU [\d.]+ chrF [\d.]+$", p3.stdout, re.M), p3.stdout
    assert len((tmp_path / "ev" / "hyp.fr").read_text().splitlines()) == len(TEST)
    p4 = subprocess.run(ev + ["--joint", str(ck / "agree1.en-fr" / "checkpoint_last.pt"), "--fwd", "x.pt"],
                        capture_output=True, text=True, env=_env())
    assert p4.returncode == 2 and "not both" in p4.stderr


# --------------------------------------------------------------------------------------------- corpus.sh
CORPUS = os.path.join(ROOT, "examples", "hansards", "corpus.sh")


@pytest.mark.slow
def test_corpus_sh_end_to_end_tiny(tmp_path):
    """Raw files -> one corpus (test, trial, training pairs in that order) -> hmm-nmt-align-corpus with the
    options after -- -> a table scored on the test and trial lines, beside eflomal when the baselines extra is
    installed; a second call retrains nothing."""
    _write_local(tmp_path / "local")
    work = tmp_path / "work"
    runs = 1 if importlib.util.find_spec("eflomal") else 0
    # 3 updates: the default mean > 0.5 would link nothing (P undefined); a second pass of 3 updates too
    cmd = [CORPUS, "--local", str(tmp_path / "local"), "--work", str(work), "--eflomal-runs", str(runs), "--",
           "--merges", "60", "--max-update", "3", "--embed-dim", "16", "--ffn-dim", "32", "--layers", "1",
           "--heads", "2", "--max-tokens", "400", "--warmup-updates", "2", "--valid-lines", "10", "--lexicon", "class",
           "--links", "threshold:0.05", "--guide-updates", "3"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    en = (work / "corpus.en").read_text().splitlines()
    assert len(en) == len(TEST) + len(TRIAL) + 25 * len(TRAIN)
    assert en[0] == "the minister is here ." and en[len(TEST)] == "the minister knows the answer ."
    align = (work / "hmm.align").read_text().splitlines()
    assert len(align) == len(en)
    manifest = json.loads((work / "model" / "manifest.json").read_text())
    assert manifest["config"]["lexicon"] == "class"
    rows = [r for r in p.stdout.splitlines() if r.startswith("| hmm ") or r.startswith("| eflomal.")]
    assert [r.split()[1] for r in rows] == ["eflomal.1"] * runs + ["hmm"], p.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 7 and all(re.fullmatch(r"\d+(\.\d+)?", c) for c in cells[1:]), row
    if runs:
        assert len((work / "eflomal.1.gdfa").read_text().splitlines()) == len(en)
    assert "--lexicon class" in p.stdout and "CPU:" in p.stdout
    p2 = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    assert p2.returncode == 0 and "hmm-nmt-align-corpus" not in p2.stderr and p2.stdout == p.stdout
    # an alignment without one link on the scored lines: precision is undefined, shown as "-", not a traceback
    (work / "hmm.align").write_text("\n" * len(en))
    p3 = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300)
    assert p3.returncode == 0 and "| hmm | 100.00 | - | 0.00 | 100.00 |" in p3.stdout, p3.stdout + p3.stderr
