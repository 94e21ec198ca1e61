"""hmm-nmt-align-corpus stage by stage, with no training: what each stage hands the next.

The pipeline (``hmm_nmt_align.corpus.cli.run``) is driven with three fakes: fairseq-preprocess writes only the
dictionaries, each fairseq-train run records its command line and writes a checkpoint and a train.log with
fairseq's ``"num_updates": "N"`` json lines, and each direction's model is a stub whose posterior puts all mass on
the source piece that is the same word in the other case (``cat`` ~ ``CAT``; a target word with none goes to EOS,
i.e. stays unaligned). BPE, the manifest, the flags, the link files and the outputs are the real code's.
"""
import json
import os
from types import SimpleNamespace

import pytest
import torch

from hmm_nmt_align.corpus import CorpusError, ModelDir
from hmm_nmt_align.corpus.cli import build_parser, run

# source lowercase, target uppercase and reordered; OF has no source word; "zebra" is rare enough to be split
PAIRS = [("cat dog sun", "SUN CAT DOG"), ("tree house", "HOUSE TREE"), ("bird red big cat", "BIG BIRD OF RED CAT"),
         ("dog tree", "DOG TREE"), ("sun bird house", "HOUSE OF SUN BIRD"), ("", "CAT"), ("big dog red", "RED BIG DOG"),
         ("zebra cat", "CAT ZEBRA"), ("tree sun big bird", "BIRD TREE BIG SUN"), ("red house dog", "DOG RED HOUSE OF"),
         ("cat bird", "BIRD CAT"), ("sun tree", "TREE SUN")]
TRAIN_LINES = [k for k, (s, t) in enumerate(PAIRS) if s and t]  # without --patience the held-out pair trains too
BINS = ("src-tgt.src", "src-tgt.tgt")
SETTINGS = ["--cpu", "--threads", "1", "--no-progress", "--merges", "200", "--lr", "0.003", "--warmup-updates", "40",
            "--max-update", "6", "--guide-updates", "4", "--guide-weight", "2.5", "--seed", "7"]


def word_links(k):
    """(source word, target word) pairs of line k that the stub models agree on."""
    src, tgt = PAIRS[k][0].split(), PAIRS[k][1].split()
    return sorted((s, t) for s, a in enumerate(src) for t, b in enumerate(tgt) if a == b.lower())


# ----------------------------------------------------------------------------------------------- the fakes
class Finished:
    """A trainer process that has already exited."""

    pid = -1

    def __init__(self, returncode):
        self.returncode = returncode

    def poll(self):
        return self.returncode

    def wait(self):
        return self.returncode


class FakeTrainer:
    """fairseq-train as ``launch(cmd, log, env)``: records the command line and the manifest's finished stages,
    writes ``checkpoint_last.pt`` and the update counts; fails the runs named in ``fail``; Ctrl-C instead of the
    ``interrupt_at``-th launch (0-based)."""

    def __init__(self, fail=(), interrupt_at=None):
        self.cmds, self.envs, self.done_before, self.fail, self.interrupt_at = [], [], [], set(fail), interrupt_at

    def __call__(self, cmd, log, env):
        if len(self.cmds) == self.interrupt_at:
            raise KeyboardInterrupt
        opts = flags(cmd)
        save_dir = opts["--save-dir"]
        self.cmds.append(cmd)
        self.envs.append(env)
        with open(os.path.join(os.path.dirname(save_dir), "manifest.json"), encoding="utf-8") as f:
            self.done_before.append(set(json.load(f)["done"]))
        if os.path.basename(save_dir) in self.fail:
            log.write("RuntimeError: out of memory\n")
            return Finished(1)
        torch.save({"extra_state": {"previous_training_time": 0.0}}, os.path.join(save_dir, "checkpoint_last.pt"))
        for n in range(1, int(opts["--max-update"]) + 1):
            log.write(json.dumps({"epoch": 1, "loss": "2.5", "num_updates": str(n)}) + "\n")
        return Finished(0)

    def save_dirs(self):
        return [os.path.basename(flags(c)["--save-dir"]) for c in self.cmds]


def fake_preprocess(cmd, log, what):
    """fairseq-preprocess as ``run(cmd, log, what)``: the joined dictionary of the segmented training text, and
    the training and held-out pairs binarized with it (fairseq's own dataset builder)."""
    from fairseq.data import Dictionary, indexed_dataset

    opts = flags(cmd)
    assert what == "fairseq-preprocess" and opts["--joined-dictionary"] is True
    dest = opts["--destdir"]
    os.makedirs(dest)
    counts = {}
    for side in ("src", "tgt"):
        with open(f"{opts['--trainpref']}.{side}", encoding="utf-8") as f:
            for piece in f.read().split():
                counts[piece] = counts.get(piece, 0) + 1
    for side in ("src", "tgt"):
        with open(os.path.join(dest, f"dict.{side}.txt"), "w", encoding="utf-8") as f:
            f.write("".join(f"{w} {c}\n" for w, c in sorted(counts.items(), key=lambda x: (-x[1], x[0]))))
    for split, pref in (("train", opts["--trainpref"]), ("valid", opts["--validpref"])):
        for side in ("src", "tgt"):
            d = Dictionary.load(os.path.join(dest, f"dict.{side}.txt"))
            out = os.path.join(dest, f"{split}.src-tgt.{side}")
            builder = indexed_dataset.make_builder(out + ".bin", impl="mmap", vocab_size=len(d))
            with open(f"{pref}.{side}", encoding="utf-8") as f:
                for line in f:
                    builder.add_item(d.encode_line(line, add_if_not_exist=False, append_eos=True))
            builder.finalize(out + ".idx")


class SameWord(torch.nn.Module):
    """A direction whose posterior p(b_i = j) is 1 on the source piece that is target piece i in the other case
    (EOS ~ EOS), else on the source EOS: what hmm_nmt.aligner asks of a model (alignment_matrices)."""

    ALIGNMENT_METHODS = ("posterior",)

    def __init__(self, src_dict, tgt_dict):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.src_dict, self.tgt_dict = src_dict, tgt_dict

    def alignment_model_type(self):
        return "dhmm1"

    def max_positions(self):
        return 1024, 1024

    def alignment_matrices(self, src, lengths, prev, target, methods, transition=False):
        post = torch.zeros(src.size(0), target.size(1), src.size(1), dtype=torch.float64)
        for b in range(src.size(0)):
            words = [self.src_dict[x].casefold() for x in src[b].tolist()]
            for i, y in enumerate(target[b].tolist()):
                word = self.tgt_dict[y].casefold()
                post[b, i, words.index(word) if word in words else src.size(1) - 1] = 1.0  # left-padded: EOS last
        return {"posterior": post}


class FakeLoader:
    """``load(md, names, cpu, bf16, stage)``: records which checkpoints each stage asked for."""

    def __init__(self):
        self.calls = []

    def __call__(self, md, names, cpu, bf16, stage=None):
        from fairseq.data import Dictionary

        self.calls.append(([md.checkpoint(n, stage) for n in names], set(md.data["done"])))
        s, t = ("src", "tgt") if names[0].startswith("fwd") else ("tgt", "src")
        sd, td = (Dictionary.load(md.file("bin", f"dict.{x}.txt")) for x in (s, t))
        return SameWord(sd, td), SimpleNamespace(source_dictionary=sd, target_dictionary=td, cfg=SimpleNamespace())

    def stages(self):
        """'train' or 'guide' per call: the pass whose checkpoints were loaded."""
        return ["guide" if os.path.dirname(paths[0]).endswith(".guided") else "train" for paths, _ in self.calls]


def flags(cmd):
    """{--flag: value, or True for a flag without one} of a command line."""
    out = {}
    for k, a in enumerate(cmd):
        if a.startswith("--"):
            out[a] = cmd[k + 1] if k + 1 < len(cmd) and not cmd[k + 1].startswith("--") else True
    return out


# ----------------------------------------------------------------------------------------------- runs
def corpus(work):
    for side, k in (("src", 0), ("tgt", 1)):
        (work / f"c.{side}").write_text("".join(p[k] + "\n" for p in PAIRS), encoding="utf-8")


def align_corpus(work, *extra, trainer=None, loader=None):
    """One hmm-nmt-align-corpus run in-process with the fakes; returns (trainer, loader)."""
    trainer, loader = trainer or FakeTrainer(), loader or FakeLoader()
    w = str(work)
    opts = build_parser().parse_args(["-s", f"{w}/c.src", "-t", f"{w}/c.tgt", "--model-dir", f"{w}/m", "-o",
                                      f"{w}/c.align", "-f", f"{w}/c.fwd", "-r", f"{w}/c.rev", *SETTINGS, *extra])
    assert run(opts, launch=trainer, preprocess=fake_preprocess, load=loader) == 0
    return trainer, loader


def manifest(work):
    return json.loads((work / "m" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    """A finished model directory of two seeds."""
    work = tmp_path_factory.mktemp("stages")
    corpus(work)
    trainer, loader = align_corpus(work, "--seeds", "2")
    return work, trainer, loader


# ----------------------------------------------------------------------------------------------- tests
def test_every_trainer_keeps_freed_memory_for_its_next_step(two_seeds, tmp_path, monkeypatch):
    from hmm_nmt_align.base.heap import MMAP_THRESHOLD, TRIM_THRESHOLD

    _, trainer, _ = two_seeds
    assert len(trainer.envs) == 8
    for env in trainer.envs:
        assert env["MALLOC_MMAP_THRESHOLD_"] == str(MMAP_THRESHOLD)
        assert env["MALLOC_TRIM_THRESHOLD_"] == str(TRIM_THRESHOLD)
        assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"]
    # a value of the user's own is theirs to keep
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    corpus(tmp_path)
    own, _ = align_corpus(tmp_path)
    assert {env["MALLOC_MMAP_THRESHOLD_"] for env in own.envs} == {"65536"}
    assert {env["MALLOC_TRIM_THRESHOLD_"] for env in own.envs} == {str(TRIM_THRESHOLD)}


def test_the_stages_run_in_order_each_on_what_the_one_before_marked_done(two_seeds):
    work, trainer, loader = two_seeds
    assert trainer.save_dirs() == ["fwd", "rev", "fwd.2", "rev.2", "fwd.guided", "rev.guided", "fwd.2.guided",
                                   "rev.2.guided"]
    # the first pass starts on the codes and bin/ (two runs at a time: a seed's directions), the second on every
    # first-pass run and the links
    first = {f"train.{n}" for n in ("fwd", "rev", "fwd.2", "rev.2")}
    base = {"codes", "bin"}
    assert trainer.done_before == [base] * 2 + [base | {"train.fwd", "train.rev"}] * 2 + \
        [base | first | {"links"}] * 2 + [base | first | {"links", "guide.fwd", "guide.rev"}] * 2
    # stage 4 loads both first-pass members per direction (the seeds' ensemble); stage 6 the second pass's
    m = str(work / "m")
    assert [paths for paths, _ in loader.calls] == [
        [f"{m}/fwd/checkpoint_last.pt", f"{m}/fwd.2/checkpoint_last.pt"],
        [f"{m}/rev/checkpoint_last.pt", f"{m}/rev.2/checkpoint_last.pt"],
        [f"{m}/fwd.guided/checkpoint_last.pt", f"{m}/fwd.2.guided/checkpoint_last.pt"],
        [f"{m}/rev.guided/checkpoint_last.pt", f"{m}/rev.2.guided/checkpoint_last.pt"]]
    assert loader.calls[0][1] == {"codes", "bin"} | first
    done = manifest(work)["done"]
    assert set(done) == {"codes", "bin", "links"} | first | {f"guide.{n}" for n in ("fwd", "rev", "fwd.2", "rev.2")}
    # the merges learned (this small text runs out of pairs to merge before --merges 200)
    codes = (work / "m" / "codes").read_text(encoding="utf-8").splitlines()
    assert done["codes"]["merges"] == len(codes) - 1 < 200 and codes[0].startswith("#version")
    assert (done["bin"]["train_pairs"], done["bin"]["valid_pairs"]) == (len(TRAIN_LINES), 1)
    for n in ("fwd", "rev", "fwd.2", "rev.2"):  # the update counts read from each run's train.log
        assert (done[f"train.{n}"]["max_update"], done[f"train.{n}"]["updates"]) == (6, 6)
        assert (done[f"guide.{n}"]["max_update"], done[f"guide.{n}"]["updates"]) == (4, 4)
    assert done["links"] == dict(done["links"], seeds=2, pairs=len(TRAIN_LINES))
    assert manifest(work)["config"]["guide_weight"] == 2.5 and manifest(work)["config"]["seeds"] == 2
    # bin/ holds what preprocess made; the segmented training text is the training lines, words whole
    assert sorted(os.listdir(work / "m" / "bin")) == ["dict.src.txt", "dict.tgt.txt"] + [
        f"{part}.{side}.{ext}" for part, sides in (("train.align", ("src-tgt", "tgt-src")), ("train", BINS)) for side in
        sides for ext in ("bin", "idx")] + [f"valid.{side}.{ext}" for side in BINS for ext in ("bin", "idx")]
    assert not (work / "m" / "guide-bin").exists()  # the second pass's updates cover the corpus: no sample
    assert (work / "m" / "text" / "train.tgt").read_text().splitlines()[0] == "SUN CAT DOG"


def test_the_first_pass_flags(two_seeds):
    work, trainer, _ = two_seeds
    m = str(work / "m")
    for k, name in enumerate(["fwd", "rev", "fwd.2", "rev.2"]):
        f = flags(trainer.cmds[k])
        assert (f["--lr"], f["--warmup-updates"], f["--max-update"], f["--total-num-update"]) == ("0.003", "40", "6", "6")
        assert f["--seed"] == str(7 + k // 2) and f["--save-dir"] == f"{m}/{name}"
        assert (f["--source-lang"], f["--target-lang"]) == (("src", "tgt") if name.startswith("fwd") else ("tgt", "src"))
        assert not {"--finetune-from-model", "--load-alignments", "--alignment-guide-weight"} & set(f)


def test_the_second_pass_flags(two_seeds):
    """Half the learning rate and warm-up, --guide-weight as the criterion's weight, the links loaded, and the
    first pass's checkpoint of the same member and seed to start from."""
    work, trainer, _ = two_seeds
    m = str(work / "m")
    for k, name in enumerate(["fwd", "rev", "fwd.2", "rev.2"]):
        f = flags(trainer.cmds[4 + k])
        assert f["--save-dir"] == f"{m}/{name}.guided" and trainer.cmds[4 + k][3] == f"{m}/bin"
        assert (f["--lr"], f["--warmup-updates"]) == ("0.0015", "20")
        assert (f["--max-update"], f["--total-num-update"]) == ("4", "4")
        assert f["--alignment-guide-weight"] == "2.5" and f["--load-alignments"] is True
        assert f["--finetune-from-model"] == f"{m}/{name}/checkpoint_last.pt"
        assert os.path.isfile(f["--finetune-from-model"])  # written by that member's first pass
        assert f["--seed"] == str(7 + k // 2) == flags(trainer.cmds[k])["--seed"]
        assert (f["--source-lang"], f["--target-lang"]) == (flags(trainer.cmds[k])["--source-lang"],
                                                            flags(trainer.cmds[k])["--target-lang"])


def test_the_link_files_hold_the_first_pass_links_in_both_orientations(two_seeds):
    """bin/train.align.src-tgt: (source piece, target piece) of each training pair, as the forward run reads
    them; bin/train.align.tgt-src the same links (target piece, source piece) for the reverse run."""
    from fairseq.data import data_utils

    from hmm_nmt_align.base.segment import load_segmenter

    work, _, _ = two_seeds
    md = ModelDir(str(work / "m"))
    segmenter = load_segmenter(md.file("codes"), None)
    want = []
    for k in TRAIN_LINES:
        (_, so), (_, to) = segmenter.segment(PAIRS[k][0].split()), segmenter.segment(PAIRS[k][1].split())
        want.append(sorted((j, i) for s, t in word_links(k) for j in range(len(so)) if so[j] == s
                           for i in range(len(to)) if to[i] == t))
    zebra = TRAIN_LINES.index(7)
    assert len(want[zebra]) > 2  # a split word: each of its pieces linked to each piece of the other
    fwd = data_utils.load_indexed_dataset(md.file("bin", "train.align.src-tgt"), None, "mmap")
    rev = data_utils.load_indexed_dataset(md.file("bin", "train.align.tgt-src"), None, "mmap")
    assert len(fwd) == len(rev) == len(TRAIN_LINES)
    assert [sorted(map(tuple, fwd[k].view(-1, 2).tolist())) for k in range(len(fwd))] == want
    assert [sorted(map(tuple, rev[k].view(-1, 2).tolist())) for k in range(len(rev))] == \
        [sorted((i, j) for j, i in row) for row in want]
    assert md.data["done"]["links"]["links"] == sum(map(len, want))


def test_the_outputs_are_the_merged_and_directional_word_links(two_seeds):
    work, _, _ = two_seeds
    want = "".join(" ".join(f"{s}-{t}" for s, t in word_links(k)) + "\n" for k in range(len(PAIRS)))
    assert "\n\n" in want  # the line with an empty side
    for name in ("c.align", "c.fwd", "c.rev"):
        assert (work / name).read_text() == want, name


def test_a_failed_direction_is_the_only_one_trained_again(tmp_path):
    corpus(tmp_path)
    with pytest.raises(CorpusError, match=r"training rev failed \(log: .*rev/train.log\): RuntimeError: out of memory"):
        align_corpus(tmp_path, trainer=FakeTrainer(fail={"rev"}))
    assert set(manifest(tmp_path)["done"]) == {"codes", "bin", "train.fwd"}
    assert not (tmp_path / "c.align").exists()
    trainer, loader = align_corpus(tmp_path)
    assert trainer.save_dirs() == ["rev", "fwd.guided", "rev.guided"]
    assert loader.stages() == ["train", "train", "guide", "guide"]


def test_interrupted_in_the_second_pass_the_rerun_makes_only_the_second_pass(tmp_path):
    corpus(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        align_corpus(tmp_path, trainer=FakeTrainer(interrupt_at=2))
    before = manifest(tmp_path)["done"]
    assert set(before) == {"codes", "bin", "train.fwd", "train.rev", "links"}
    trainer, loader = align_corpus(tmp_path)
    assert trainer.save_dirs() == ["fwd.guided", "rev.guided"]
    assert loader.stages() == ["guide", "guide"]  # the links were not made again
    after = manifest(tmp_path)["done"]
    assert {k: after[k] for k in before} == before
    assert set(after) == set(before) | {"guide.fwd", "guide.rev"}


def test_more_seeds_train_only_the_new_seed_then_every_second_pass(tmp_path):
    corpus(tmp_path)
    align_corpus(tmp_path)
    first = {k: v for k, v in manifest(tmp_path)["done"].items() if k.startswith("train.")}
    trainer, loader = align_corpus(tmp_path, "--seeds", "2")
    assert trainer.save_dirs() == ["fwd.2", "rev.2", "fwd.guided", "rev.guided", "fwd.2.guided", "rev.2.guided"]
    assert [flags(c)["--seed"] for c in trainer.cmds[:2]] == ["8", "8"]
    assert loader.stages() == ["train", "train", "guide", "guide"]  # new links, from both seeds
    done = manifest(tmp_path)["done"]
    assert {k: done[k] for k in first} == first and done["links"]["seeds"] == 2


def test_another_guide_weight_remakes_only_the_second_pass(tmp_path):
    corpus(tmp_path)
    align_corpus(tmp_path)
    first = {k: v for k, v in manifest(tmp_path)["done"].items() if k.startswith(("train.", "codes", "bin"))}
    trainer, loader = align_corpus(tmp_path, "--guide-weight", "0.5")
    assert trainer.save_dirs() == ["fwd.guided", "rev.guided"]
    assert [flags(c)["--alignment-guide-weight"] for c in trainer.cmds] == ["0.5", "0.5"]
    assert loader.stages() == ["train", "train", "guide", "guide"]
    done = manifest(tmp_path)["done"]
    assert {k: done[k] for k in first} == first and manifest(tmp_path)["config"]["guide_weight"] == 0.5
    # the same command again: nothing to do but align
    trainer, loader = align_corpus(tmp_path, "--guide-weight", "0.5")
    assert trainer.cmds == [] and loader.stages() == ["guide", "guide"]


def test_each_phase_records_its_wall_clock_and_cpu_seconds_summed_over_runs(tmp_path):
    corpus(tmp_path)
    align_corpus(tmp_path)
    times = manifest(tmp_path)["times"]
    assert set(times) == {"prepare", "train", "links", "guide", "align"}
    assert all(t["runs"] == 1 and t["wall_s"] >= 0 and t["cpu_s"] >= 0 for t in times.values())
    before = times["prepare"]["wall_s"]
    align_corpus(tmp_path, "--align-only")  # a reader writes nothing into the directory
    assert manifest(tmp_path)["times"] == times
    align_corpus(tmp_path)  # the same command again: nothing to prepare, the rest is timed again
    again = manifest(tmp_path)["times"]
    assert again["prepare"] == times["prepare"] and again["prepare"]["wall_s"] == before
    assert again["align"]["runs"] == 2 and again["align"]["wall_s"] >= times["align"]["wall_s"]


# ----------------------------------------------------------------------------------------------- the sample
def _items(prefix):
    from fairseq.data import data_utils

    data = data_utils.load_indexed_dataset(prefix, None, "mmap")
    return [data[k].tolist() for k in range(len(data))]


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """A model directory whose second pass (2 updates of 10 tokens) cannot see every training pair."""
    work = tmp_path_factory.mktemp("sample")
    corpus(work)
    trainer, loader = align_corpus(work, "--max-tokens", "10", "--guide-updates", "2")
    return work, trainer, loader


def test_the_second_pass_trains_on_a_sample_its_updates_cannot_exhaust(sampled):
    from hmm_nmt_align.corpus.links import guide_sample

    work, trainer, _ = sampled
    md = ModelDir(str(work / "m"))
    sample = guide_sample(md, SimpleNamespace(guide_updates=2, max_tokens=10, seed=7))
    src, tgt = _items(md.file("bin", "train.src-tgt.src")), _items(md.file("bin", "train.src-tgt.tgt"))
    tokens = [max(len(src[k]), len(tgt[k])) for k in sample]
    assert 0 < len(sample) < len(TRAIN_LINES) and list(sample) == sorted(set(sample.tolist()))
    assert sum(tokens) >= 2 * 10 > sum(tokens) - max(tokens)  # enough for the updates, not many more
    # guide-bin/: the sample's pairs, sliced from bin/, beside bin/'s dictionaries and held-out pairs
    g = work / "m" / "guide-bin"
    assert _items(str(g / "train.src-tgt.src")) == [src[k] for k in sample]
    assert _items(str(g / "train.src-tgt.tgt")) == [tgt[k] for k in sample]
    for name in ("dict.src.txt", "dict.tgt.txt", "valid.src-tgt.src.bin", "valid.src-tgt.tgt.idx"):
        assert (g / name).read_bytes() == (work / "m" / "bin" / name).read_bytes()
    # the links of those pairs only, in their order; bin/ holds none
    assert len(_items(str(g / "train.align.src-tgt"))) == len(_items(str(g / "train.align.tgt-src"))) == len(sample)
    assert not any(n.startswith("train.align") for n in os.listdir(work / "m" / "bin"))
    links = manifest(work)["done"]["links"]
    assert links["pairs"] == links["sample"] == len(sample)
    # the first pass trains on bin/, the second on guide-bin/
    assert [c[3] for c in trainer.cmds] == [str(work / "m" / "bin")] * 2 + [str(g)] * 2
    # another seed, another sample of the same size rule
    other = guide_sample(md, SimpleNamespace(guide_updates=2, max_tokens=10, seed=8))
    assert sum(max(len(src[k]), len(tgt[k])) for k in other) >= 20


def test_the_sample_links_are_the_same_as_aligning_every_pair(sampled, two_seeds):
    """The links of a sampled pair are the links it gets when every pair is aligned (the stubs are the same)."""
    from hmm_nmt_align.corpus.links import guide_sample

    work, _, _ = sampled
    md = ModelDir(str(work / "m"))
    sample = guide_sample(md, SimpleNamespace(guide_updates=2, max_tokens=10, seed=7))
    every = _items(str(two_seeds[0] / "m" / "bin" / "train.align.src-tgt"))
    assert _items(md.file("guide-bin", "train.align.src-tgt")) == [every[k] for k in sample]


def test_another_second_pass_length_draws_its_sample_again(tmp_path):
    corpus(tmp_path)
    align_corpus(tmp_path, "--max-tokens", "10", "--guide-updates", "2")
    small = manifest(tmp_path)["done"]["links"]["sample"]
    trainer, loader = align_corpus(tmp_path, "--max-tokens", "10", "--guide-updates", "3")
    assert trainer.save_dirs() == ["fwd.guided", "rev.guided"] and loader.stages()[:2] == ["train", "train"]
    assert manifest(tmp_path)["done"]["links"]["sample"] > small
    trainer, loader = align_corpus(tmp_path, "--max-tokens", "10", "--guide-updates", "200")  # covers the corpus
    assert not (tmp_path / "m" / "guide-bin").exists() and "sample" not in manifest(tmp_path)["done"]["links"]
    assert flags(trainer.cmds[0])["--load-alignments"] is True and trainer.cmds[0][3] == str(tmp_path / "m" / "bin")
