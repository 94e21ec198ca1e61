"""Frozen checkpoints of every architecture: their specifications and how they are scored.

Shared by ``tests/make_checkpoint_fixtures.py`` (writes the checkpoints, dictionaries and
``tests/data/checkpoints/expected.json``) and ``tests/test_checkpoint_fixtures.py`` (loads them through
``fairseq.checkpoint_utils.load_model_ensemble_and_task`` and compares the scores). The scoring code here
uses only public entry points (the model's forward, ``get_normalized_probs``, the criterion built by the
task from the checkpoint's cfg, incremental decoding with an ``incremental_state``, and the models' documented
scoring methods), so it keeps working across a refactor that moves internals around.

Precision: every score is computed twice from the same float32 checkpoint. ``float64``: the loaded model
converted with ``.double()``; these values are compared within 1e-6 (absolute + relative), a tolerance that
float32 rounding differences between CPUs (vector widths, BLAS kernels) could exceed on log-likelihoods of
size ~10-30. The islands that stay float32 inside a float64 model (fairseq's attention softmax,
``utils.log_softmax``) contribute differences of order 1e-7 at most. ``float32``: the model as loaded,
compared within 1e-4, which guards the float32 path itself (casts, dtype branches) without depending on
CPU rounding.
"""
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_DIR = os.path.join(HERE, "data", "checkpoints")
EXPECTED = os.path.join(FIXTURE_DIR, "expected.json")
TOL64 = 1e-6
TOL32 = 1e-4

# --------------------------------------------------------------------------------------------- dictionaries
# (file, symbols); every dictionary gets fairseq's four special symbols first when loaded
DICTS = {
    "dict.src.txt": [f"s{i}" for i in range(10)],  # translation source
    "dict.tgt.txt": [f"t{i}" for i in range(12)],  # translation target (another size: catches transposes)
    "dict.words.txt": [f"w{i}" for i in range(12)],  # sequence_tagging words
    "dict.tags.txt": ["DT", "NN", "VB", "JJ", "IN"],  # sequence_tagging tags
    "dict.txt": [f"a{i}" for i in range(12)],  # language_modeling
    # the agreement models need one joined dictionary (the reverse batch swaps the token rows)
    "dict.jsrc.txt": [f"j{i}" for i in range(11)],
    "dict.jtgt.txt": [f"j{i}" for i in range(11)],
}
# word clusters ("word cluster" lines) for hmm_lm and vlhmm_tagger; other symbols are spread round robin
CLUSTER_FILES = {
    "brown_lm.txt": [(f"a{i}", str(i % 3)) for i in range(12)],
    "brown_words.txt": [(f"w{i}", str(i % 3)) for i in range(12)],
}

# --------------------------------------------------------------------------------------------- fixtures
_TR = ["-s", "src", "-t", "tgt", "--encoder-layers", "1", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim",
       "32", "--encoder-attention-heads", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
       "--decoder-attention-heads", "2", "--dropout", "0.0", "--max-source-positions", "64",
       "--max-target-positions", "64"]
_DHMM = _TR + ["--decoder-layers", "2", "--criterion", "dhmm_label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
_AGREE = ["-s", "jsrc", "-t", "jtgt"] + _TR[4:] + ["--decoder-layers", "2", "--criterion", "dhmm_agreement",
                                                  "--label-smoothing", "0.1", "--agreement-weight", "0.5"]
_LS = _TR + ["--decoder-layers", "1", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
_TAG = ["--task", "sequence_tagging", "--embed-dim", "8", "--dropout", "0.0"]
_CORE = _TAG + ["--hidden-size", "6", "--num-layers", "1", "--criterion", "tagging_cross_entropy"]
_IOTAG = _TAG + ["--iohmm-states", "3", "--criterion", "iohmm_tagging"]
_LM = ["--task", "language_modeling", "--sample-break-mode", "eos", "--tokens-per-sample", "32",
       "--hmm-embed-dim", "8", "--criterion", "hmm_lm", "--state-dropout", "0.5"]

# name -> (kind, arch, extra command-line options). kind: translation | dhmm | tagger | iohmm_tagger |
# vlhmm_tagger | lm. The file is tests/data/checkpoints/<name>.pt.
FIXTURES = {
    "transformer_dhmm": ("dhmm", "transformer_dhmm", _DHMM),
    "transformer_dhmm_layers_all": ("dhmm", "transformer_dhmm", _DHMM + ["--dhmm-layers", "all"]),
    "transformer_dhmm_first_order": ("dhmm", "transformer_dhmm_first_order", _DHMM + ["--max-jump", "3"]),
    "transformer_dhmm_iwslt_de_en": ("dhmm", "transformer_dhmm_iwslt_de_en", _DHMM),
    "transformer_dhmm_agreement": ("dhmm", "transformer_dhmm_agreement", _AGREE),
    "transformer_dhmm_first_order_agreement": ("dhmm", "transformer_dhmm_first_order_agreement",
                                               _AGREE + ["--max-jump", "3", "--agreement", "mul"]),
    "transformer_hnmc": ("translation", "transformer_hnmc", _LS + ["--hnmc-states", "4"]),
    "transformer_hnmc_chain": ("translation", "transformer_hnmc",
                               _LS + ["--hnmc-states", "4", "--hnmc-decoder", "chain", "--hnmc-activation", "melu"]),
    "transformer_iohmm": ("translation", "transformer_iohmm", _LS + ["--iohmm-states", "3"]),
    "transformer_iohmm_chain": ("translation", "transformer_iohmm",
                                _LS + ["--iohmm-states", "3", "--iohmm-decoder", "chain", "--iohmm-state-hidden", "4"]),
    **{f"{core}_tagger": ("tagger", f"{core}_tagger", _CORE)
       for core in ("hnmc", "hnmc2", "hnmc_cn", "rnn", "birnn", "bilstm", "bigru", "lstm", "gru", "bilstm_crf")},
    "bilstm_tagger_chars": ("tagger", "bilstm_tagger", _CORE + ["--char-embed-dim", "3", "--char-hidden", "2"]),
    "hnmc_tagger_arch3": ("tagger", "hnmc_tagger", _CORE + ["--tagger-architecture", "3"]),
    "rnn_tagger_arch1": ("tagger", "rnn_tagger", _CORE + ["--tagger-architecture", "1"]),
    "iohmm_tagger": ("iohmm_tagger", "iohmm_tagger", _IOTAG + ["--context-hidden", "4"]),
    "iohmm_tagger_causal": ("iohmm_tagger", "iohmm_tagger",
                            _IOTAG + ["--iohmm-context", "none", "--iohmm-graph", "left-to-right",
                                      "--iohmm-state-hidden", "4", "--iohmm-output-hidden", "4"]),
    "vlhmm_tagger": ("vlhmm_tagger", "vlhmm_tagger",
                     _TAG[:2] + ["--criterion", "vlhmm_tagging", "--brown-clusters", "brown_words.txt",
                                 "--states-per-cluster", "2", "--hmm-embed-dim", "8", "--state-dropout", "0.5"]),
    "hmm_lm": ("lm", "hmm_lm", _LM + ["--brown-clusters", "brown_lm.txt", "--states-per-cluster", "2"]),
    "hmm_lm_scalar_uniform": ("lm", "hmm_lm", _LM + ["--constraint", "uniform", "--num-clusters", "3",
                                                      "--states-per-cluster", "2", "--parameterization", "scalar"]),
}


def load_overrides(name):
    """arg_overrides for loading fixture ``name`` from wherever the checkout is (paths are saved relative)."""
    over = {"data": FIXTURE_DIR}
    argv = FIXTURES[name][2]
    if "--brown-clusters" in argv:
        over["brown_clusters"] = os.path.join(FIXTURE_DIR, argv[argv.index("--brown-clusters") + 1])
    return over


# --------------------------------------------------------------------------------------------- batches
def make_batch(kind, task, seed=0):
    """A fixed batch (plain lists of token ids) for a fixture of this kind, from a seeded generator."""
    g = torch.Generator().manual_seed(1234 + seed)

    def words(d, n):
        return torch.randint(d.nspecial, len(d), (n,), generator=g).tolist()

    if kind in ("translation", "dhmm"):
        sd, td = task.source_dictionary, task.target_dictionary
        src = [words(sd, n) + [sd.eos()] for n in (5, 3, 1)]
        tgt = [words(td, n) + [td.eos()] for n in (4, 6, 2)]
        return {"src": src, "tgt": tgt}
    if kind in ("tagger", "iohmm_tagger", "vlhmm_tagger"):
        wd, td = task.source_dictionary, task.target_dictionary
        lengths = (6, 3, 1)
        return {"src": [words(wd, n) for n in lengths], "tgt": [words(td, n) for n in lengths]}
    if kind == "lm":
        d = task.target_dictionary
        return {"tokens": [words(d, n) + [d.eos()] for n in (6, 3, 1)]}
    raise ValueError(kind)


def _pad(rows, pad, left=False):
    T = max(len(r) for r in rows)
    return torch.tensor([[pad] * (T - len(r)) + r if left else r + [pad] * (T - len(r)) for r in rows])


def make_sample(kind, task, batch):
    """The fairseq sample (left-padded source, right-padded target, as the stock collaters make them)."""
    if kind in ("translation", "dhmm"):
        sd, td = task.source_dictionary, task.target_dictionary
        src = _pad(batch["src"], sd.pad(), left=True)
        tgt = _pad(batch["tgt"], td.pad())
        prev = _pad([[td.eos()] + r[:-1] for r in batch["tgt"]], td.pad())
        net = {"src_tokens": src, "src_lengths": torch.tensor([len(r) for r in batch["src"]]),
               "prev_output_tokens": prev}
    elif kind == "lm":
        d = task.target_dictionary
        net = {"src_tokens": _pad([[d.eos()] + r[:-1] for r in batch["tokens"]], d.pad()),
               "src_lengths": torch.tensor([len(r) for r in batch["tokens"]])}
        tgt = _pad(batch["tokens"], d.pad())
    else:
        wd, td = task.source_dictionary, task.target_dictionary
        net = {"src_tokens": _pad(batch["src"], wd.pad()), "src_lengths": torch.tensor([len(r) for r in batch["src"]])}
        tgt = _pad(batch["tgt"], td.pad())
    pad = task.target_dictionary.pad()
    return {"id": torch.arange(tgt.size(0)), "net_input": net, "target": tgt,
            "ntokens": int(tgt.ne(pad).sum()), "nsentences": tgt.size(0)}


def _sub(sample, b, pad):
    """Sentence ``b`` of the sample alone (its padding kept)."""
    net = {k: v[b:b + 1] for k, v in sample["net_input"].items()}
    tgt = sample["target"][b:b + 1]
    return {"id": sample["id"][b:b + 1], "net_input": net, "target": tgt, "ntokens": int(tgt.ne(pad).sum()),
            "nsentences": 1}


# --------------------------------------------------------------------------------------------- scores
def _lst(t):
    return t.detach().double().tolist()


def score(kind, model, task, criterion, batch):
    """Every recorded score of a fixture as nested lists of floats (the model must be in eval mode)."""
    sample = make_sample(kind, task, batch)
    tgt = sample["target"]
    mask = tgt.ne(task.target_dictionary.pad())
    out = {}
    with torch.no_grad():
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True).double()
        gold = lprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).masked_fill(~mask, 0.0)
        out["gold_logprob"] = _lst(gold)  # per token (0 at padding)
        out["sentence_logprob"] = _lst(gold.sum(1))
        out["logprob_row"] = _lst(lprobs[0, 1])  # one full output distribution (non-gold entries too)
        loss, _, log = criterion(model, sample)
        out["criterion_loss"] = float(loss)
        if "nll_loss" in log:
            out["criterion_nll_loss"] = float(log["nll_loss"])
        if "marginal_loss" in log:
            out["criterion_marginal_loss"] = float(log["marginal_loss"])
        if kind == "dhmm":
            # the DP's exact sentence log-likelihood log p(E | F), sentence by sentence (criterion nll)
            out["dp_sentence_nll"] = [float(criterion(model, _sub(sample, b, task.target_dictionary.pad()))[2]["nll_loss"])
                                      for b in range(tgt.size(0))]
        if kind in ("translation", "dhmm"):
            out["incremental_gold_logprob"] = _lst(_incremental_gold(model, sample, mask))
        if kind == "iohmm_tagger":
            net = sample["net_input"]
            out["sequence_log_likelihood"] = _lst(model.sequence_log_likelihood(net["src_tokens"], net["src_lengths"], tgt))
        if kind == "vlhmm_tagger":
            out["joint_log_likelihood"] = _lst(model.joint_log_likelihood(sample["net_input"]["src_tokens"], tgt, mask))
        if kind == "lm":
            out["log_likelihood"] = _lst(model.log_likelihood(tgt, mask))
    if kind == "dhmm":
        net = sample["net_input"]
        post = model.alignment_posteriors(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], tgt)
        out["alignment_posteriors"] = _lst(post)
        explicit = model.alignment_posteriors(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], tgt,
                                              method="explicit")
        out["alignment_posteriors_explicit"] = _lst(explicit)
    return out


def _incremental_gold(model, sample, mask):
    """Gold log-probs decoding step by step with an incremental state (the path of beam search)."""
    net = sample["net_input"]
    prev, tgt = net["prev_output_tokens"], sample["target"]
    enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
    state = {}
    steps = []
    for t in range(prev.size(1)):
        o = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
        lp = model.get_normalized_probs(o, log_probs=True).double()[:, -1]
        steps.append(lp.gather(-1, tgt[:, t:t + 1]).squeeze(-1))
    return torch.stack(steps, 1).masked_fill(~mask, 0.0)


def load(name):
    """(model in eval mode, task, criterion) of fixture ``name`` through fairseq's public loading path."""
    from fairseq import checkpoint_utils

    import hmm_nmt  # noqa: F401  (registers the plugin; makes checkpoints loadable under torch >= 2.6)

    path = os.path.join(FIXTURE_DIR, f"{name}.pt")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=load_overrides(name),
                                                                      strict=True)
    criterion = task.build_criterion(cfg.criterion)
    return models[0].eval(), task, criterion


def scores_both_precisions(name, model, task, criterion, batch):
    kind = FIXTURES[name][0]
    s32 = score(kind, model, task, criterion, batch)
    s64 = score(kind, model.double(), task, criterion, batch)
    return {"float32": s32, "float64": s64}


def read_expected():
    with open(EXPECTED) as f:
        return json.load(f)
