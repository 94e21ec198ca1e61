"""The translation benchmark's model slots: architecture, criterion and extra flags of each, and overrides."""
import shlex

from benchmarks.common import BenchmarkError

SLOTS = {
    "transformer": {
        "arch": "transformer",
        "criterion": "label_smoothed_cross_entropy",
        "label": "transformer",
    },
    # the softmax lexicon, named: it was the default when the results of docs/ were measured (the default is
    # now separable, the *_sep slots)
    "dhmm0": {
        "arch": "transformer_dhmm",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, zero order",
        "args": ["--lexicon", "softmax"],
    },
    "dhmm1": {
        "arch": "transformer_dhmm_first_order",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, first order",
        "args": ["--lexicon", "softmax"],
    },
    # the CPU path (docs/speed.md): the top-4 pruned objective for 80% of the updates (or, with --patience,
    # until the validation plateaus: benchmarks/fairseq_instrumented.py), then the exact likelihood; validation and
    # decoding exact. The lexicon in bf16 only where the machine multiplies bf16 natively (--lexicon-dtype auto:
    # emulated bf16 trained 5-12x slower than fp32, docs/speed.md)
    "dhmm0_fast": {
        "arch": "transformer_dhmm",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, zero order, top-4 then exact",
        "args": ["--lexicon", "softmax", "--lexicon-dtype", "auto", "--lexicon-topk-objective", "pruned",
                 "--lexicon-topk-schedule", "4@0,0@80%"],
    },
    "dhmm1_fast": {
        "arch": "transformer_dhmm_first_order",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, first order, top-4 then exact",
        "args": ["--lexicon", "softmax", "--lexicon-dtype", "auto", "--lexicon-topk-objective", "pruned",
                 "--lexicon-topk-schedule", "4@0,0@80%"],
    },
    # the separable lexicon (docs/speed.md section 7): exact in training, validation and decoding, no pruning
    "dhmm0_sep": {
        "arch": "transformer_dhmm",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, zero order, separable lexicon",
        "args": ["--lexicon", "separable"],
    },
    "dhmm1_sep": {
        "arch": "transformer_dhmm_first_order",
        "criterion": "dhmm_label_smoothed_cross_entropy",
        "label": "direct HMM, first order, separable lexicon",
        "args": ["--lexicon", "separable"],
    },
    # chain decoders over a transformer decoder of --layers layers (docs/translation.md); their
    # defaults, e.g. --slot-args "hnmc=--hnmc-states 64" or "iohmm=--iohmm-decoder chain" to change them
    "hnmc": {
        "arch": "transformer_hnmc",
        "criterion": "label_smoothed_cross_entropy",
        "label": "HNMC over a transformer decoder",
    },
    "iohmm": {
        "arch": "transformer_iohmm",
        "criterion": "label_smoothed_cross_entropy",
        "label": "IOHMM over a transformer decoder",
    },
}


def bound_scaled_args(extra_args):
    """The arguments of a slot given as a percentage of ``--max-update`` (``--lexicon-topk-schedule 4@0,0@80%``):
    such a slot trains differently under another bound."""
    return [a for a in extra_args or [] if str(a).endswith("%")]


def parse_slot_map(items, what, allowed):
    out = {}
    for item in items or []:
        if "=" not in item:
            raise BenchmarkError(f"{what} expects SLOT=VALUE, got '{item}'")
        slot, value = item.split("=", 1)
        if slot not in allowed:
            raise BenchmarkError(f"{what}: unknown slot '{slot}' (slots: {', '.join(allowed)})")
        out[slot] = value
    return out


def resolve_slots(args):
    """``--models`` with ``--arch`` / ``--criterion`` / ``--slot-args``: (slots in order, {slot: its config})."""
    slots = [s.strip() for s in args.models.split(",") if s.strip()]
    for s in slots:
        if s not in SLOTS:
            raise BenchmarkError(f"--models: unknown slot '{s}' (slots: {', '.join(SLOTS)})")
    if len(set(slots)) != len(slots):
        raise BenchmarkError("--models lists a slot twice")
    archs = parse_slot_map(args.arch, "--arch", SLOTS)
    crits = parse_slot_map(args.criterion, "--criterion", SLOTS)
    extra = parse_slot_map(args.slot_args, "--slot-args", SLOTS)
    slot_cfg = {
        s: {
            "arch": archs.get(s, SLOTS[s]["arch"]),
            "criterion": crits.get(s, SLOTS[s]["criterion"]),
            "label": SLOTS[s]["label"],
            "extra_args": SLOTS[s].get("args", []) + shlex.split(extra.get(s, "")),
        }
        for s in slots
    }
    return slots, slot_cfg
