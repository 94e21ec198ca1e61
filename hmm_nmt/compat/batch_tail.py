"""Evaluation iterators keep their last batch (fairseq 0.12 drops it: facebookresearch/fairseq#5036).

``fairseq.data.data_utils.batch_by_size`` drops the last batch whenever its size is not a multiple of
``--required-batch-size-multiple`` (default 8). Batches are cut from the length-sorted order, so
``fairseq-generate`` silently skips up to 7 of the *longest* sentences of a test set whose size is not a
multiple of 8 (the 447 Hansards test pairs came out as 440 translations, with no warning), and validation
loses them too. The patch keeps that tail for every iterator except the training one, which still drops
it as fairseq does, so training runs (and every figure measured with them) see exactly the batches they
saw before. A test set's tail is a batch of fewer than 8 sentences, a size fairseq always allowed.
"""
import contextlib
import contextvars
import functools

import numpy as np

from hmm_nmt.compat._once import install_once

_training = contextvars.ContextVar("hmm_nmt_training_batches", default=False)


@contextlib.contextmanager
def training_batches():
    """Inside it, ``batch_by_size`` behaves as fairseq's (the training iterator's batches)."""
    token = _training.set(True)
    try:
        yield
    finally:
        _training.reset(token)


def keep_tail(batch_by_size):
    """Wrap fairseq's ``batch_by_size``: the indices it dropped come back as one last batch."""

    @functools.wraps(batch_by_size)
    def wrapper(indices, *args, **kwargs):
        if _training.get():
            return batch_by_size(indices, *args, **kwargs)
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = batch_by_size(indices, *args, **kwargs)
        kept = sum(len(b) for b in batches)
        if kept < len(indices):  # batches are consecutive slices of ``indices``: the dropped one is the end
            batches = list(batches) + [indices[kept:]]
        return batches

    wrapper.__hmm_nmt_keep_tail__ = True
    return wrapper


@install_once
def install():
    try:
        from fairseq import trainer
        from fairseq.data import data_utils
    except ImportError:
        return False
    if not getattr(data_utils.batch_by_size, "__hmm_nmt_keep_tail__", False):
        data_utils.batch_by_size = keep_tail(data_utils.batch_by_size)
    get_train_iterator = trainer.Trainer.get_train_iterator
    if not getattr(get_train_iterator, "__hmm_nmt_keep_tail__", False):
        @functools.wraps(get_train_iterator)
        def patched(self, *args, **kwargs):
            with training_batches():
                return get_train_iterator(self, *args, **kwargs)

        patched.__hmm_nmt_keep_tail__ = True
        trainer.Trainer.get_train_iterator = patched
    return True
