"""The defaults of ``hmm-nmt-align-corpus`` that follow the corpus: the training length, and the vocabulary.

A fixed number of updates is two passes over the Hansards and fifteen over a corpus of 24k pairs. The default
is instead a number of passes over the corpus's words (``EPOCHS``), counted as fairseq counts a batch's tokens
(the longer side of each pair, with its end of sentence; a word counts once however many subwords it takes, so
the budget does not depend on the script or the vocabulary), bounded below (a small corpus still needs the
updates to learn its alignment model) and above (on a large corpus the alignment stops improving long before
an epoch ends on 2 cores). The warm-up is at most a tenth of the updates and the second pass a quarter of them.
``--max-update``, ``--warmup-updates`` and ``--guide-updates`` override each rule.

The joint BPE vocabulary is a number of symbols, the characters included (``--vocab-size``, subword-nmt's
``--total-symbols``): a fixed number of merges gives about 4,000 types on Latin text and 10,000 on Japanese,
where the characters alone are thousands; a script with more characters than the size gets no merge.
"""
from typing import Optional, Sequence

# chosen on the time-to-quality curves of the alignment benchmark's dev parts (docs/alignment.md)
EPOCHS = 11
MIN_UPDATES = 1200
MAX_UPDATES = 3000
WARMUP = 200  # the most warm-up updates
WARMUP_SHARE = 10  # ... and at most 1 / WARMUP_SHARE of the updates
GUIDE_SHARE = 4  # the second pass: 1 / GUIDE_SHARE of the first pass's updates
VOCAB_SIZE = 4000  # joint BPE symbols, the characters included (--vocab-size)


def batch_tokens(src_len: Sequence[int], tgt_len: Sequence[int]) -> int:
    """The tokens one pass over the training pairs puts in fairseq's batches (pairs with words on both sides;
    the longer side and its end of sentence), in words; ``src_len``, ``tgt_len``: each line's words."""
    return sum(max(s, t) + 1 for s, t in zip(src_len, tgt_len) if s and t)


def default_updates(tokens: int, max_tokens: int) -> int:
    """``EPOCHS`` passes over ``tokens`` in batches of ``max_tokens``, within [MIN_UPDATES, MAX_UPDATES]."""
    return int(min(MAX_UPDATES, max(MIN_UPDATES, round(EPOCHS * tokens / max_tokens))))


BUDGET_KEYS = ("merges", "vocab_size", "max_update", "warmup_updates", "guide_updates")


def resolve(opts, src_len: Sequence[int], tgt_len: Sequence[int], saved: Optional[dict] = None) -> str:
    """Fill in the options of BUDGET_KEYS left at their default (None), in place; returns a line that says what
    was chosen and why (empty when nothing was). ``saved``: the settings of a model directory that has started
    training, whose own values hold where the command line is silent (a rerun continues that model, whatever
    the defaults of this version). ``src_len``, ``tgt_len``: each line's words."""
    if saved is not None:
        if opts.merges is None and opts.vocab_size is None:
            opts.merges, opts.vocab_size = saved.get("merges"), saved.get("vocab_size")
        for k in ("max_update", "warmup_updates", "guide_updates"):
            if getattr(opts, k) is None and saved.get(k) is not None:
                setattr(opts, k, saved[k])
    told = []
    if opts.merges is None and opts.vocab_size is None:
        opts.vocab_size = VOCAB_SIZE
    if opts.max_update is None:
        tokens = batch_tokens(src_len, tgt_len)
        opts.max_update = default_updates(tokens, opts.max_tokens)
        told.append(f"{opts.max_update} updates per direction ({EPOCHS} passes over {tokens} tokens in batches "
                    f"of {opts.max_tokens}, within {MIN_UPDATES}-{MAX_UPDATES})")
    if opts.warmup_updates is None:
        opts.warmup_updates = max(1, min(WARMUP, opts.max_update // WARMUP_SHARE))
        told.append(f"warm-up {opts.warmup_updates}")
    if opts.guide_updates is None:
        opts.guide_updates = max(1, opts.max_update // GUIDE_SHARE)
        told.append(f"second pass {opts.guide_updates} updates")
    return "; ".join(told)
