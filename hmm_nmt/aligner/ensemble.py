"""Several checkpoints of one direction as one aligner: their alignment matrices averaged.

Models trained with other seeds (or stopped at other updates) on the same dictionaries make different
errors; the mean of their posteriors p(b_i = j | E, F) (or alignment distributions) is still a distribution
over j for every i and is read off exactly as one model's matrices are. Every member scores every sentence,
so an ensemble of N costs N forward passes; the matrices of one batch are averaged before they are cut
to sentences, so memory does not grow with N.

:class:`AlignerEnsemble` implements the aligner's model protocol (``ALIGNMENT_METHODS``,
``alignment_model_type()``, ``alignment_matrices(...)``, ``max_positions()``), so everything that aligns with
one model (:mod:`hmm_nmt.aligner.matrices`, :mod:`hmm_nmt.aligner.pairs`) takes an ensemble unchanged.
"""
from typing import Sequence

import torch


class AlignerEnsemble(torch.nn.Module):
    """The mean of the alignment matrices of ``models`` (direct-HMM checkpoints of one kind and dictionary)."""

    def __init__(self, models: Sequence[torch.nn.Module]):
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        kinds = {m.alignment_model_type() if hasattr(m, "alignment_model_type") else None for m in models}
        if None in kinds:
            raise ValueError("only transformer_dhmm checkpoints form an alignment ensemble (their matrices are "
                             "distributions; attention weights of different models are not comparable)")
        if len(kinds) > 1:
            raise ValueError(f"the checkpoints mix alignment orders ({', '.join(sorted(kinds))})")
        self.members = torch.nn.ModuleList(models)
        self.ALIGNMENT_METHODS = tuple(m for m in models[0].ALIGNMENT_METHODS
                                       if all(m in x.ALIGNMENT_METHODS for x in models))

    def alignment_model_type(self) -> str:
        return self.members[0].alignment_model_type()

    def max_positions(self):
        """The positions every member allows: the smallest of each side."""
        sides = [m.max_positions() for m in self.members]
        return tuple(min(s[k] for s in sides) for k in range(len(sides[0])))

    @torch.no_grad()
    def alignment_matrices(self, src_tokens, src_lengths, prev_output_tokens, target=None,
                           methods=("alignment",), transition=False):
        """The members' :meth:`alignment_matrices`, averaged method by method (each member on its own device,
        the mean on the first member's)."""
        total = None
        for m in self.members:
            dev = next(m.parameters()).device
            out = m.alignment_matrices(src_tokens.to(dev), src_lengths.to(dev), prev_output_tokens.to(dev),
                                       None if target is None else target.to(dev), methods=methods,
                                       transition=transition)
            if total is None:
                total = {k: v.float() for k, v in out.items()}
            else:
                for k, v in out.items():
                    total[k] += v.float().to(total[k].device)
        return {k: v / len(self.members) for k, v in total.items()}
