#!/usr/bin/env python3
"""Beam-search decoding speed and peak memory of ``transformer`` vs ``transformer_dhmm`` at equal sizes.

Every model decodes the same sentences with fairseq's SequenceGenerator (the code behind fairseq-generate),
each in its own child process of this invocation; the script prints sentences/s, target tokens/s, peak
memory, the memory of the decoding loop beyond the model and the data ("decode MB") and ratios against the
``transformer`` baseline.

Without checkpoints the models are freshly initialised and every hypothesis is forced to the same length
(``--min-len`` = ``--max-len``), so that the comparison measures the decoder, not what an untrained model
happens to emit. With ``--checkpoint NAME=PATH`` (repeatable) trained models decode freely;
``NAME=PATH,lexicon_topk=2`` decodes one with model overrides (decode-time K, ``lexicon_dtype=bf16``), as
``--model-overrides`` does for fairseq-generate.

    python scripts/bench_decode.py                                   # toy corpus, random models
    python scripts/bench_decode.py --data data-bin/multi30k --subset test \\
        --checkpoint transformer=ckpt/base.pt --checkpoint dhmm0=ckpt/dhmm.pt --checkpoint dhmm1=ckpt/fo.pt
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]
from benchmarks.microbench import expand_models, model_flags, run_children, toy_data_bin  # noqa: E402
from hmm_nmt_align.base.atomic import atomic_write  # noqa: E402


def _rss_kb(field):
    """VmRSS (current) or VmHWM (peak since the last reset) of this process, in kB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak_rss():
    """Restart VmHWM from the current RSS (Linux >= 4.0), so the peak covers decoding only."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def run_one(spec, opts, queue):
    import torch
    from fairseq import checkpoint_utils, options, tasks, utils
    from fairseq.sequence_generator import SequenceGenerator

    import hmm_nmt  # noqa: F401

    torch.set_num_threads(opts.threads)
    path, overrides = dict(opts.checkpoint).get(spec, (None, {}))
    if path is not None:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [path], arg_overrides={"data": opts.data, **overrides})
        model = models[0]
        min_len, max_len_a, max_len_b = 1, 1.2, 10
    else:
        arch, criterion, flags = model_flags(spec)
        d, layers = str(opts.embed_dim), str(opts.layers)
        argv = [opts.data, "--arch", arch, "--encoder-embed-dim", d, "--decoder-embed-dim", d,
                "--encoder-ffn-embed-dim", str(4 * opts.embed_dim), "--decoder-ffn-embed-dim", str(4 * opts.embed_dim),
                "--encoder-layers", layers, "--decoder-layers", layers, "--encoder-attention-heads", str(opts.heads),
                "--decoder-attention-heads", str(opts.heads), "--share-all-embeddings"] + flags
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        utils.set_torch_seed(1)
        task = tasks.setup_task(args)
        model = task.build_model(args)
        min_len, max_len_a, max_len_b = opts.length, 0, opts.length
    model = model.to(opts.device).eval()
    task.load_dataset(opts.subset)
    dataset = task.dataset(opts.subset)
    itr = task.get_batch_iterator(dataset=dataset, max_sentences=opts.batch_size, seed=1).next_epoch_itr(shuffle=False)
    batches = [b for _, b in zip(range(opts.warmup + opts.max_batches), itr)]
    if len(batches) <= opts.warmup:
        raise SystemExit(f"bench_decode.py: only {len(batches)} batches in '{opts.subset}'; lower --warmup")
    gen = SequenceGenerator([model], task.target_dictionary, beam_size=opts.beam, min_len=min_len,
                            max_len_a=max_len_a, max_len_b=max_len_b)
    sents, toks, elapsed = 0, 0, 0.0
    if opts.device == "cpu":  # decoding memory beyond the model, the data and the interpreter
        _reset_peak_rss()
        rss_before = _rss_kb("VmRSS")
    else:
        torch.cuda.reset_peak_memory_stats()
        rss_before = torch.cuda.memory_allocated() / 1024
    with torch.no_grad():
        for n, sample in enumerate(batches):
            if opts.device == "cuda":
                sample = utils.move_to_cuda(sample)
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            hypos = gen.generate([model], sample)
            if opts.device == "cuda":
                torch.cuda.synchronize()
            if n < opts.warmup:  # one-off costs (allocator, oneDNN primitives) are not decoding speed
                continue
            elapsed += time.perf_counter() - t0
            sents += len(hypos)
            toks += sum(len(h[0]["tokens"]) for h in hypos)
    if opts.device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2 ** 20
        decode_extra = peak - rss_before / 1024
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        decode_extra = (_rss_kb("VmHWM") - rss_before) / 1024
    queue.put({"model": spec, "sent_per_s": sents / elapsed, "tok_per_s": toks / elapsed, "sentences": sents,
               "peak_mb": peak, "decode_extra_mb": decode_extra})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="fairseq data-bin directory (default: the embedded toy corpus)")
    ap.add_argument("--subset", default="valid")
    ap.add_argument("--models", nargs="+", default=["transformer", "dhmm0", "dhmm1"],
                    help="model specs as in bench_train.py (``topk``: the --lexicon-topk sweep)")
    ap.add_argument("--checkpoint", action="append", default=[], metavar="NAME=PATH[,KEY=VALUE...]",
                    help="decode a trained checkpoint under the name NAME (repeatable), with optional model "
                         "overrides, e.g. dhmm0-k2=ckpt.pt,lexicon_topk=2")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-batches", type=int, default=4, help="timed batches per model")
    ap.add_argument("--warmup", type=int, default=1, help="untimed batches first")
    ap.add_argument("--length", type=int, default=15, help="forced hypothesis length for untrained models")
    ap.add_argument("--embed-dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--json", help="also write the results to this JSON file")
    opts = ap.parse_args(argv)
    checkpoints = []
    for item in opts.checkpoint:
        name, sep, rest = item.partition("=")
        path, *pairs = rest.split(",")
        if not sep or not os.path.isfile(path):
            ap.error(f"--checkpoint {item}: expected NAME=PATH[,KEY=VALUE...] with an existing checkpoint file")
        overrides = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                ap.error(f"--checkpoint {item}: model override '{pair}' is not KEY=VALUE")
            overrides[key] = int(value) if value.lstrip("-").isdigit() else value
        checkpoints.append((name, (path, overrides)))
    opts.checkpoint = checkpoints
    models = [n for n, _ in checkpoints] or expand_models(opts.models)
    if opts.data is not None and not os.path.isdir(opts.data):
        ap.error(f"--data {opts.data}: no such directory")
    with tempfile.TemporaryDirectory() as tmp:
        if opts.data is None:
            opts.data = toy_data_bin(tmp)
        results = run_children("bench_decode.py", models, run_one, opts, lambda r: (
            f"{r['sent_per_s']:>8.1f} sent/s {r['tok_per_s']:>8.0f} tok/s {r['peak_mb']:>7.0f} MB "
            f"{r['decode_extra_mb']:>7.1f} MB decoding"))
    base = next((r for r in results if r["model"] == "transformer"), results[0])
    print(f"\n{'model':<30} {'sent/s':>8} {'tok/s':>8} {'ratio':>7} {'peak MB':>8} {'decode MB':>9} {'ratio':>6}"
          f"  (beam {opts.beam}, batch {opts.batch_size})")
    for r in results:
        r["speed_ratio"] = r["sent_per_s"] / base["sent_per_s"]
        r["decode_memory_ratio"] = r["decode_extra_mb"] / max(base["decode_extra_mb"], 1e-9)
        print(f"{r['model']:<30} {r['sent_per_s']:>8.1f} {r['tok_per_s']:>8.0f} {r['speed_ratio']:>7.3f} "
              f"{r['peak_mb']:>8.0f} {r['decode_extra_mb']:>9.1f} {r['decode_memory_ratio']:>6.2f}")
    print("decode MB: peak memory of the decoding loop beyond what the process held after loading the model and "
          "the batches (CPU: peak RSS via /proc VmHWM, reset before decoding; GPU: max_memory_allocated)")
    if opts.json:
        atomic_write(opts.json, json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
