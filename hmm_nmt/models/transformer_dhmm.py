"""Transformer-based direct HMM (Wang, Yang, Gao, Ney, ACL-SRW 2021) as a fairseq model.

Notation: source states h_j (encoder output, encoder unchanged), target states s_i^(l) (decoder layer l),
vocabulary V, L decoder layers.

* The cross-attention sub-layer of the last decoder layer (``--dhmm-layers last``, the default) or of every
  decoder layer (``--dhmm-layers all``, the paper's form; docs/translation.md compares them) becomes (Eq. 6)

      c_i^(l+1) = sum_j alpha^(l+1)(j|i) W1 ReLU(W2 h_j + W3 s_i^(l)),   alpha = softmax_j(A[s_i, h_j]):

  the weighted sum moves outside the ReLU, and the projected target state W3 s_i inside it replaces the
  residual connection of that sub-layer. With H heads, alpha is computed per head (scaled dot product) and
  head h weights its slice of ReLU(...) before W1 (= the output projection) mixes the heads.
* Lexicon (Eq. 7): p(e | j, e_<i, f) = softmax(W4 ReLU(W5 h_j + W6 s_i^(L))), W4 the output projection
  (shared with the embeddings under ``--share-decoder-input-output-embed`` / ``--share-all-embeddings``).
* Alignment, zero order (Eq. 8): p(j | e_<i, f) = alpha^(L)(j|i) averaged over the H heads of the last
  layer: a mixture of distributions, so still one distribution over the non-pad source positions (EOS
  included; it is where words without a source counterpart can align).
* Alignment, first order (Eq. 11-12): see :class:`FirstOrderAlignment`.
* Target context (``--target-context both``, an aligner's option, not in the paper): s_i^(L-1), the input of
  the last layer, becomes the sum of the lower layers' state of e_<i and that of a right-to-left twin of
  those layers over e_>i, and the last layer's self-attention is restricted to its own position, so the
  lexicon p(e_i | j, e_-i, f) and the alignment see every target word but e_i. The DP and the posteriors are
  unchanged; the product over i is then a pseudo-likelihood (each factor conditions on the others), and the
  model aligns given pairs but cannot decode.
* Output (Eq. 9): p(e | e_<i, f) = sum_j p(j | ...) p(e | j, ...). The decoder returns these log-probs as its
  "logits" (log_softmax leaves them unchanged), so beam search, sampling, scoring and ``--print-alignment``
  (argmax of the alignment distribution, returned as ``attn``) go through fairseq unchanged.

Training does not go through the mixture: the criterion ``dhmm_label_smoothed_cross_entropy`` calls the model
with ``features_only=True`` and computes the sentence likelihood by dynamic programming (hmm_nmt.hmm.direct)
from chunked lexicon scores (hmm_nmt.hmm.lexicon) and the alignment distributions returned here.

The model's layers live in :mod:`hmm_nmt.models.dhmm_layers` (Eq. 6), :mod:`hmm_nmt.models.first_order_alignment`
(Eq. 11-12), :mod:`hmm_nmt.models.dhmm_decoder` (encoder, decoder, lexicon, output mixture) and
:mod:`hmm_nmt.models.dhmm_first_order` (the first order's passes along the target); their names are
imported here, where they have always been importable from. This module holds the registered model, its
options, its alignment matrices (:meth:`TransformerDHMMModel.alignment_matrices`) and its architectures.
"""
import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerModel
from fairseq.models.transformer.transformer_legacy import base_architecture, transformer_iwslt_de_en

from hmm_nmt.hmm import direct
from hmm_nmt.hmm.precision import LEXICON_DTYPE_CHOICES
from hmm_nmt.models.dhmm_decoder import TARGET_CONTEXTS, DHMMEncoder, TransformerDHMMDecoder
from hmm_nmt.models.dhmm_layers import DHMMCrossAttention, DHMMDecoderLayer, Linear  # noqa: F401  (re-exported)
from hmm_nmt.models.first_order_alignment import FirstOrderAlignment  # noqa: F401  (re-exported)
from hmm_nmt.models.topk_schedule import parse_topk_schedule
from hmm_nmt.options import nonnegative_int, positive_int, probability, set_default


@register_model("transformer_dhmm")
class TransformerDHMMModel(TransformerModel):
    """Transformer-based direct HMM; ``--alignment-order 0`` (Eq. 5) or ``1`` (Eq. 11)."""

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def from_pretrained(cls, model_name_or_path, checkpoint_file="model.pt", data_name_or_path=".", **kwargs):
        """fairseq's hub interface plus word alignment: ``hub.align(src, tgt)`` and
        ``hub.translate(..., alignment=True)`` (:mod:`hmm_nmt.aligner.hub`, also ``hmm_nmt.aligner.hub``)."""
        from hmm_nmt.aligner.hub import from_pretrained  # lazy: decoding and training do not need the hub

        return from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, archive_map=cls.hub_models(),
                               **kwargs)

    @staticmethod
    def add_args(parser):
        TransformerModel.add_args(parser)
        parser.add_argument("--alignment-order", type=int, choices=[0, 1], metavar="{0,1}",
                            help="0: p(j | e_<i, f) (zero order); 1: p(j | j', e_<i, f) (first order)")
        parser.add_argument("--lexicon-chunk-size", type=positive_int, metavar="N",
                            help="(i, j) rows per lexicon chunk: bounds memory to N x vocabulary logits")
        parser.add_argument("--lexicon-dtype", choices=LEXICON_DTYPE_CHOICES, metavar="{fp32,bf16,auto}",
                            help="precision of the lexicon matmul (accumulation and DP stay fp32); auto: bf16 "
                                 "where the device multiplies bf16 natively (Ampere GPUs, AVX512-BF16/AMX CPUs), "
                                 "else fp32")
        parser.add_argument("--lexicon-topk", type=nonnegative_int, metavar="K",
                            help="score the lexicon only at the K most probable source positions per target "
                                 "position (0: exact). Training: see --lexicon-topk-objective; decoding "
                                 "renormalises the alignment over the K positions")
        # an explicit default, as --dhmm-layers: checkpoints saved before it have None, and keep bound
        parser.add_argument("--lexicon-topk-objective", choices=["bound", "pruned"], default="pruned",
                            help="training criterion with --lexicon-topk: the exact likelihood of the pruned "
                                 "model that decoding uses, the alignment renormalised over the kept positions at "
                                 "every step (pruned, default), or the sum over the kept positions, a lower bound "
                                 "of the exact likelihood that lets the alignment collapse (bound)")
        parser.add_argument("--lexicon-topk-warmup", type=nonnegative_int, metavar="N",
                            help="train the exact likelihood for the first N updates, then with --lexicon-topk "
                                 "(validation and decoding always use K)")
        parser.add_argument("--lexicon-topk-schedule", metavar="K@U,...",
                            help="training K by update: K@U trains with K from update U on (U: a count, or a "
                                 "percentage of --max-update such as 80%%); e.g. 4@0,0@80%% prunes to 4 positions, "
                                 "then trains exactly for the last 20%% of the updates. Validation and decoding use "
                                 "--lexicon-topk (0: exact). With --patience, a validation plateau starts the next step "
                                 "early instead of stopping training")
        parser.add_argument("--target-context", choices=TARGET_CONTEXTS, metavar="{past,both}",
                            help="what the target state s_i of the lexicon and the alignment sees: the words "
                                 "before i (past, default: a translation model), or also the words after i "
                                 "(both: a second, right-to-left stack of the lower decoder layers, summed into "
                                 "the last layer's input; never e_i itself). both is an aligner: it scores given "
                                 "sentence pairs and cannot decode (docs/alignment.md)")
        # an explicit default (fairseq's model options are otherwise left unset): saved args of checkpoints
        # from before this option lack it, and _dhmm_defaults gives those the layout they were trained with
        parser.add_argument("--dhmm-layers", choices=["all", "last"], default=DEFAULT_DHMM_LAYERS,
                            help="decoder layers whose cross-attention is the direct-HMM block of Eq. 6 (the "
                                 "weighted sum outside the ReLU, no residual): only the last one, which gives the "
                                 "alignment, the others keeping fairseq's cross-attention (last, default; "
                                 "docs/translation.md), or every layer as in the paper (all)")
        # an explicit default, as --dhmm-layers: saved args of checkpoints from before this option lack it, and
        # _dhmm_defaults gives those the softmax lexicon they were trained with
        parser.add_argument("--lexicon", choices=LEXICONS, default=DEFAULT_LEXICON, metavar="{softmax,class,separable}",
                            help="lexicon p(e | j): a softmax over the vocabulary (softmax); class-"
                                 "factored, p(c(e) | j) p(e | c(e), j) over --lexicon-classes frequency classes "
                                 "(class: exact and normalised, about d x (C + |c(e)|) per row instead of d x V "
                                 "in training; label smoothing at the class level and within the gold class); or "
                                 "the softmax without its ReLU, p(e | j) proportional to exp(a_je + b_ie) "
                                 "(separable, default: exact, the I x J normalisers one matmul over V, no d x V "
                                 "per row; docs/translation.md). --lexicon-dtype applies to softmax only")
        parser.add_argument("--lexicon-classes", type=positive_int, metavar="C",
                            help="--lexicon class: number of frequency classes (default round(sqrt(V))); fixed "
                                 "when the model is built and saved with it")
        parser.add_argument("--lexicon-dropout", type=probability, metavar="P",
                            help="dropout on the lexicon's inputs W5 h_j and W6 s_i in training (default 0)")
        parser.add_argument("--max-jump", type=positive_int, metavar="M",
                            help="first order: jump widths |j - j'| are clipped at M for the jump bias")

    @classmethod
    def build_model(cls, args, task):
        dhmm_base_architecture(args)
        if args.alignment_order not in (0, 1):
            raise ValueError(f"--alignment-order must be 0 or 1, got {args.alignment_order}")
        if args.lexicon_topk < 0:
            raise ValueError(f"--lexicon-topk must be >= 0 (0 = exact), got {args.lexicon_topk}")
        if args.lexicon_topk_warmup < 0:
            raise ValueError(f"--lexicon-topk-warmup must be >= 0 updates, got {args.lexicon_topk_warmup}")
        if args.lexicon_topk_schedule and args.lexicon_topk_warmup:
            raise ValueError("--lexicon-topk-warmup N is the schedule 0@0,K@N: give one of the two, not both")
        parse_topk_schedule(args.lexicon_topk_schedule, getattr(args, "max_update", 0))  # fail before training
        if not 0.0 <= args.lexicon_dropout < 1.0:
            raise ValueError(f"--lexicon-dropout must be in [0, 1), got {args.lexicon_dropout}")
        if args.lexicon_chunk_size < 1:
            raise ValueError(f"--lexicon-chunk-size must be positive, got {args.lexicon_chunk_size}")
        if args.lexicon not in LEXICONS:
            raise ValueError(f"--lexicon must be one of {', '.join(LEXICONS)}, got {args.lexicon!r}")
        if args.max_jump < 1:
            raise ValueError(f"--max-jump must be positive, got {args.max_jump}")
        if args.target_context not in TARGET_CONTEXTS:
            raise ValueError(f"--target-context must be one of {', '.join(TARGET_CONTEXTS)}, got {args.target_context!r}")
        if args.target_context == "both" and args.dhmm_layers != "last":
            raise ValueError("--target-context both needs --dhmm-layers last (the future enters the last layer only)")
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return DHMMEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return TransformerDHMMDecoder(args, tgt_dict, embed_tokens,
                                      no_encoder_attn=getattr(args, "no_cross_attention", False))

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens=True,
                features_only=False, alignment_layer=None, alignment_heads=None):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only)

    # ------------------------------------------------------------------ alignment matrices
    #: the matrices :meth:`alignment_matrices` computes (``python -m hmm_nmt_align align --method``)
    ALIGNMENT_METHODS = ("alignment", "posterior")

    def alignment_model_type(self) -> str:
        """``dhmm0`` or ``dhmm1``: the alignment order, as forced-alignment messages name the model."""
        return "dhmm1" if self.decoder.first_order is not None else "dhmm0"

    @torch.no_grad()
    def alignment_matrices(self, src_tokens, src_lengths, prev_output_tokens, target=None,
                           methods=("alignment",), transition=False, encoder_out=None):
        """Padded (B, I, J) matrices of reference pairs (teacher forcing) for each of ``methods``.

        ``alignment``: the alignment distribution, honouring ``--lexicon-topk`` as decoding does. Zero
        order p(j | e_<i, f) (Eq. 8); first order the prediction sum_j' p(j | j') q_{i-1}(j'), q the forward
        (filtered) state over the reference prefix. ``posterior``: p(b_i = j | E, F), lexicon included
        (:meth:`alignment_posteriors`; needs ``target``). ``transition`` (first order only) adds
        ``"transition"``: (B, I, J, J) p(j | j') at every target position. The encoder runs once (or not at
        all when ``encoder_out`` is given), whatever the number of methods.
        """
        unknown = [m for m in methods if m not in self.ALIGNMENT_METHODS]
        if unknown:
            raise ValueError(f"unknown alignment method {unknown[0]!r} ({', '.join(self.ALIGNMENT_METHODS)})")
        if "posterior" in methods and target is None:
            raise ValueError("the posterior alignment needs the reference target")
        first_order = self.decoder.first_order is not None
        if transition and not first_order:
            raise ValueError("transition matrices exist only for a first-order model (--alignment-order 1)")
        if encoder_out is None:
            encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        dec, prev, out = self.decoder, prev_output_tokens, {}
        features = None
        if "posterior" in methods or ("alignment" in methods and not first_order):
            features = dec(prev, encoder_out=encoder_out, features_only=True)
        if "alignment" in methods and not first_order:
            # p(j | e_<i, f) needs no lexicon: the decoder's full forward would only add the vocabulary mixture
            extra = features[1]
            out["alignment"] = dec.prune_alignment(extra["log_align"], extra["src_pad"])[0].float().exp()
        full_extra = None
        if "alignment" in methods and first_order:
            # order 1: the prediction sum_j' p(j | j') q(j') filters with the lexicon (full forward)
            _, full_extra = dec(prev, encoder_out=encoder_out)
            out["alignment"] = full_extra["attn"][0].float()
        if transition:
            extra = features[1] if features is not None else full_extra
            if extra is None:
                extra = dec(prev, encoder_out=encoder_out, features_only=True)[1]
            out["transition"] = extra["log_trans"].float().exp()
        if "posterior" in methods:
            out["posterior"] = self.alignment_posteriors(src_tokens, src_lengths, prev, target,
                                                         features=features).float()
        return out

    @torch.no_grad()
    def alignment_posteriors(self, src_tokens, src_lengths, prev_output_tokens, target, method="scaled",
                             features=None):
        """p(b_i = j | E, F) (B, I, J) for reference pairs, lexicon included ("posterior alignment").

        ``method="autograd"`` differentiates log p(E | F) w.r.t. the lexicon scores, ``"explicit"`` runs the
        forward-backward recursions in log space, ``"scaled"`` (the default, several times faster) in
        probability space with a per-sentence error bound (:func:`hmm_nmt.hmm.direct.scaled_posteriors`); all
        give the same posteriors (tested). ``features``: the decoder's
        ``(x, extra)`` with ``features_only=True`` for these inputs, when the caller already has them.
        """
        if features is None:
            features = self(src_tokens, src_lengths, prev_output_tokens, features_only=True)
        x, extra = features
        tgt_mask = target.ne(self.decoder.padding_idx)
        row_mask = self.decoder.lexicon_rows(extra, tgt_mask)
        gold, _ = self.decoder.lexicon_scores(x, extra, target, row_mask)
        align = self.decoder.alignment_potentials(extra, row_mask)
        if method == "autograd":
            return direct.posteriors(gold, tgt_mask, **align)
        if method == "explicit":
            return direct.forward_backward(gold, tgt_mask, **align)
        if method == "scaled":
            return direct.scaled_posteriors(gold, tgt_mask, **align)
        raise ValueError(f"unknown posterior method {method!r} (scaled, autograd or explicit)")


#: ``--lexicon`` choices
LEXICONS = ("softmax", "class", "separable")
#: ``--lexicon`` of a new model: separable scores higher than softmax on Multi30k at about 3x its training speed
#: (docs/translation.md); checkpoints saved before the option keep softmax (:func:`_dhmm_defaults`)
DEFAULT_LEXICON = "separable"

# docs/translation.md: the paper's form (all) under-fits at equal updates; it stays selectable
DEFAULT_DHMM_LAYERS = "last"


def _dhmm_defaults(args):
    set_default(args, "alignment_order", 0)
    set_default(args, "lexicon_chunk_size", 1024)
    set_default(args, "lexicon_dtype", "fp32")
    set_default(args, "max_jump", 16)
    set_default(args, "lexicon_topk", 0)
    set_default(args, "lexicon_topk_warmup", 0)
    set_default(args, "lexicon_topk_schedule", "")
    # the option's default is pruned (add_args); a checkpoint saved before that default has None: bound
    set_default(args, "lexicon_topk_objective", "bound")
    if not hasattr(args, "dhmm_layers"):
        # a checkpoint trained before --dhmm-layers existed: Eq. 6 was in every layer
        args.dhmm_layers = "all"
    elif args.dhmm_layers is None:
        args.dhmm_layers = DEFAULT_DHMM_LAYERS
    set_default(args, "lexicon_dropout", 0.0)
    if not hasattr(args, "lexicon"):
        # a checkpoint saved before --lexicon existed: the softmax lexicon (every later one names its lexicon)
        args.lexicon = "softmax"
    elif args.lexicon is None:
        args.lexicon = DEFAULT_LEXICON
    set_default(args, "target_context", "past")


def dhmm_base_architecture(args):
    _dhmm_defaults(args)
    base_architecture(args)


@register_model_architecture("transformer_dhmm", "transformer_dhmm")
def transformer_dhmm(args):
    dhmm_base_architecture(args)


@register_model_architecture("transformer_dhmm", "transformer_dhmm_iwslt_de_en")
def transformer_dhmm_iwslt_de_en(args):
    _dhmm_defaults(args)
    transformer_iwslt_de_en(args)


@register_model_architecture("transformer_dhmm", "transformer_dhmm_first_order")
def transformer_dhmm_first_order(args):
    if getattr(args, "alignment_order", None) is None:
        args.alignment_order = 1
    dhmm_base_architecture(args)
