"""The language-model benchmark's stages (``scripts/bench_lm.py``): the model zoo, fairseq-train / fairseq-validate
in child processes (with their peak RSS), and NLTK's interpolated Kneser-Ney 5-gram with an indexed continuation
count lookup (the same numbers as NLTK's scan, spot-checked at every run)."""
import glob
import math
import os
import re
import subprocess
import sys
import time

from tqdm import tqdm

from benchmarks import fairseq_runner
from benchmarks.common import REPO as ROOT
from benchmarks.common import BenchmarkError, read_json, write_json
from benchmarks.logs import parse_train_log
from benchmarks.stopping import stop_reason, training_clock
from hmm_nmt_align.base.atomic import atomic_output

# name -> fairseq arguments ({raw} is the --raw directory)
HMM = ["--arch", "hmm_lm", "--criterion", "hmm_lm", "--hmm-embed-dim", "256"]


def hmm(states_per_cluster, dropout="0.5", partition="brown64", extra=()):
    """An ``hmm_lm`` of 64 clusters x ``states_per_cluster`` states (``partition``: a Brown cluster file of
    --raw, or ``uniform``)."""
    part = (["--constraint", "uniform", "--num-clusters", "64"] if partition == "uniform"
            else ["--brown-clusters", "{raw}/" + partition + ".txt"])
    return HMM + part + ["--states-per-cluster", str(states_per_cluster), "--state-dropout", dropout, *extra]


SCALAR = ("--parameterization", "scalar")
MODELS = {
    **{f"hmm-{k}k": hmm(16 * k) for k in (1, 2, 4, 8, 16, 32)},
    # the paper's Table 3 ablations are at 16k states; the 4k ones are what a CPU trains
    **{f"hmm-{k}k-nodrop": hmm(16 * k, dropout="0") for k in (4, 8, 16)},
    **{f"hmm-{k}k-scalar": hmm(16 * k, extra=SCALAR) for k in (4, 16)},
    **{f"hmm-{k}k-uniform": hmm(16 * k, partition="uniform") for k in (4, 16)},
    "hmm-4k-brown128": hmm(32, partition="brown128"),
    # the paper's Table 1 baselines: 2-layer 256-dim LSTM (3.6M params with tied embeddings), a small transformer
    "lstm": ["--arch", "lstm_lm", "--criterion", "cross_entropy", "--decoder-embed-dim", "256",
             "--decoder-hidden-size", "256", "--decoder-out-embed-dim", "256", "--decoder-layers", "2",
             "--share-decoder-input-output-embed", "--dropout", "0.3"],
    "transformer": ["--arch", "transformer_lm", "--criterion", "cross_entropy", "--decoder-layers", "2",
                    "--decoder-embed-dim", "256", "--decoder-ffn-embed-dim", "1024", "--decoder-attention-heads", "4",
                    "--share-decoder-input-output-embed", "--dropout", "0.3",
                    # without warm-up and pre-norm, Adam at the benchmark's lr 0.003 diverged on Multi30k (NaN) and
                    # stalled at dev ppl 553 on WSJ (H100 run, issue 26)
                    "--decoder-normalize-before", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400",
                    "--warmup-init-lr", "1e-07"],
}
# the baselines' dropout is chosen on dev (WSJ's 212k training tokens overfit a 3.6M-parameter LSTM quickly)
for _p in ("0.1", "0.5"):
    MODELS[f"lstm-drop{_p}"] = [_p if a == "0.3" else a for a in MODELS["lstm"]]
    MODELS[f"transformer-drop{_p}"] = [_p if a == "0.3" else a for a in MODELS["transformer"]]
# the transformer as first run on the H100 (constant lr, post-norm), to reproduce those rows
for _name in ("transformer", "transformer-drop0.5"):
    _spec = MODELS[_name]
    MODELS[_name.replace("transformer", "transformer-constlr")] = _spec[:_spec.index("--decoder-normalize-before")]
DEFAULT = "kn5,lstm,transformer,hmm-1k,hmm-2k,hmm-4k,hmm-4k-nodrop,hmm-4k-scalar,hmm-4k-uniform"

# the child: fairseq's CLI, then its own peak RSS (ru_maxrss of this process only, in KiB on Linux)
CHILD = ("import resource, runpy, sys\n"
         "sys.argv = sys.argv[1:]\n"
         "try:\n"
         "    runpy.run_module(sys.argv[0], run_name='__main__')\n"
         "finally:\n"
         "    print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")


def child(module, args, log_path, env):
    with open(log_path, "w") as log:
        proc = subprocess.run([sys.executable, "-c", CHILD, module, *args], stdout=log, stderr=subprocess.STDOUT,
                              env=env, cwd=ROOT)
    text = open(log_path).read()
    if proc.returncode != 0:
        raise RuntimeError(f"{module} failed ({proc.returncode}), see {log_path}:\n{text[-1500:]}")
    return text


def index_continuations(lm):
    """Replace NLTK's KneserNey._continuation_counts, which scans every context of the next order on each
    call (about 15 s per sentence here), by a lookup in counts precomputed in one pass: the same numbers
    (N1+(. context word) and N1+(. context .)), so the model is NLTK's own Kneser-Ney."""
    from collections import Counter, defaultdict

    est = lm.estimator
    slow = est._continuation_counts
    word_counts, totals = defaultdict(Counter), Counter()
    for k in range(2, lm.order + 1):
        for prefix, counts in lm.counts[k].items():
            ctx = tuple(prefix[1:])
            for w, n in counts.items():
                if n > 0:
                    word_counts[ctx][w] += 1
                    totals[ctx] += 1

    def fast(word, context=tuple()):
        context = tuple(context)
        return word_counts[context][word] if context in word_counts else 0, totals[context]

    est._continuation_counts = fast
    return slow, fast


def kn5(raw, order=5, discount=0.75):
    """Interpolated Kneser-Ney n-gram (NLTK): (dev ppl, test ppl, number of n-gram entries, seconds)."""
    import random

    from nltk.lm import KneserNeyInterpolated
    from nltk.lm.preprocessing import pad_both_ends, padded_everygram_pipeline
    from nltk.util import ngrams

    def read(name):
        with open(os.path.join(raw, f"{name}.txt"), encoding="utf-8") as f:
            return [line.split() for line in f if line.strip()]

    t0 = time.time()
    train = read("train")
    grams, vocab = padded_everygram_pipeline(order, train)
    lm = KneserNeyInterpolated(order, discount=discount)
    lm.fit(grams, vocab)
    entries = sum(len(lm.counts[i]) if i == 1 else sum(len(c) for c in lm.counts[i].values())
                  for i in range(1, order + 1))
    slow, fast = index_continuations(lm)
    rng = random.Random(0)  # spot check the index against NLTK's scan
    for s in rng.sample(train, 3):
        g = list(ngrams(list(pad_both_ends(s, n=order)), order))[rng.randrange(len(s))]
        for k in range(0, order - 1):
            ctx = tuple(g[k + 1:-1])
            if slow(g[-1], ctx) != fast(g[-1], ctx):
                raise AssertionError(f"continuation index disagrees with NLTK at {g[-1]!r} | {ctx}")
    out = []
    for split in ("valid", "test"):
        nll, n = 0.0, 0
        for s in tqdm(read(split), desc=f"kn5 {split}", leave=False, mininterval=5):
            # the words and one </s>: pad_both_ends adds order - 1 </s>, the later ones are not tokens
            for g in list(ngrams(list(pad_both_ends(s, n=order)), order))[:len(s) + 1]:
                p = lm.score(g[-1], list(g[:-1]))
                if p <= 0:  # NLTK gives an unseen word no unigram mass
                    raise ValueError(f"{raw}/{split}.txt: {g[-1]!r} never seen in training (map it to <unk>)")
                nll -= math.log(p)
                n += 1
        out.append(math.exp(nll / n))
    return out[0], out[1], entries, time.time() - t0


def train_command(name, spec, opts):
    """fairseq-train's arguments for model ``name``: the bound is ``--epochs`` (fairseq's --max-epoch) and
    ``--stop-minutes``; ``--patience P`` adds fairseq's early stopping on the validation loss (one validation
    per epoch here, so P counts epochs)."""
    save = os.path.join(opts.out, name)
    args = [a.format(raw=opts.raw) for a in spec]
    train = [opts.bin, "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--task", "language_modeling", *args,
             "--sample-break-mode", "eos", "--tokens-per-sample", "128", "--max-tokens", str(opts.max_tokens),
             "--required-batch-size-multiple", "1", "--optimizer", "adam", "--lr", str(opts.lr), "--clip-norm", "5",
             "--max-epoch", str(opts.epochs), "--seed", str(opts.seed), "--num-workers", "0", "--save-dir", save,
             # checkpoint_last.pt stays: an interrupted training resumes from it
             "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "20", "--no-progress-bar"]
    if opts.stop_minutes:
        train += ["--stop-time-hours", str(opts.stop_minutes / 60)]
    if getattr(opts, "patience", 0):
        train += ["--patience", str(opts.patience)]
    return save, train


def train_model(name, spec, opts, env):
    """Train ``name`` (or resume it, or skip it when done), as the translation benchmark does: the command line
    is recorded (a rerun with another is refused), an interrupted run resumes from ``checkpoint_last.pt`` through
    fairseq (the instrumented wrapper keeps the --patience counter), ``train_done.json`` marks the end."""
    save, train = train_command(name, spec, opts)
    os.makedirs(save, exist_ok=True)
    log_path = os.path.join(opts.out, f"{name}.train.log")
    cmd_path, done_path = os.path.join(save, "train_command.json"), os.path.join(save, "train_done.json")
    if os.path.exists(cmd_path):
        old = read_json(cmd_path)["fairseq_args"]
        if old != train:
            raise BenchmarkError(f"{save} was trained with another command line; delete it or use another --out\n"
                                 f"  was: {' '.join(old)}\n  now: {' '.join(train)}")
    elif os.path.exists(log_path):  # trained by a version of this script that kept no resumable state
        os.replace(log_path, log_path + ".old")
    write_json(cmd_path, {"fairseq_args": train})
    if os.path.exists(done_path):
        return
    runs = sorted(glob.glob(os.path.join(save, "train_stats.*.json")), key=lambda p: int(p.rsplit(".", 2)[-2]))
    stats_path = os.path.join(save, f"train_stats.{len(runs)}.json")
    if runs:
        tqdm.write(f"{name}: resuming from {os.path.join(save, 'checkpoint_last.pt')}", file=sys.stderr)
    fairseq_runner.run_fairseq(sys.executable, env, "train", stats_path, train, log_path)
    write_json(done_path, {"finished": time.time()})


def run_fairseq(name, spec, opts, env):
    save = os.path.join(opts.out, name)
    log_path = os.path.join(opts.out, f"{name}.train.log")
    if not (opts.reuse and os.path.isfile(os.path.join(save, "checkpoint_best.pt")) and os.path.isfile(log_path)):
        train_model(name, spec, opts, env)
    # otherwise trained by an earlier invocation: only score it again
    log = parse_train_log(log_path)
    runs = [read_json(p) for p in sorted(glob.glob(os.path.join(save, "train_stats.*.json")),
                                         key=lambda p: int(p.rsplit(".", 2)[-2]))]
    clock = training_clock(runs)
    epochs = log["train_epochs"]
    wps = [e["wps"] for e in epochs if e.get("wps")]
    with open(os.path.join(opts.raw, "train.txt"), encoding="utf-8") as f:
        train_tokens = sum(len(line.split()) + 1 for line in f if line.strip())  # words + </s>
    curve = log.get("valid_curve") or []
    if not curve or log["params"] is None:
        raise BenchmarkError(f"{log_path}: no validation record or no parameter count (did training start?)")
    best = min(curve, key=lambda r: r["loss"])
    peak = max((r.get("max_rss_bytes") or 0) for r in runs) if runs else 0
    # a run stopped by --stop-minutes ends inside an epoch: time per epoch from the training speed
    res = {"params": log["params"], "s_per_epoch": train_tokens / (sum(wps) / len(wps)) if wps else None,
           "epochs_run": len(epochs), "updates": max(log["updates"], curve[-1]["updates"]),
           "peak_rss_mb": peak / 2**20 if peak else None,
           "valid_loss_per_epoch": [r["loss"] for r in curve],
           "stopped_at_epoch": curve[-1]["epoch"], "stopped_at_update": max(log["updates"], curve[-1]["updates"]),
           "stop_reason": stop_reason(log, runs), "patience": getattr(opts, "patience", 0) or None,
           "best_dev_loss": best["loss"], "best_dev_epoch": best["epoch"], "best_dev_update": best["updates"],
           "train_wall_s": clock["wall_seconds"] if runs else None, "train_cpu_s": clock["cpu_seconds"] if runs else None,
           "fairseq_runs": log["runs"], "resumed_at_updates": log["resumed_from"]}
    if epochs and epochs[-1].get("ppl") is not None:
        res["train_ppl_last_epoch"] = epochs[-1]["ppl"]
    # fairseq-validate: the criterion's exact NLL on each split (for hmm_lm the blocked forward; the tests
    # check that stock fairseq-eval-lm, which reads the full next-token distribution, gives the same number)
    ev = child("fairseq_cli.validate", [opts.bin, "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--task",
                                        "language_modeling", "--path", os.path.join(save, "checkpoint_best.pt"),
                                        "--valid-subset", "valid,test", "--sample-break-mode", "eos",
                                        "--tokens-per-sample", "128", "--max-tokens", "2048",
                                        "--required-batch-size-multiple", "1", "--num-workers", "0"],
               os.path.join(opts.out, f"{name}.eval.log"), env)
    for split, key in (("valid", "dev_ppl"), ("test", "test_ppl")):
        res[key] = float(re.search(rf"valid on '{split}' subset \| loss [\d.]+ \| (?:nll_loss [\d.]+ \| )?ppl ([\d.]+)",
                                   ev).group(1))
    return res


def collect(out_dirs):
    """Merge the ``results.json`` of several benchmark outputs (models trained in parallel processes, one ``--out``
    each, or one ``--out`` per seed): ``{model: [result, ...]}`` in the order found, each result tagged with the
    output directory it came from (``"out"``).  Raises :class:`BenchmarkError` for a directory without results."""
    merged = {}
    for d in out_dirs:
        path = os.path.join(d, "results.json")
        if not os.path.isfile(path):
            raise BenchmarkError(f"{path}: no such file (not a bench_lm.py --out, or nothing finished there)")
        for name, res in read_json(path).items():
            merged.setdefault(name, []).append(dict(res, out=d))
    return merged


def plot_dev_curves(merged, path, title):
    """Dev perplexity after every epoch, one line per model (its first run), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # more than 10 models: no colour twice
    for name, runs in merged.items():
        curve = runs[0].get("valid_loss_per_epoch")
        if curve:  # fairseq logs the loss in base 2
            ax.plot(range(1, len(curve) + 1), [2 ** x for x in curve], marker=".", label=name)
        elif runs[0].get("dev_ppl") is not None:  # the 5-gram: one number
            ax.axhline(runs[0]["dev_ppl"], color="black", linestyle="--", label=f"{name} ({runs[0]['dev_ppl']:.1f})")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev perplexity")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    with atomic_output(path, suffix=".tmp.png") as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
