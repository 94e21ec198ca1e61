"""``--task translation_eos_penalty``: fairseq's translation task plus a length control that acts inside beam search.

    fairseq-generate DATA --user-dir hmm_nmt --task translation_eos_penalty --eos-penalty 0.5 --path CKPT ...

fairseq's ``--lenpen`` cannot lengthen the output of a model that ends sentences too early: the search expands
candidates by raw log-probability and a sentence stops once ``--beam`` hypotheses have ended, so lenpen only
re-orders those few finished hypotheses (scripts/tune_lenpen.py relies on it). ``--eos-penalty δ`` subtracts δ
(nats) from log p(</s> | e_<i, f) at every search step, as fairseq's ``--unkpen`` does for ``<unk>``: ending now
competes with going on at a cost, so the search itself reaches longer hypotheses (δ < 0 shortens). Every
hypothesis ends once, so its reported score is its log-probability minus δ (the P- line's last entry carries it).
δ = 0 is the stock task, output for output. Any fairseq translation model works (transformer, the direct HMM,
the chain decoders); choose δ on dev with ``scripts/tune_lenpen.py --eos-penalty ...``. Training under this
task is the translation task's: δ only exists at search time (and not in ``--score-reference``).
"""
from dataclasses import dataclass, field

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask


@dataclass
class TranslationEosPenaltyConfig(TranslationConfig):
    eos_penalty: float = field(default=0.0, metadata={
        "help": "subtract this from log p(</s>) at every beam-search step (nats; > 0 gives longer output, 0 is "
                "the stock search)"})


def add_eos_penalty(ensemble, eos, penalty):
    """Make this one ``EnsembleModel`` (what every fairseq generator searches through) return
    log p(</s>) - ``penalty``; other instances and the class are untouched."""
    inner = ensemble.forward_decoder

    def forward_decoder(*args, **kwargs):
        lprobs, attn = inner(*args, **kwargs)
        lprobs = lprobs.clone()  # a model may keep the returned tensor in its incremental state
        lprobs[:, eos] -= penalty
        return lprobs, attn

    ensemble.forward_decoder = forward_decoder
    return ensemble


@register_task("translation_eos_penalty", dataclass=TranslationEosPenaltyConfig)
class TranslationEosPenaltyTask(TranslationTask):
    cfg: TranslationEosPenaltyConfig

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        gen = super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                      extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                      prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        penalty = float(self.cfg.eos_penalty)
        if penalty != 0.0:
            if not hasattr(getattr(gen, "model", None), "forward_decoder"):
                raise ValueError(f"--eos-penalty {penalty:g}: {type(gen).__name__} does not search through an "
                                 "ensemble's forward_decoder (use it with beam search or sampling)")
            add_eos_penalty(gen.model, self.target_dictionary.eos(), penalty)
        return gen
