"""``--arch vlhmm_tagger``: the VL-HMM tagger of Chiu & Rush (Sec. 5.2) for the ``sequence_tagging`` task.

Every state emits the word (blocked by the Brown partition, with state dropout, exactly as ``hmm_lm``) and the
tag, independently: p(w, y, z) = prod_t p(w_t | z_t) p(y_t | z_t) p(z_t | z_{t-1}) (Eq. 11). The tag emission
is unconstrained, log p(y | z) = log_softmax_y(E_y f_phi(E_emit)_z^T), sharing the state features of the word
emission. Training (criterion ``vlhmm_tagging``) maximises the exact joint log p(w, y) by the blocked forward
with the tag scores added to the emissions. Prediction (the paper's two-step approximation): the state
posteriors p(z_t | w) by forward-backward without tags, then p(y_t | w) = sum_z p(y_t | z) p(z_t | w); the
model's output is that (B, T, n_tags) log-distribution, the task's contract.

Options: those of ``hmm_lm`` (``--brown-clusters`` over the tagging task's word dictionary, ``--num-states`` or
``--states-per-cluster``, ``--state-dropout``, ``--hmm-embed-dim``); neural parameterization only.
"""
import torch
import torch.nn as nn
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture

from hmm_nmt.hmm.vlhmm import VLHMM
from hmm_nmt.models.hmm_lm import HMMLanguageModel, base_hmm_lm, build_constraints


@register_model("vlhmm_tagger")
class VLHMMTagger(BaseFairseqModel):
    def __init__(self, args, hmm, num_tags, padding_idx):
        super().__init__()
        self.args = args
        self.hmm = hmm
        self.tag_embed = nn.Parameter(torch.randn(num_tags, args.hmm_embed_dim) * args.hmm_embed_dim ** -0.5)
        self.padding_idx = padding_idx

    @staticmethod
    def add_args(parser):
        HMMLanguageModel.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        base_vlhmm_tagger(args)
        if args.parameterization != "neural":
            raise ValueError("vlhmm_tagger: only --parameterization neural")
        words = task.source_dictionary
        hmm = VLHMM(build_constraints(args, words), len(words), dim=args.hmm_embed_dim, parameterization="neural",
                    chunk=args.transition_chunk)
        return cls(args, hmm, len(task.target_dictionary), words.pad())

    def _tag_scores(self, bp, r, tokens, mask):
        """log p(y | C_t[j]) for every tag: (B, T, n, n_tags)."""
        log_tag = torch.log_softmax(bp.emit_features @ self.tag_embed.t(), dim=-1)  # (N, n_tags)
        g = self.hmm._groups(tokens, mask)
        return log_tag[r.local[g]]

    def joint_log_likelihood(self, src_tokens, tags, mask):
        """log p(w, y) (B,), a state-dropout sample per batch in training."""
        r = self.hmm.restrict(self.args.state_dropout if self.training else 0.0)
        bp = self.hmm.params(r)
        extra = self._tag_scores(bp, r, src_tokens, mask).gather(
            -1, tags.masked_fill(~mask, 0)[:, :, None, None].expand(-1, -1, r.local.size(1), 1)).squeeze(-1)
        return self.hmm.log_likelihood(src_tokens, mask, r, bp, extra)

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        mask = src_tokens.ne(self.padding_idx)
        r = self.hmm.restrict(0.0)
        bp = self.hmm.params(r)
        log_post, _ = self.hmm.posteriors(src_tokens, mask, r, bp)  # p(z_t | w), tags ignored
        return torch.logsumexp(log_post[..., None] + self._tag_scores(bp, r, src_tokens, mask), dim=2)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return net_output if log_probs else net_output.exp()

    def max_positions(self):
        return None


@register_model_architecture("vlhmm_tagger", "vlhmm_tagger")
def base_vlhmm_tagger(args):
    base_hmm_lm(args)
