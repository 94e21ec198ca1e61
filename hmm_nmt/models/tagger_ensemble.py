"""An ensemble of taggers trained on the same data, used like one tagger by ``hmm-nmt-tag``.

* Per-token scores (``forward``, argmax decoding, and the Viterbi of taggers without a CRF): the log of
  the members' mean probabilities p(y_t | x), as fairseq averages an ensemble's output distributions.
* Taggers that all have a CRF (``bilstm_crf_tagger``): the Viterbi path under the mean of their CRF
  potentials (transitions, start/end and emission scores). Each member's path score is
  log p_m(y | x) + log Z_m(x), so this path maximises the product of the members' sequence probabilities
  (their log-linear pool), the sequence-level analogue of averaging, and it always obeys the tag scheme.

Members must share the word and tag dictionaries (the same training file): the scores are averaged index by
index.
"""
import math

import torch
import torch.nn as nn

from hmm_nmt.hmm import chain
from hmm_nmt.hmm.crf import add_constraints

__all__ = ["TaggerEnsemble", "check_same_dictionaries"]


def check_same_dictionaries(tasks, paths):
    """Raise ValueError naming the first checkpoint whose word or tag dictionary differs from the first's."""
    first = tasks[0]
    for task, path in zip(tasks[1:], paths[1:]):
        for what, a, b in (("word", first.source_dictionary, task.source_dictionary),
                           ("tag", first.target_dictionary, task.target_dictionary)):
            if a.symbols != b.symbols:
                raise ValueError(f"{path}: its {what} dictionary differs from {paths[0]}'s "
                                 f"({len(b)} against {len(a)} entries); ensemble only taggers trained on the same data")


class TaggerEnsemble(nn.Module):
    def __init__(self, models):
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        self.models = nn.ModuleList(models)
        # the character features of the batch are built once, if any member reads them
        self.chars = next((m.chars for m in models if getattr(m, "chars", None) is not None), None)

    @property
    def all_crf(self):
        return all(getattr(m, "crf", None) is not None for m in self.models)

    def forward(self, src_tokens, src_lengths=None, src_chars=None, **kwargs):
        """log of the mean of the members' p(y_t | x): (B, T, K)."""
        lp = [m.get_normalized_probs(m(src_tokens, src_lengths, src_chars=src_chars), log_probs=True).float()
              for m in self.models]
        return torch.logsumexp(torch.stack(lp), dim=0) - math.log(len(lp))

    def get_normalized_probs(self, net_output, log_probs=True):
        return net_output if log_probs else net_output.exp()

    def constrained_viterbi(self, src_tokens, src_lengths=None, constraints=None, src_chars=None):
        """Best tag path (B, T) (-1 on padding) under the mean CRF potentials plus the scheme's ``constraints``;
        None unless every member has a CRF (the caller then decodes :meth:`forward`'s scores)."""
        if not self.all_crf:
            return None
        trans, start, emit = self.mean_crf_potentials(src_tokens, src_lengths, src_chars)
        mask = src_tokens.ne(self.models[0].padding_idx)
        if constraints is not None:
            trans, start, emit = add_constraints(trans, start, emit, constraints, mask)
        return chain.viterbi(trans, None, mask, log_emit=emit, log_start=start)[1]

    def mean_crf_potentials(self, src_tokens, src_lengths=None, src_chars=None):
        """``(trans (K, K), start (B, K), emit (B, T, K))`` averaged over the members' ``crf_potentials`` (each
        with its scheme constraints and end scores)."""
        parts = [m.crf_potentials(src_tokens, src_lengths, src_chars) for m in self.models]
        return tuple(torch.stack(p).mean(0) for p in zip(*parts))
