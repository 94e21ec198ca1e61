"""Benchmarks and experiment drivers over the hmm_nmt models: the logic behind ``scripts/``.

The scripts in ``scripts/`` are thin command lines over these modules; nothing in ``hmm_nmt`` or
``alignment`` imports this package. The translation benchmark (``scripts/benchmark_translation.py``) is
split into stages, each a module of one idea, over a few shared helpers:

* :mod:`benchmarks.common`: repository paths, :class:`~benchmarks.common.BenchmarkError`, atomic file I/O;
* :mod:`benchmarks.progress`: status lines on stderr, durations and the ETA of a whole benchmark;
* :mod:`benchmarks.fairseq_runner`: running fairseq-train / fairseq-generate in a child process
  (``benchmarks/fairseq_instrumented.py``), forwarding Ctrl-C / SIGTERM, and the registry preflight;
* :mod:`benchmarks.logs`: parsing fairseq's training logs and fairseq-generate's output (1-best, n-best, timer);
* :mod:`benchmarks.scoring`: sacrebleu BLEU / TER / chrF (``-tok none -lc``);
* :mod:`benchmarks.slots`: the benchmark's model slots and their per-slot overrides;
* :mod:`benchmarks.training`: the training stage (command line, progress bar, resumption, its summary);
* :mod:`benchmarks.checkpoints`: checkpoint selection and parameter averaging;
* :mod:`benchmarks.tuning`: lenpen / EOS-penalty choice on dev by re-ranking n-best lists
  (``scripts/tune_lenpen.py``);
* :mod:`benchmarks.decoding`: the decoding and scoring stage of the test set;
* :mod:`benchmarks.stopping`: early stopping (fairseq's ``--patience`` rule as a resumable object for in-process
  trainers), why a run stopped, the training clock over resumed runs, time to quality;
* :mod:`benchmarks.report`: results document, markdown tables and plots;
* :mod:`benchmarks.seeds`: parsing ``--seeds`` and the mean / spread over seeds;
* :mod:`benchmarks.translation`: the orchestration of all stages (``Benchmark``) and the per-seed runs.

Other drivers: :mod:`benchmarks.topk` (decode-time ``--lexicon-topk`` and the sweep table:
``scripts/decode_topk.py``, ``scripts/topk_table.py``), :mod:`benchmarks.microbench` (helpers shared by
``scripts/bench_train.py`` and ``scripts/bench_decode.py``), :mod:`benchmarks.lm` (``scripts/bench_lm.py``),
:mod:`benchmarks.tagging` (in-process tagger training, ``scripts/bench_tagging.py``) and
:mod:`benchmarks.align_variants` (``scripts/align_variants.py``).

Imports inside the package go downwards only (no two modules import each other): ``translation`` over the
stages, the stages over ``fairseq_runner`` / ``logs`` / ``scoring`` / ``progress``, and all over ``common``.
"""
