"""``--task language_modeling_context --block-context C``: fairseq's ``language_modeling`` in stream mode
(``--sample-break-mode none --tokens-per-sample L``) where every block comes with the C stream tokens before
it as context, in training and validation alike.

Why: in stream mode fairseq shuffles the L-token blocks, so a model cannot carry its state from one batch
to the next (row b of a batch is not the continuation of row b of the previous batch). Each block therefore
brings its own context: the item holds the C tokens before the block (fewer at the start of the split)
followed by the block, and the context positions get padding targets, so they are read, not scored. That
is what stock ``fairseq-eval-lm --context-window C`` does at evaluation (its ``LMContextWindowDataset``),
so the training run's validation loss is the eval-lm number with the same C (tested for ``hmm_lm``). Any
language model can use it. For ``hmm_lm`` the forward over the context carries the filtered state into the
block, and training maximises log p(block | its C previous tokens), under the batch's state dropout.
The cost of a step grows by (L + C) / L.
"""
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, FairseqDataset
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask


class BlockContextDataset(BaseWrapperDataset):
    """The blocks of a ``--sample-break-mode none`` :class:`~fairseq.data.MonolingualDataset`, each preceded
    by the (at most) ``context`` stream tokens before it: source = the stream shifted by one as fairseq
    makes it (``</s>`` before the first token of the split), target = padding on the context, then the
    block. Items stay independent of each other, so shuffling and batching are fairseq's own."""

    def __init__(self, dataset, context: int, pad: int, eos: int):
        super().__init__(dataset)
        self.blocks = dataset.dataset  # TokenBlockDataset(include_targets=True): (source, block, past)
        self.context, self.pad, self.eos = context, pad, eos
        starts = np.asarray(self.blocks.slice_indices)[:, 0].astype(np.int64)
        self.context_sizes = np.minimum(starts, context)
        self._sizes = np.asarray(dataset.sizes) + self.context_sizes

    def _stream_before(self, index, n):
        """The last n stream tokens before block ``index`` (all of them if fewer)."""
        parts, have, j = [], 0, index - 1
        while have < n and j >= 0:
            parts.append(self.blocks[j][1])
            have += len(parts[-1])
            j -= 1
        return torch.cat(parts[::-1])[-n:] if parts else torch.zeros(0, dtype=torch.long)

    def __getitem__(self, index):
        item = self.dataset[index]
        c = int(self.context_sizes[index])
        if c == 0:
            return item
        prev = self._stream_before(index, c + 1)  # one more: the source is the stream shifted by one
        if len(prev) == c:  # the context reaches the start of the split
            prev = torch.cat([prev.new([self.eos]), prev])
        source = torch.cat([prev, item["source"][1:]])
        target = torch.cat([item["target"].new_full((c,), self.pad), item["target"]])
        return {"id": item["id"], "source": source, "target": target}

    @property
    def sizes(self):
        return self._sizes

    def num_tokens(self, index):
        return int(self._sizes[index])

    def size(self, index):
        return int(self._sizes[index])

    def ordered_indices(self):
        return np.lexsort([np.random.permutation(len(self)), self._sizes])

    def num_tokens_vec(self, indices):
        return self._sizes[indices]

    # BaseWrapperDataset hands these to the wrapped dataset, which does not count the context
    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        return FairseqDataset.batch_by_size(self, indices, max_tokens, max_sentences, required_batch_size_multiple)

    def filter_indices_by_size(self, indices, max_sizes):
        return FairseqDataset.filter_indices_by_size(self, indices, max_sizes)

    @property
    def supports_prefetch(self):
        return False


@dataclass
class LanguageModelingContextConfig(LanguageModelingConfig):
    block_context: int = field(default=0, metadata={
        "help": "stream tokens before every block read as context, not scored (needs --sample-break-mode none)"})


@register_task("language_modeling_context", dataclass=LanguageModelingContextConfig)
class LanguageModelingContextTask(LanguageModelingTask):
    """``language_modeling`` with ``--block-context C`` (see the module docstring)."""

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        if self.args.block_context < 0:
            raise ValueError(f"--block-context must be >= 0, got {self.args.block_context}")
        if self.args.block_context:
            if self.args.sample_break_mode != "none":
                raise ValueError("--block-context needs --sample-break-mode none (a stream cut into blocks), "
                                 f"got --sample-break-mode {self.args.sample_break_mode}")
            self.datasets[split] = BlockContextDataset(self.datasets[split], self.args.block_context,
                                                       self.dictionary.pad(), self.dictionary.eos())
        return self.datasets[split]

    def max_positions(self):
        return self.args.tokens_per_sample + max(0, self.args.block_context)

