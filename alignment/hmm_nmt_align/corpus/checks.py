"""What ``hmm-nmt-align-corpus`` refuses before its first stage: options out of range, and
settings fairseq would reject an hour later (heads not dividing the width, a batch smaller than a line). Each
refusal is one line naming the flag, and exit 2; nothing is made. (The manifest's schema: :mod:`.model_dir`.)
"""
import math

from .model_dir import MAX_SEED, CorpusError

MAX_POSITIONS = 1024  # the models' positions (pieces with EOS): a longer line is left out of training, not aligned


def _in(value, low, high=math.inf, low_open=False, high_open=False) -> bool:
    return math.isfinite(value) and (value > low if low_open else value >= low) and \
        (value < high if high_open else value <= high)


def check_options(opts) -> None:
    """The ranges of the real-valued options, and the options that must agree with each other (argparse's
    types check the counts)."""
    if not _in(opts.lr, 0, low_open=True):
        raise CorpusError(f"--lr must be a number > 0, got {opts.lr}")
    if not _in(opts.dropout, 0, 1, high_open=True):
        raise CorpusError(f"--dropout must be in [0, 1), got {opts.dropout}")
    if not _in(opts.label_smoothing, 0, 1, high_open=True):
        raise CorpusError(f"--label-smoothing must be in [0, 1), got {opts.label_smoothing}")
    if not _in(opts.guide_weight, 0):
        raise CorpusError(f"--guide-weight must be a number >= 0, got {opts.guide_weight}")
    if opts.embed_dim % opts.heads:
        raise CorpusError(f"--heads {opts.heads} must divide --embed-dim {opts.embed_dim} (each head gets "
                          f"{opts.embed_dim}/{opts.heads} dimensions)")
    if opts.seed + opts.seeds - 1 > MAX_SEED:
        raise CorpusError(f"--seed {opts.seed} with --seeds {opts.seeds}: the seeds must stay <= {MAX_SEED}")


def longest_kept(lengths, limit: int = MAX_POSITIONS - 1):
    """``(line index, length)`` of the longest pair among those a model takes (``limit`` pieces or words a side,
    EOS excluded), or None."""
    best = None
    for k, n in lengths:
        if n <= limit and (best is None or n > best[1]):
            best = (k, n)
    return best


def check_batch_fits(lengths, max_tokens: int, unit: str) -> None:
    """fairseq batches by max(source, target) tokens with EOS: a kept pair above ``--max-tokens`` fits no batch
    (fairseq-train fails on it mid-training). ``lengths``: (line index, max of its sides) pairs."""
    best = longest_kept(lengths)
    if best is not None and best[1] + 1 > max_tokens:
        raise CorpusError(f"--max-tokens {max_tokens} is smaller than line {best[0] + 1} ({best[1]} {unit} with EOS "
                          f"on its longer side): give --max-tokens {best[1] + 1} or more")
