"""``--arch hmm_lm``: the very large neural HMM (Chiu & Rush) as a fairseq language model.

Train with ``--task language_modeling --criterion hmm_lm`` (exact -log p(x) by the blocked forward, state
dropout in training); score with stock ``fairseq-eval-lm``: the decoder returns the whole next-token
distribution log p(x_t = v | x_<t) (B, T, V), computed from the filtered state (see
:meth:`hmm_nmt.hmm.vlhmm.VLHMM.predictive`), so eval-lm's gather of the gold is the exact HMM
perplexity. The first input token of a row (fairseq's shift: EOS, or the previous block's last token)
only marks the start: the forward runs from the start distribution over the rest of the row.

* Sentence mode (``--sample-break-mode eos``): every sentence from the start distribution.
* Stream mode (``--sample-break-mode none --tokens-per-sample L``): training scores every L-token block of
  the stream from the start distribution (fairseq shuffles the blocks, so nothing can be carried between
  batches). ``fairseq-eval-lm --context-window C`` prepends the C previous stream tokens to every block and
  ignores their scores: the forward over the context carries the filtered state to the block start, so each
  block is scored by log p(block | its C previous tokens) (exactly the one long forward over the whole
  stream when C covers it; tested). Without ``--context-window`` eval-lm scores like training's validation.
  ``--task language_modeling_context --block-context C`` gives every training (and validation) block its
  C previous stream tokens as unscored context instead, the same quantity as eval-lm's window.
  Details: docs/language-models.md, "Stream mode and context".

Options: ``--num-states`` |Z| or ``--states-per-cluster`` k (|Z| = m k, m = clusters of the word
partition), ``--brown-clusters FILE`` (lines ``word cluster``, e.g. from ``examples/wsj_lm``),
``--constraint {brown,uniform}`` (uniform: random support sets of size k, the paper's ablation; m then
comes from the file or ``--num-clusters``), ``--state-dropout p``, ``--hmm-embed-dim h``,
``--parameterization {neural,scalar}``.
"""
import logging
import os

import torch
import torch.nn.functional as F
from fairseq.models import FairseqDecoder, FairseqLanguageModel, register_model, register_model_architecture

from hmm_nmt.hmm.vlhmm import VLHMM, Constraints, read_word_clusters
from hmm_nmt.options import positive_int, set_default

logger = logging.getLogger(__name__)


def never_emitted(dictionary):
    """Symbols a language model never has to emit: padding, BOS and fairseq's padding-to-8 fillers."""
    return [dictionary.pad(), dictionary.bos()] + [
        i for i, s in enumerate(dictionary.symbols) if s.startswith("madeupword")]


def build_constraints(args, dictionary):
    never = never_emitted(dictionary)
    if args.brown_clusters:
        if not os.path.isfile(args.brown_clusters):
            raise FileNotFoundError(f"--brown-clusters {args.brown_clusters}: no such file")
        word_cluster, m = read_word_clusters(args.brown_clusters, dictionary.symbols, never)
        if args.num_clusters and args.num_clusters != m:
            raise ValueError(f"--num-clusters {args.num_clusters} but {args.brown_clusters} has {m} clusters")
    elif args.constraint == "brown":
        raise ValueError("--constraint brown needs --brown-clusters FILE (lines 'word cluster')")
    else:
        m = args.num_clusters
        if not m:
            raise ValueError("--constraint uniform needs --num-clusters or --brown-clusters to size the support")
        word_cluster = None
    if args.states_per_cluster:
        k = args.states_per_cluster
        if args.num_states and args.num_states != m * k:
            raise ValueError(f"--num-states {args.num_states} != {m} clusters x --states-per-cluster {k}")
    else:
        if not args.num_states or args.num_states % m:
            raise ValueError(f"--num-states {args.num_states} must be a positive multiple of the {m} clusters")
        k = args.num_states // m
    if args.constraint == "brown":
        return Constraints.brown(word_cluster, m, k)
    emittable = torch.ones(len(dictionary), dtype=torch.bool)
    emittable[never] = False
    return Constraints.uniform(emittable, m * k, k, seed=args.partition_seed)


class HMMDecoder(FairseqDecoder):
    def __init__(self, args, dictionary, hmm):
        super().__init__(dictionary)
        self.args = args
        self.hmm = hmm

    def forward(self, prev_output_tokens, src_lengths=None, **kwargs):
        # position t predicts target t = input t + 1 from inputs 1..t; input 0 is the start marker
        pad = self.dictionary.pad()
        hist = F.pad(prev_output_tokens[:, 1:], (0, 1), value=pad)
        return self.hmm.predictive(hist, hist.ne(pad)), {"attn": None}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        lp = net_output[0]
        return lp if log_probs else lp.exp()

    def max_positions(self):
        # no positional limit: a smaller value would make eval-lm silently drop longer blocks
        # (it filters with ignore_invalid_inputs); training is bounded by the task's --tokens-per-sample
        return int(1e6)


@register_model("hmm_lm")
class HMMLanguageModel(FairseqLanguageModel):
    """VL-HMM language model; see the module docstring."""

    @staticmethod
    def add_args(parser):
        parser.add_argument("--num-states", type=positive_int, help="|Z|, total number of HMM states")
        parser.add_argument("--states-per-cluster", type=positive_int, help="k, states per word cluster (|Z| = m k)")
        parser.add_argument("--num-clusters", type=positive_int, help="m (checked against --brown-clusters; sizes uniform)")
        parser.add_argument("--brown-clusters", type=str, help="word partition: file of 'word cluster' lines")
        parser.add_argument("--constraint", choices=["brown", "uniform"],
                            help="emission support: Brown partition blocks, or uniform random sets (ablation)")
        parser.add_argument("--partition-seed", type=int, help="seed of the uniform support sets")
        parser.add_argument("--state-dropout", type=float, help="fraction of the states of each cluster dropped "
                                                                "per batch in training (Algorithm 1)")
        parser.add_argument("--hmm-embed-dim", type=positive_int, help="h, size of the state/word embeddings and MLPs")
        parser.add_argument("--parameterization", choices=["neural", "scalar"], help="factored neural or scalar")
        parser.add_argument("--transition-chunk", type=positive_int, help="rows per chunk of the transition normaliser")

    @classmethod
    def build_model(cls, args, task):
        base_hmm_lm(args)
        dictionary = task.target_dictionary
        constraints = build_constraints(args, dictionary)
        hmm = VLHMM(constraints, len(dictionary), dim=args.hmm_embed_dim, parameterization=args.parameterization,
                    chunk=args.transition_chunk)
        logger.info(f"hmm_lm: |Z| = {constraints.num_states} states, {constraints.support.size(0)} support groups "
                    f"of k = {constraints.k}, constraint {args.constraint}, state dropout {args.state_dropout}, "
                    f"{args.parameterization} parameterization, h = {args.hmm_embed_dim}")
        return cls(HMMDecoder(args, dictionary, hmm))

    def log_likelihood(self, tokens, mask):
        """log p(x) (B,) of right-padded targets; a state-dropout sample per batch in training."""
        hmm = self.decoder.hmm
        r = hmm.restrict(self.decoder.args.state_dropout if self.training else 0.0)
        return hmm.log_likelihood(tokens, mask, r)

    def conditionals(self, tokens, mask):
        """log p(x_t | x_<t) (B, T) of right-padded rows (0 at padding); state dropout as above."""
        hmm = self.decoder.hmm
        r = hmm.restrict(self.decoder.args.state_dropout if self.training else 0.0)
        return hmm.conditionals(tokens, mask, r)


@register_model_architecture("hmm_lm", "hmm_lm")
def base_hmm_lm(args):
    args.num_states = getattr(args, "num_states", None)
    args.states_per_cluster = getattr(args, "states_per_cluster", None)
    if not args.num_states and not args.states_per_cluster:
        args.num_states = 4096
    args.num_clusters = getattr(args, "num_clusters", None)
    args.brown_clusters = getattr(args, "brown_clusters", None)
    args.constraint = getattr(args, "constraint", None) or "brown"
    set_default(args, "partition_seed", 0)
    sd = getattr(args, "state_dropout", None)
    args.state_dropout = 0.5 if sd is None else sd
    set_default(args, "hmm_embed_dim", 256)
    args.parameterization = getattr(args, "parameterization", None) or "neural"
    set_default(args, "transition_chunk", 512)
