"""The decoding stage of the translation benchmark: beam search of the test set and its scores.

The checkpoint is chosen (:mod:`benchmarks.checkpoints`), lenpen / EOS penalty tuned on dev if asked
(:mod:`benchmarks.tuning`), then fairseq-generate decodes ``test`` once; ``decode_done.json`` marks a
finished stage (redone when the command line changes).  The functions take the running
``benchmarks.translation.Benchmark`` as ``bench``.
"""
import os
import shlex
import time

from benchmarks.checkpoints import select_checkpoint
from benchmarks.common import USER_DIR, atomic_write, read_json, read_lines, write_json
from benchmarks.fairseq_runner import run_fairseq, task_args
from benchmarks.logs import parse_generate_output, parse_generate_speed
from benchmarks.progress import fmt_duration, say
from benchmarks.scoring import score
from benchmarks.tuning import choose_for_benchmark


def generate_args(bench, direction, slot, checkpoint, lenpen=None, eos_penalty=0.0):
    a = bench.args
    src, tgt = direction.split("-")
    cmd = [
        os.path.join(bench.data, bench.prep["directions"][direction]),
        "--user-dir", USER_DIR, *task_args(eos_penalty), "--source-lang", src, "--target-lang", tgt,
        "--path", checkpoint, "--gen-subset", "test",
        "--beam", str(a.beam), "--lenpen", str(a.lenpen if lenpen is None else lenpen),
        "--batch-size", str(a.gen_batch_size),
        "--required-batch-size-multiple", "1",  # see training.train_args: else the longest sentences vanish
        "--remove-bpe", bench.prep["remove_bpe"], "--num-workers", "0", "--seed", str(a.seed),
    ]
    if a.fp16:
        cmd.append("--fp16")
    return cmd + shlex.split(a.generate_args or "")


def decode(bench, direction, slot, pos):
    """Decode and score ``test`` for one (direction, slot): (the stage's record, sacrebleu scores).

    With ``--length-choice halves`` the test set is decoded with the pair the decision keeps (the record's own
    row) and with the other of (stock search, candidate) too, so that the results show both rows."""
    jdir = bench.job_dir(direction, slot)
    ckpt, how = select_checkpoint(jdir, bench.args.average_best)
    lenpen, eos_penalty, dev_rows, decision = choose_for_benchmark(bench, direction, slot, ckpt, pos)
    done, scores = _decode_test(bench, direction, slot, pos, ckpt, how, lenpen, eos_penalty, dev_rows, "")
    if decision is not None:
        cand, stock = decision["candidate"], decision["stock"]
        pairs = {"stock": (stock["lenpen"], stock["eos_penalty"]), "candidate": (cand["lenpen"], cand["eos_penalty"])}
        test = {}
        for name, (lp, pen) in pairs.items():
            if (lp, pen) == (lenpen, eos_penalty):
                test[name] = scores
            else:
                test[name] = _decode_test(bench, direction, slot, pos, ckpt, how, lp, pen, dev_rows, f".{name}")[1]
        done = dict(done, length_choice={
            **decision, "used": "candidate" if decision["adopted"] else "stock",
            "test": {k: {m: v[m] for m in ("bleu", "ter", "chrf", "length_ratio")} for k, v in test.items()}})
    return done, scores


def _decode_test(bench, direction, slot, pos, ckpt, how, lenpen, eos_penalty, dev_rows, tag):
    """One decode of ``test`` with (lenpen, EOS penalty), cached as ``test{tag}.hyp`` / ``decode{tag}_done.json``."""
    jdir = bench.job_dir(direction, slot)
    args = generate_args(bench, direction, slot, ckpt, lenpen, eos_penalty)
    tgt = direction.split("-")[1]
    refs = read_lines(os.path.join(bench.data, bench.prep["references"]["test"][tgt]))
    hyp_path = os.path.join(jdir, f"test{tag}.hyp")
    done_path = os.path.join(jdir, f"decode{tag}_done.json")
    if os.path.exists(done_path) and os.path.exists(hyp_path) and read_json(done_path)["fairseq_args"] == args:
        done = read_json(done_path)
        if not tag:
            bench.measured.setdefault((direction, slot), {})["decode"] = done["wall_seconds"]
        say(f"[{pos}] {direction} {slot}: decoding{tag.replace('.', ' (') + ')' if tag else ''} already done, "
            f"skipped")
    else:
        left, unknown = bench.estimate_remaining((direction, slot), 0.0)
        say(f"[{pos}] {direction} {slot}: decoding test ({len(refs)} sentences, beam {bench.args.beam}, lenpen "
            f"{lenpen:g}, EOS penalty {eos_penalty:g}) with {os.path.basename(ckpt)}; afterwards "
            f"{'>' if unknown else '~'}{fmt_duration(left)} left")
        stats_path = os.path.join(jdir, f"generate{tag}_stats.json")
        stdout_path = os.path.join(jdir, f"generate{tag}.out")
        t0 = time.time()
        run_fairseq(bench.python, bench.env, "generate", stats_path, args, os.path.join(jdir, f"generate{tag}.log"),
                    stdout_path=stdout_path)
        hyps = parse_generate_output(stdout_path, len(refs))
        speed = parse_generate_speed(stdout_path, os.path.join(jdir, f"generate{tag}.log"))
        atomic_write(hyp_path, "".join(h + "\n" for h in hyps))
        stats = read_json(stats_path)
        done = {"fairseq_args": args, "checkpoint": ckpt, "checkpoint_selection": how, "lenpen": lenpen,
                "eos_penalty": eos_penalty, "lenpen_dev": dev_rows,
                "wall_seconds": time.time() - t0, **speed,
                "peak_decode_rss_bytes": stats.get("max_rss_bytes"),
                "peak_decode_cuda_bytes": stats.get("cuda_max_allocated_bytes")}
        write_json(done_path, done)
        if not tag:
            bench.measured.setdefault((direction, slot), {})["decode"] = done["wall_seconds"]
    hyps = read_lines(hyp_path)
    return done, score(hyps, refs)
