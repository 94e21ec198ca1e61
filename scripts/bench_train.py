#!/usr/bin/env python3
"""Training throughput and peak memory of ``transformer`` vs the HMM decoders at equal sizes.

Each model trains N updates on the same batches (same data, sizes, optimizer and seed) in its own child
process of this one invocation, so that peak memory (RSS on CPU, max allocated on CUDA) is per model; the
script prints target tokens/s, peak memory and the ratio against the ``transformer`` baseline, then the
throughput of the exact fp32 lexicon kernel against plain matmul at the sizes of these batches
(scripts/bench_lexicon.py with N = the mean (i, j) rows per update; ``--skip-lexicon`` leaves it out).

    python scripts/bench_train.py                                  # embedded toy corpus, small model
    python scripts/bench_train.py --data data-bin/multi30k --embed-dim 256 --layers 3 --max-tokens 3400 \\
        --models transformer dhmm0 dhmm1 dhmm0:--lexicon-dtype=bf16 --updates 20

A model spec is ``transformer``, ``dhmm0``, ``dhmm1``, ``hnmc``, ``iohmm`` (chain decoders over a
transformer decoder of ``--layers`` layers), ``hnmc_chain``, ``iohmm_chain`` (chain-only decoders) or one
of them followed by ``:`` and extra fairseq flags separated by commas (e.g.
``dhmm0:--lexicon-chunk-size=512``). ``--models topk`` stands for the ``--lexicon-topk`` sweep: the
transformer, both orders exact and with K = 1, 2, 4, 8, and zero order with K = 4 and the bf16 lexicon,
all in one run.

``--vocab-sizes V ...`` repeats the whole comparison on synthetic corpora, one per V (Zipf-distributed words
of a V-word joint dictionary, sentences of 8-20 tokens; only speed is measured on them), and prints one table
of tokens/s and ratios to the transformer per V: ``--models lexicon`` stands for the transformer and both
orders with the softmax and the class lexicon (docs/speed.md, "Class-factored lexicon"):

    OMP_NUM_THREADS=1 python scripts/bench_train.py --threads 1 --vocab-sizes 2000 8000 32000 \
        --models lexicon --max-tokens 2048 --updates 3 --warmup 1 --skip-lexicon
"""
import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]
from benchmarks.microbench import expand_models, model_flags, run_children, toy_data_bin  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402


def run_one(spec, opts, queue):
    import torch
    from fairseq import options, tasks, utils

    import hmm_nmt  # noqa: F401  (registers the models)

    torch.set_num_threads(opts.threads)
    arch, criterion, flags = model_flags(spec)
    d, layers = str(opts.embed_dim), str(opts.layers)
    argv = [opts.data, "--arch", arch, "--criterion", criterion, "--label-smoothing", "0.1",
            "--encoder-embed-dim", d, "--decoder-embed-dim", d, "--encoder-ffn-embed-dim", str(4 * opts.embed_dim),
            "--decoder-ffn-embed-dim", str(4 * opts.embed_dim), "--encoder-layers", layers, "--decoder-layers", layers,
            "--encoder-attention-heads", str(opts.heads), "--decoder-attention-heads", str(opts.heads),
            "--share-all-embeddings", "--dropout", "0.1", "--max-tokens", str(opts.max_tokens), "--seed", "1",
            "--optimizer", "adam", "--lr", "0.0005"] + flags
    if opts.device == "cpu":
        argv.append("--cpu")
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    utils.set_torch_seed(1)
    task = tasks.setup_task(args)
    task.load_dataset("train")
    model = task.build_model(args).to(opts.device)
    crit = task.build_criterion(args)
    optim = torch.optim.Adam(model.parameters(), lr=5e-4)
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=opts.max_tokens,
                                  max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
                                  seed=1).next_epoch_itr(shuffle=True)
    batches = [utils.move_to_cuda(b) if opts.device == "cuda" else b for _, b in zip(range(opts.updates + opts.warmup), itr)]
    if len(batches) < opts.updates + opts.warmup:
        raise SystemExit(f"bench_train.py: only {len(batches)} batches in the training set; lower --updates")
    model.train()
    tokens, elapsed, rows = 0, 0.0, 0
    for step, sample in enumerate(batches):
        sync = torch.cuda.synchronize if opts.device == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        loss, _, _ = crit(model, sample)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        sync()
        if step >= opts.warmup:
            elapsed += time.perf_counter() - t0
            tokens += sample["ntokens"]
            # (i, j) rows of the exact direct-HMM lexicon: target x source length, per sentence
            tgt_len = sample["target"].ne(task.target_dictionary.pad()).sum(1)
            src_len = sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad()).sum(1)
            rows += int((tgt_len * src_len).sum())
    if opts.device == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2 ** 20
    else:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put({"model": spec, "params": sum(p.numel() for p in model.parameters()),
               "tok_per_s": tokens / elapsed, "sec_per_update": elapsed / opts.updates, "peak_mb": peak_mb,
               "lexicon_rows_per_update": rows / opts.updates, "vocab": len(task.target_dictionary)})


#: ``--models lexicon``: the transformer and both orders with each lexicon
LEXICON_SWEEP = ["transformer", "dhmm0", "dhmm0:--lexicon=class", "dhmm0:--lexicon=separable", "dhmm1",
                 "dhmm1:--lexicon=class", "dhmm1:--lexicon=separable"]


def synthetic_data_bin(workdir, vocab, sentences=3000, seed=1):
    """A binarised synthetic corpus with a joint dictionary of exactly ``vocab`` words (Zipf counts).

    Source and target are independent Zipf samples of 8-20 words: the timing of an update depends on the
    sizes only. The dictionary file carries the Zipf counts, so the class lexicon's frequency classes are
    those of a Zipfian vocabulary."""
    rng = random.Random(seed)
    words = [f"w{k}" for k in range(vocab)]
    weights = [1.0 / (k + 1) for k in range(vocab)]
    raw = os.path.join(workdir, f"raw{vocab}")
    os.makedirs(raw, exist_ok=True)
    with open(os.path.join(raw, "dict.txt"), "w") as f:
        f.writelines(f"{w} {max(1, int(10 ** 7 * p / sum(weights)))}\n" for w, p in zip(words, weights))
    for lang in ("src", "tgt"):
        for split, n in (("train", sentences), ("valid", 10)):
            with open(os.path.join(raw, f"{split}.{lang}"), "w") as f:
                f.writelines(" ".join(rng.choices(words, weights, k=rng.randint(8, 20))) + "\n" for _ in range(n))
    out = os.path.join(workdir, f"bin{vocab}")
    subprocess.run([sys.executable, "-m", "fairseq_cli.preprocess", "--source-lang", "src", "--target-lang", "tgt",
                    "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--destdir", out,
                    "--srcdict", os.path.join(raw, "dict.txt"), "--joined-dictionary", "--workers", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def vocab_sweep(opts):
    """The models at each of ``--vocab-sizes``: one table, ratios to the transformer at the same V."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for vocab in opts.vocab_sizes:
            opts.data = synthetic_data_bin(tmp, vocab)
            results = run_children("bench_train.py", opts.models, run_one, opts, lambda r: (
                f"V={r['vocab']:>6}  {r['tok_per_s']:>10.0f} tok/s  {1000 * r['sec_per_update']:>9.0f} ms/update"))
            base = next((r for r in results if r["model"] == "transformer"), results[0])
            for r in results:
                r["throughput_ratio"] = r["tok_per_s"] / base["tok_per_s"]
                r["vocab_requested"] = vocab
            rows += results
    print(f"\n{'V':>6} {'model':<28} {'tok/s':>9} {'ms/update':>10} {'ratio':>7} {'peak MB':>8}")
    for r in rows:
        print(f"{r['vocab']:>6} {r['model']:<28} {r['tok_per_s']:>9.0f} {1000 * r['sec_per_update']:>10.0f} "
              f"{r['throughput_ratio']:>7.3f} {r['peak_mb']:>8.0f}")
    by_model = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    print("\ngrowth of ms/update with V (exponent of a power law fitted between the smallest and largest V):")
    for model, rs in by_model.items():
        if len(rs) > 1 and rs[0]["vocab"] != rs[-1]["vocab"]:
            slope = (math.log(rs[-1]["sec_per_update"] / rs[0]["sec_per_update"])
                     / math.log(rs[-1]["vocab"] / rs[0]["vocab"]))
            print(f"  {model:<28} {slope:.2f}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="fairseq data-bin directory (default: the embedded toy corpus)")
    ap.add_argument("--models", nargs="+", default=["transformer", "dhmm0", "dhmm1"])
    ap.add_argument("--updates", type=int, default=10, help="timed updates per model")
    ap.add_argument("--warmup", type=int, default=2, help="untimed updates first")
    ap.add_argument("--embed-dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--skip-lexicon", action="store_true",
                    help="do not measure the exact lexicon kernel against matmul at this run's sizes")
    ap.add_argument("--json", help="also write the results to this JSON file")
    ap.add_argument("--vocab-sizes", type=int, nargs="+", metavar="V",
                    help="synthetic corpora with these vocabulary sizes instead of --data (see above)")
    opts = ap.parse_args(argv)
    opts.models = expand_models([m for s in opts.models for m in (LEXICON_SWEEP if s == "lexicon" else [s])])
    if opts.vocab_sizes:
        if opts.data is not None:
            ap.error("--vocab-sizes builds its own corpora: give it or --data, not both")
        if min(opts.vocab_sizes) < 10:
            ap.error(f"--vocab-sizes: at least 10 words, got {min(opts.vocab_sizes)}")
        rows = vocab_sweep(opts)
        if opts.json:
            atomic_write(opts.json, json.dumps({"models": rows}, indent=1))
        return
    if opts.data is not None and not os.path.isdir(opts.data):
        ap.error(f"--data {opts.data}: no such directory")
    with tempfile.TemporaryDirectory() as tmp:
        if opts.data is None:
            opts.data = toy_data_bin(tmp)
        results = run_children("bench_train.py", opts.models, run_one, opts, lambda r: (
            f"{r['tok_per_s']:>10.0f} tok/s  {r['peak_mb']:>8.0f} MB peak  {r['params'] / 1e6:>7.2f} M params"))
    base = next((r for r in results if r["model"] == "transformer"), results[0])
    print(f"\n{'model':<40} {'tok/s':>10} {'ratio':>7} {'peak MB':>9} {'mem ratio':>9} {'params':>10}")
    for r in results:
        r["throughput_ratio"] = r["tok_per_s"] / base["tok_per_s"]
        r["memory_ratio"] = r["peak_mb"] / base["peak_mb"]
        print(f"{r['model']:<40} {r['tok_per_s']:>10.0f} {r['throughput_ratio']:>7.3f} {r['peak_mb']:>9.0f} "
              f"{r['memory_ratio']:>9.2f} {r['params']:>10d}")
    kernel = None if opts.skip_lexicon else lexicon_efficiency(opts, results[0])
    if opts.json:
        atomic_write(opts.json, json.dumps({"models": results, "lexicon_kernel": kernel}, indent=1))


def lexicon_efficiency(opts, r):
    """Exact fp32 lexicon kernel (scripts/bench_lexicon.py) at this run's sizes: rows per update, d and V."""
    rows = max(1, round(r["lexicon_rows_per_update"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lexicon.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_lexicon.py"), "--rows", str(rows),
                        "--dim", str(opts.embed_dim), "--vocab", str(r["vocab"]), "--dtypes", "fp32",
                        "--threads", str(opts.threads), "--device", opts.device, "--json", path],
                       check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            kernel = json.load(f)[0]
    print(f"\nexact fp32 lexicon kernel at these sizes ({rows} (i, j) rows per update, d={opts.embed_dim}, "
          f"V={r['vocab']}): {kernel['useful_ratio']:.2f} of plain matmul throughput on the useful 6NdV flop, "
          f"{kernel['executed_ratio']:.2f} counting the recomputation in backward "
          f"({kernel['matmul_gflops']:.0f} GFLOP/s matmul, {kernel['extra_peak_mb']:.0f} MB extra peak)")
    return kernel


if __name__ == "__main__":
    main()
