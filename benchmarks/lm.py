"""The language-model benchmark's stages (``scripts/bench_lm.py``): the model zoo, fairseq-train / fairseq-validate
in child processes (with their peak RSS), and NLTK's interpolated Kneser-Ney 5-gram with an indexed continuation
count lookup (the same numbers as NLTK's scan, spot-checked at every run)."""
import math
import os
import re
import subprocess
import sys
import time

from tqdm import tqdm

from benchmarks.common import REPO as ROOT

# name -> fairseq arguments ({raw} is the --raw directory); m = 64 Brown clusters unless said otherwise
HMM = ["--arch", "hmm_lm", "--criterion", "hmm_lm", "--hmm-embed-dim", "256"]
MODELS = {
    "hmm-1k": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "16", "--state-dropout", "0.5"],
    "hmm-2k": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "32", "--state-dropout", "0.5"],
    "hmm-4k": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "64", "--state-dropout", "0.5"],
    "hmm-8k": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "128", "--state-dropout", "0.5"],
    "hmm-16k": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "256", "--state-dropout", "0.5"],
    "hmm-4k-nodrop": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "64",
                            "--state-dropout", "0"],
    "hmm-4k-scalar": HMM + ["--brown-clusters", "{raw}/brown64.txt", "--states-per-cluster", "64",
                            "--state-dropout", "0.5", "--parameterization", "scalar"],
    "hmm-4k-uniform": HMM + ["--constraint", "uniform", "--num-clusters", "64", "--states-per-cluster", "64",
                             "--state-dropout", "0.5"],
    "hmm-4k-brown128": HMM + ["--brown-clusters", "{raw}/brown128.txt", "--states-per-cluster", "32",
                              "--state-dropout", "0.5"],
    # the paper's Table 1 baselines: 2-layer 256-dim LSTM (3.6M params with tied embeddings), a small transformer
    "lstm": ["--arch", "lstm_lm", "--criterion", "cross_entropy", "--decoder-embed-dim", "256",
             "--decoder-hidden-size", "256", "--decoder-out-embed-dim", "256", "--decoder-layers", "2",
             "--share-decoder-input-output-embed", "--dropout", "0.3"],
    "transformer": ["--arch", "transformer_lm", "--criterion", "cross_entropy", "--decoder-layers", "2",
                    "--decoder-embed-dim", "256", "--decoder-ffn-embed-dim", "1024", "--decoder-attention-heads", "4",
                    "--share-decoder-input-output-embed", "--dropout", "0.3"],
}
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


def run_fairseq(name, spec, opts, env):
    save = os.path.join(opts.out, name)
    os.makedirs(save, exist_ok=True)
    args = [a.format(raw=opts.raw) for a in spec]
    train = [opts.bin, "--user-dir", os.path.join(ROOT, "hmm_nmt"), "--task", "language_modeling", *args,
             "--sample-break-mode", "eos", "--tokens-per-sample", "128", "--max-tokens", str(opts.max_tokens),
             "--required-batch-size-multiple", "1", "--optimizer", "adam", "--lr", str(opts.lr), "--clip-norm", "5",
             "--max-epoch", str(opts.epochs), "--seed", str(opts.seed), "--num-workers", "0", "--save-dir", save,
             "--no-epoch-checkpoints", "--no-last-checkpoints", "--log-format", "simple", "--log-interval", "20",
             "--no-progress-bar"]
    if opts.stop_minutes:
        train += ["--stop-time-hours", str(opts.stop_minutes / 60)]
    log_path = os.path.join(opts.out, f"{name}.train.log")
    if opts.reuse and os.path.isfile(os.path.join(save, "checkpoint_best.pt")) and os.path.isfile(log_path):
        log = open(log_path).read()  # trained by an earlier invocation: only score it again
    else:
        log = child("fairseq_cli.train", train, log_path, env)
    params = int(re.search(r"num\. shared model params: ([\d,]+)", log).group(1).replace(",", ""))
    wps = [float(x) for x in re.findall(r"\| train \| epoch \d+ \|.*?\| wps ([\d.]+)", log)]
    peak = int(re.findall(r"PEAK_RSS_KB (\d+)", log)[-1])
    valid_losses = [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", log)]
    with open(os.path.join(opts.raw, "train.txt"), encoding="utf-8") as f:
        train_tokens = sum(len(line.split()) + 1 for line in f if line.strip())  # words + </s>
    updates = [int(x) for x in re.findall(r"\| train \| epoch \d+ \|.*?\| num_updates (\d+)", log)]
    # a run stopped by --stop-minutes ends inside an epoch: time per epoch from the training speed
    res = {"params": params, "s_per_epoch": train_tokens / (sum(wps) / len(wps)), "epochs_run": len(wps),
           "updates": updates[-1] if updates else 0,
           "peak_rss_mb": peak / 1024, "valid_loss_per_epoch": valid_losses}
    train_ppl = re.findall(r"\| train \| epoch \d+ \|.*?\| ppl ([\d.]+)", log)
    if train_ppl:
        res["train_ppl_last_epoch"] = float(train_ppl[-1])
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
