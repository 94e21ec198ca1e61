"""Both directions of the direct HMM in one model, for alignment by agreement (Liang, Taskar & Klein 2006).

``--arch transformer_dhmm_agreement`` (zero order) / ``transformer_dhmm_first_order_agreement`` (first order):
a :class:`BaseFairseqModel` holding two independent :class:`TransformerDHMMModel` s built from the same
options, ``fwd`` (the task's source -> target) and ``rev`` (target -> source, built through a task shim
with the dictionaries swapped). The two directions share no parameters; the criterion
``dhmm_agreement`` (:mod:`hmm_nmt.criterions.dhmm_agreement`) trains both on every batch and couples them
through their alignment posteriors. Both sides must use one joined dictionary (``fairseq-preprocess
--joined-dictionary``): the reverse batch is the forward batch's token rows swapped.

``forward`` is the forward direction's, and ``encoder`` / ``decoder`` are the forward model's, so
validation, fairseq-generate and forced alignment of the joint checkpoint use en->fr (the task's direction).
``python -m hmm_nmt_align.split_agreement CKPT --out-dir DIR`` writes the two directions as plain
``transformer_dhmm`` checkpoints.

``--init-fwd PATH`` / ``--init-rev PATH`` start each direction from a trained ``transformer_dhmm`` checkpoint of
the same architecture (model weights only). They are not applied when the model is built to receive a saved
state: when fairseq-train resumes from ``--save-dir``'s ``--restore-file`` (the joint checkpoint's weights
replace them anyway) and when a joint checkpoint is loaded (the options are cleared once applied, so the
saved configuration does not name the files).
"""
import copy
import logging
import os

from fairseq import checkpoint_utils
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture

from hmm_nmt.models.transformer_dhmm import TransformerDHMMModel, transformer_dhmm, transformer_dhmm_first_order

logger = logging.getLogger(__name__)

#: the plain architecture of each direction of an agreement architecture (the split tool's and --init-*'s)
PLAIN_ARCH = {"transformer_dhmm_agreement": "transformer_dhmm",
              "transformer_dhmm_first_order_agreement": "transformer_dhmm_first_order"}


class _SwappedTask:
    """The few task attributes a model's ``build_model`` reads, with source and target exchanged."""

    def __init__(self, task):
        self.source_dictionary = task.target_dictionary
        self.target_dictionary = task.source_dictionary


def same_dictionary(a, b) -> bool:
    return len(a) == len(b) and a.symbols == b.symbols and (a.pad(), a.eos(), a.unk(), a.bos()) == \
        (b.pad(), b.eos(), b.unk(), b.bos())


@register_model("transformer_dhmm_agreement")
class DHMMAgreementModel(BaseFairseqModel):
    """``fwd`` and ``rev`` transformer_dhmm models of one joined dictionary; see the module docstring."""

    def __init__(self, fwd, rev):
        super().__init__()
        self.fwd = fwd
        self.rev = rev

    @staticmethod
    def add_args(parser):
        TransformerDHMMModel.add_args(parser)
        parser.add_argument("--init-fwd", metavar="PATH",
                            help="initialise the forward (source->target) direction from this transformer_dhmm "
                                 "checkpoint (model weights only)")
        parser.add_argument("--init-rev", metavar="PATH",
                            help="initialise the reverse (target->source) direction from this transformer_dhmm "
                                 "checkpoint (trained with the languages swapped)")

    @classmethod
    def build_model(cls, args, task):
        if not same_dictionary(task.source_dictionary, task.target_dictionary):
            raise ValueError("transformer_dhmm_agreement needs one joined dictionary for both languages (the reverse "
                             "batch swaps the token rows): binarize with fairseq-preprocess --joined-dictionary")
        if getattr(args, "lexicon_topk", 0) or getattr(args, "lexicon_topk_warmup", 0) or \
                getattr(args, "lexicon_topk_schedule", ""):
            raise ValueError("transformer_dhmm_agreement needs the exact posteriors: --lexicon-topk, "
                             "--lexicon-topk-warmup and --lexicon-topk-schedule are not supported (use 0 / unset)")
        fwd = TransformerDHMMModel.build_model(copy.deepcopy(args), task)
        rev = TransformerDHMMModel.build_model(copy.deepcopy(args), _SwappedTask(task))
        model = cls(fwd, rev)
        inits = {"fwd": getattr(args, "init_fwd", None), "rev": getattr(args, "init_rev", None)}
        if any(inits.values()):
            restore = _restore_checkpoint(args)
            if restore:
                logger.info(f"--init-fwd/--init-rev ignored: fairseq restores the joint checkpoint {restore}")
            else:
                for name, path in inits.items():
                    if path:
                        load_direction(getattr(model, name), path, PLAIN_ARCH.get(args.arch, args.arch),
                                       args.alignment_order)
                        logger.info(f"{name} initialised from {path}")
            # applied (or superseded): a checkpoint of this model must not load the files again
            args.init_fwd = args.init_rev = None
        return model

    # ------------------------------------------------------------------ the forward direction's interface
    @property
    def encoder(self):
        return self.fwd.encoder

    @property
    def decoder(self):
        return self.fwd.decoder

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **kwargs):
        return self.fwd(src_tokens, src_lengths, prev_output_tokens, **kwargs)

    def forward_decoder(self, prev_output_tokens, **kwargs):
        return self.fwd.forward_decoder(prev_output_tokens, **kwargs)

    def extract_features(self, *args, **kwargs):
        return self.fwd.extract_features(*args, **kwargs)

    def output_layer(self, features, **kwargs):
        return self.fwd.output_layer(features, **kwargs)

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.fwd.get_normalized_probs(net_output, log_probs, sample)

    def max_positions(self):
        return self.fwd.max_positions()

    def max_decoder_positions(self):
        return self.fwd.max_decoder_positions()

    def has_encoder(self):
        return True

    ALIGNMENT_METHODS = TransformerDHMMModel.ALIGNMENT_METHODS

    def alignment_model_type(self) -> str:
        return self.fwd.alignment_model_type()

    def alignment_matrices(self, *args, **kwargs):
        return self.fwd.alignment_matrices(*args, **kwargs)

    def alignment_posteriors(self, *args, **kwargs):
        return self.fwd.alignment_posteriors(*args, **kwargs)


def _restore_checkpoint(args):
    """The checkpoint fairseq-train will restore over the built model, or None (fairseq's own rule)."""
    save_dir, restore = getattr(args, "save_dir", None), getattr(args, "restore_file", None)
    if not save_dir or not restore:
        return None
    path = os.path.join(save_dir, "checkpoint_last.pt") if restore == "checkpoint_last.pt" else restore
    return path if os.path.isfile(path) else None


def load_direction(model, path, arch, alignment_order):
    """Load the model weights of the ``transformer_dhmm`` checkpoint ``path`` into ``model`` (one direction)."""
    if not os.path.isfile(path):
        raise ValueError(f"--init-fwd/--init-rev: checkpoint not found: {path}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    cfg = state.get("cfg")
    saved = cfg["model"] if cfg is not None else state.get("args")
    saved_arch = getattr(saved, "arch", None) or getattr(saved, "_name", None)
    saved_order = getattr(saved, "alignment_order", None)
    if saved_arch not in ("transformer_dhmm", "transformer_dhmm_first_order", "transformer_dhmm_iwslt_de_en") or \
            saved_order != alignment_order:
        raise ValueError(f"{path}: a {saved_arch} checkpoint (alignment order {saved_order}) cannot initialise a "
                         f"direction of {arch} (alignment order {alignment_order})")
    # the lexicons share their parameter names, so the weights would load into another lexicon silently; saved
    # args without the key are from before --lexicon: softmax
    saved_lexicon = getattr(saved, "lexicon", None) or "softmax"
    if saved_lexicon != model.decoder.lexicon_kind:
        raise ValueError(f"{path}: its lexicon is {saved_lexicon}, this model's {model.decoder.lexicon_kind}: "
                         f"train with --lexicon {saved_lexicon} to start from it")
    try:
        model.load_state_dict(state["model"], strict=True)
    except RuntimeError as e:
        detail = " ".join(str(e).split())[:400]
        raise ValueError(f"{path}: its weights do not fit a direction of this {arch} model "
                         f"(different sizes or layers?): {detail}") from None


@register_model_architecture("transformer_dhmm_agreement", "transformer_dhmm_agreement")
def transformer_dhmm_agreement(args):
    transformer_dhmm(args)


@register_model_architecture("transformer_dhmm_agreement", "transformer_dhmm_first_order_agreement")
def transformer_dhmm_first_order_agreement(args):
    transformer_dhmm_first_order(args)
