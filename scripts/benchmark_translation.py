#!/usr/bin/env python
"""Side-by-side benchmark of ``transformer``, ``transformer_dhmm`` (zero order) and the first-order direct HMM.

Input is a directory made by ``examples/multi30k/prepare.sh`` (``prepare.json``, ``bin/<src>-<tgt>`` binarised
with one joint dictionary, ``text/`` tokenised references).  For every direction and model ("slot") it

1. trains with ``fairseq-train`` (identical sizes, optimiser, schedule, seed, batch size and budget for all
   slots; the budget is ``--max-update`` and/or ``--budget-minutes``, the latter passed as fairseq's
   ``--stop-time-hours``, which counts cumulative training time across restarts);
2. takes ``checkpoint_best.pt`` (lowest validation loss) or the average of the ``--average-best`` best ones;
3. decodes ``test`` (test_2016_flickr) with ``fairseq-generate`` and beam 5;
4. scores the BPE-free hypotheses against the tokenised references with sacrebleu: BLEU, TER and chrF with
   ``-tok none -lc`` semantics (no further tokenisation, case-insensitive), plus the length ratio;

and measures parameters, training target tokens per second of optimisation steps, decoding sentences/s and
tokens/s (fairseq-generate's own timer), peak memory (RSS; CUDA max allocated when on GPU) and the validation
curve.  ``results.json``, ``results.md`` and PNG plots (validation loss vs updates, throughput bars) go to
``--out``.

``--seeds 1,2,3`` repeats the whole benchmark once per seed (``--out``/seed-N, each a benchmark of its own) and
writes ``summary.json`` / ``summary.md`` to ``--out``: per model the per-seed values and their mean and sample
standard deviation (``benchmarks/seeds.py``).

``--patience P`` stops each model after P validations in a row without a lower validation loss (fairseq's
``--patience``, resumable: ``benchmarks/fairseq_instrumented.py``), with ``--max-update`` / ``--budget-minutes`` as
the bound; every model's stop update, reason, best validation, wall clock and CPU time, and the wall clock to
first reach the transformer's best dev score (``--dev-bleu``: dev BLEU per validation; else the validation NLL)
go to the report.  ``--length-choice halves`` chooses lenpen / EOS penalty on half the dev set and keeps it
only if the other half confirms it (``benchmarks/tuning.py``).

``--train-only`` stops after training; the same command without it then decodes, on this machine or another
one that holds a copy of ``--out`` (train on a GPU, decode on CPUs): the report names both machines.

A larger ``--max-update`` / ``--budget-minutes`` on an existing ``--out`` continues the models the old bound
stopped from their ``checkpoint_last.pt`` (their earlier decodes move to ``superseded-UPDATES/``); models that
stopped by patience are kept.  Percentages in ``--lexicon-topk-schedule`` (``dhmm0_fast``: ``4@0,0@80%``) then
refer to the new bound, as if training had started with it, so a model past its exact switch prunes again up to
80% of the new bound; the run says so.

Interrupting is safe: a rerun with the same arguments resumes training from ``checkpoint_last.pt`` and skips
every stage already done; a rerun with different training settings refuses to mix them.  On a CUDA machine
the same command trains on the GPU (fairseq's default); ``--fp16`` is passed through to train and generate.

Slots and their defaults (``--arch SLOT=ARCH``, ``--criterion SLOT=NAME``, ``--slot-args SLOT=ARGS`` override):
  transformer  transformer                    label_smoothed_cross_entropy
  dhmm0        transformer_dhmm               dhmm_label_smoothed_cross_entropy  + --lexicon softmax
  dhmm1        transformer_dhmm_first_order   dhmm_label_smoothed_cross_entropy  + --lexicon softmax
  dhmm0_fast   transformer_dhmm               dhmm_label_smoothed_cross_entropy  + --lexicon-topk-schedule 4@0,0@80%
  dhmm1_fast   transformer_dhmm_first_order   dhmm_label_smoothed_cross_entropy  (top-4 pruned, then exact; see docs)
  (both fast slots: --lexicon softmax --lexicon-topk-objective pruned --lexicon-dtype auto, bf16 where the
  CPU/GPU has it natively)
  dhmm0_sep    transformer_dhmm               dhmm_label_smoothed_cross_entropy  + --lexicon separable
  dhmm1_sep    transformer_dhmm_first_order   dhmm_label_smoothed_cross_entropy  + --lexicon separable
  hnmc         transformer_hnmc               label_smoothed_cross_entropy
  iohmm        transformer_iohmm              label_smoothed_cross_entropy

The stages live in the ``benchmarks`` package (``benchmarks/translation.py`` runs them); this is its command line.
"""

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout: this checkout's package
    sys.path[:0] = [ROOT, os.path.join(ROOT, "alignment")]

from benchmarks.common import BenchmarkError  # noqa: E402
from benchmarks.fairseq_runner import interrupt_on_sigterm  # noqa: E402
from benchmarks.seeds import parse_seeds  # noqa: E402
from benchmarks.translation import Benchmark, run_seeds  # noqa: E402


def get_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("data and output")
    g.add_argument("--data", required=True, help="directory made by examples/multi30k/prepare.sh")
    g.add_argument("--out", required=True, help="output directory (reused to resume)")
    g.add_argument("--directions", default="de-en", help="comma-separated, e.g. de-en,en-de")
    g.add_argument("--models", default="transformer,dhmm0,dhmm1", help="comma-separated slots")
    g.add_argument("--arch", action="append", metavar="SLOT=ARCH", help="architecture of a slot")
    g.add_argument("--criterion", action="append", metavar="SLOT=NAME", help="criterion of a slot")
    g.add_argument("--slot-args", action="append", metavar="SLOT=ARGS",
                   help="extra fairseq-train arguments of one slot, e.g. 'dhmm1=--lexicon-chunk-size 16'")
    g = p.add_argument_group("model size (identical for every slot; encoder and decoder alike)")
    g.add_argument("--embed-dim", type=int, default=256)
    g.add_argument("--ffn-dim", type=int, default=1024)
    g.add_argument("--layers", type=int, default=3)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--no-share-embeddings", action="store_true", help="do not pass --share-all-embeddings")
    g = p.add_argument_group("training (identical for every slot)")
    g.add_argument("--max-update", type=int, default=0, help="stop after N updates (0: no limit)")
    g.add_argument("--budget-minutes", type=float, default=0.0,
                   help="stop after M minutes of training per model (fairseq --stop-time-hours; 0: no limit)")
    g.add_argument("--max-tokens", type=int, default=4096)
    g.add_argument("--lr", type=float, default=5e-4)
    g.add_argument("--warmup-updates", type=int, default=1000)
    g.add_argument("--dropout", type=float, default=0.3)
    g.add_argument("--label-smoothing", type=float, default=0.1)
    g.add_argument("--weight-decay", type=float, default=1e-4)
    g.add_argument("--clip-norm", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--seeds", default="",
                   help="comma-separated seeds, e.g. 1,2: one benchmark per seed in OUT/seed-N, then mean and "
                        "spread over seeds in OUT/summary.md and summary.json (overrides --seed)")
    g.add_argument("--patience", type=int, default=0,
                   help="early stopping: stop a model after P validations in a row without a lower validation loss "
                        "(fairseq's --patience; it counts validations, i.e. every --validate-interval-updates and "
                        "every epoch end, not epochs); --max-update / --budget-minutes stay the upper bound "
                        "(0: no early stopping)")
    g.add_argument("--dev-bleu", action="store_true",
                   help="also compute dev BLEU at every validation (fairseq's --eval-bleu, stock search with "
                        "--dev-bleu-beam) for the time-to-quality column; costs one dev decode per validation")
    g.add_argument("--dev-bleu-beam", type=int, default=1, help="beam of --dev-bleu's decode (1: greedy, cheap)")
    g.add_argument("--validate-interval-updates", type=int, default=0,
                   help="validate and save every N updates besides every epoch (0: every epoch only)")
    g.add_argument("--average-best", type=int, default=1,
                   help="decode the parameter average of the N best checkpoints on validation (1: the best)")
    g.add_argument("--fp16", action="store_true", help="pass --fp16 to fairseq (CUDA only)")
    g.add_argument("--train-args", default="", help="extra fairseq-train arguments for every slot")
    g = p.add_argument_group("decoding")
    g.add_argument("--beam", type=int, default=5)
    g.add_argument("--lenpen", type=float, default=1.0)
    g.add_argument("--tune-lenpen", default="", metavar="GRID",
                   help="choose each model's lenpen on valid (best BLEU) among these comma-separated values, e.g. "
                        "0.6,0.8,1.0,1.2,1.4 (one n-best search per model: scripts/tune_lenpen.py); overrides --lenpen")
    g.add_argument("--tune-eos-penalty", default="", metavar="GRID",
                   help="also choose an EOS penalty on valid (--task translation_eos_penalty: it lengthens the "
                        "search itself, which lenpen cannot), jointly with --tune-lenpen's grid, e.g. 0,1,2,3,4 "
                        "(one n-best search per value)")
    g.add_argument("--length-choice", choices=["dev", "halves"], default="dev",
                   help="how --tune-lenpen / --tune-eos-penalty choose: 'dev' the best pair on the whole dev set; "
                        "'halves' the best on the even dev lines, kept only if on the odd lines it beats the stock "
                        "search (lenpen 1, no EOS penalty) in BLEU with TER not worse, else the stock search; the "
                        "test set is then decoded with both (benchmarks/tuning.py)")
    g.add_argument("--gen-batch-size", type=int, default=128)
    g.add_argument("--generate-args", default="", help="extra fairseq-generate arguments")
    g = p.add_argument_group("execution")
    g.add_argument("--threads", type=int, default=0, help="OMP/MKL threads of each fairseq process (0: torch default)")
    g.add_argument("--num-workers", type=int, default=0, help="fairseq data loader workers for training")
    g.add_argument("--log-interval", type=int, default=10, help="fairseq log interval (updates)")
    g.add_argument("--python", default=None, help="interpreter with fairseq (default: this one)")
    g.add_argument("--no-plots", action="store_true")
    g.add_argument("--train-only", action="store_true",
                   help="train every model, then stop before decoding; the same command without it decodes and "
                        "scores (on this or another machine: copy OUT with each checkpoint_best.pt, e.g. train on "
                        "a GPU and decode on CPUs)")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)
    for name in ("max_update", "max_tokens", "embed_dim", "ffn_dim", "layers", "heads", "beam", "gen_batch_size",
                 "average_best", "log_interval", "patience", "dev_bleu_beam"):
        if getattr(args, name) < (0 if name in ("max_update", "patience") else 1):
            print(f"benchmark_translation.py: error: --{name.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    if args.budget_minutes < 0 or args.threads < 0 or args.num_workers < 0:
        print("benchmark_translation.py: error: --budget-minutes, --threads and --num-workers must be >= 0",
              file=sys.stderr)
        return 2
    for flag, grid in (("--tune-lenpen", "lenpen_grid"), ("--tune-eos-penalty", "eos_penalty_grid")):
        text = getattr(args, flag[2:].replace("-", "_"))
        try:
            setattr(args, grid, [float(x) for x in text.split(",") if x.strip()])
        except ValueError:
            print(f"benchmark_translation.py: error: {flag} expects comma-separated numbers, got '{text}'",
                  file=sys.stderr)
            return 2
        if not all(math.isfinite(x) for x in getattr(args, grid)):
            print(f"benchmark_translation.py: error: {flag}: values must be finite, got '{text}'", file=sys.stderr)
            return 2
    interrupt_on_sigterm()
    try:
        seeds = parse_seeds(args.seeds)
        if seeds:
            run_seeds(args, seeds)
        else:
            Benchmark(args).run()
    except BenchmarkError as e:
        print(f"benchmark_translation.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbenchmark_translation.py: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
