"""Criterion ``hmm_lm``: exact negative log-likelihood of the VL-HMM language model (``--arch hmm_lm``).

The loss is -log p(x) of every target block by the blocked forward (never the B x T x V next-token
logits), summed over tokens. Each block starts from the start distribution: a sentence in sentence mode, an
L-token piece of the stream with ``--sample-break-mode none`` (fairseq shuffles those, so no state is carried
between batches; ``fairseq-eval-lm --context-window`` carries it at evaluation, see ``hmm_nmt.models.hmm_lm``).
With ``--task language_modeling_context --block-context C`` every block comes with its C previous stream
tokens (padding targets): the loss is then -log p(block | context), from the forward over context + block.
Fairseq logs it in bits per token and the perplexity, like ``cross_entropy``,
so training, validation and ``fairseq-eval-lm`` report the same quantity.
"""
import torch
import torch.nn.functional as F
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig


@register_criterion("hmm_lm", dataclass=CrossEntropyCriterionConfig)
class HMMLanguageModelCriterion(CrossEntropyCriterion):
    def forward(self, model, sample, reduce=True):
        if not hasattr(model, "log_likelihood"):
            raise ValueError("--criterion hmm_lm needs an HMM language model (--arch hmm_lm)")
        target = sample["target"]
        pad = self.padding_idx
        mask = target.ne(pad)
        # context positions (--task language_modeling_context): padding targets over real input tokens.
        # The row's tokens are the input shifted by one, with the targets where they are scored.
        src = sample["net_input"]["src_tokens"]
        tokens = torch.where(mask, target, F.pad(src[:, 1:], (0, 1), value=pad)) if src.shape == target.shape \
            else target
        if bool((tokens.ne(pad) & ~mask).any()):
            ll = (model.conditionals(tokens, tokens.ne(pad)) * mask).sum(1)  # log p(scored | context)
        else:
            ll = model.log_likelihood(target, mask)
        loss = -ll.sum() if reduce else -ll
        ntokens = int(mask.sum())
        sample_size = target.size(0) if self.sentence_avg else ntokens
        logging_output = {
            "loss": loss.data,
            "ntokens": ntokens,
            "nsentences": target.size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output
