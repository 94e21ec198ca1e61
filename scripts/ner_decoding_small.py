#!/usr/bin/env python3
"""The small CoNLL-2003 measurement of docs/tagging.md: bilstm_tagger (embed 50, hidden 50) on the first 2,000
training sentences, 2 epochs, Adam lr 0.01, batch 32, seed 1, trained in IOB2 and in BIOES; dev (eng.testa)
entity F1 in IOB1 (seqeval strict), accuracy and invalid sequences under argmax and viterbi decoding of the
same model.

    OMP_NUM_THREADS=1 python scripts/ner_decoding_small.py
"""
import os
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from fairseq import tasks  # noqa: E402

import benchmarks.tagging as bt  # noqa: E402

DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "conll2003")


def main():
    torch.set_num_threads(1)
    for scheme in ("iob2", "bioes"):
        args = bt.make_args("bilstm_tagger", tempfile.gettempdir(), [
            "--train-file", os.path.join(DATA, "eng.train.gz"), "--valid-file", os.path.join(DATA, "eng.testa.gz"),
            "--tag-column", "3", "--data-tag-scheme", "iob1", "--tag-scheme", scheme,
            "--train-subset-sentences", "2000", "--embed-dim", "50", "--hidden-size", "50"])
        task = tasks.setup_task(args)
        task.load_dataset("train")
        task.load_dataset("valid")
        trained = {}
        evaluate_full = bt.evaluate_full

        def capture(model, task, *a, **k):
            trained["model"] = model
            return evaluate_full(model, task, *a, **k)

        bt.evaluate_full = capture
        try:
            bt.train_and_evaluate(args, seed=1, epochs=2, lr=0.01, batch_size=32, task=task)
        finally:
            bt.evaluate_full = evaluate_full
        for dec in ("argmax", "viterbi"):
            r = evaluate_full(trained["model"], task, decoding=dec)
            print(f"train scheme {scheme}: {dec}: dev entity F1 (iob1, seqeval strict) {r['chunk_f1']:.2f}, "
                  f"accuracy {r['accuracy']:.2f}, invalid sequences as decoded ({scheme}) {r['invalid']} of "
                  f"{len(task.dataset('valid'))}", flush=True)


if __name__ == "__main__":
    main()
