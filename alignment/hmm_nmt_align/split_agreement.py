"""Split a joint alignment-by-agreement checkpoint into its two directions.

    python -m hmm_nmt_align.split_agreement CKPT --out-dir DIR [--source-lang S --target-lang T]

``CKPT`` is a ``transformer_dhmm_agreement`` / ``transformer_dhmm_first_order_agreement`` checkpoint
(:mod:`hmm_nmt.models.dhmm_agreement`, trained with ``--criterion dhmm_agreement``). Writes ``DIR/fwd.pt`` (the
task's source -> target) and ``DIR/rev.pt`` (target -> source): standard ``transformer_dhmm`` /
``transformer_dhmm_first_order`` checkpoints (model arch set to the plain one, ``fwd.``/``rev.`` prefixes
stripped, the task's languages swapped for ``rev``, no optimizer state, the criterion recorded as
``dhmm_label_smoothed_cross_entropy``), each written atomically. They load wherever a trained
``transformer_dhmm`` does: ``python -m hmm_nmt_align.extract --path DIR/fwd.pt --rev-path DIR/rev.pt``,
fairseq-generate, the hub.

The languages: a checkpoint trained without ``--source-lang/--target-lang`` has them inferred from its data-bin
(fairseq's rule, the ``dict.*.txt`` names); give them here when that folder is not available.
"""
import argparse
import copy
import os
import sys

import torch

import hmm_nmt  # noqa: F401  (registers the plugin; makes checkpoints loadable under torch >= 2.6)
from hmm_nmt.models.dhmm_agreement import PLAIN_ARCH
from hmm_nmt_align.base.atomic import atomic_output
from hmm_nmt_align.base.console import interruptible, same_file

__all__ = ["split_state", "split_checkpoint", "main"]

_AGREEMENT_OPTIONS = ("agreement_weight", "agreement")


class SplitError(ValueError):
    pass


def _languages(cfg, source_lang=None, target_lang=None):
    src = source_lang or getattr(cfg["task"], "source_lang", None)
    tgt = target_lang or getattr(cfg["task"], "target_lang", None)
    if src and tgt:
        return src, tgt
    from fairseq.data.data_utils import infer_language_pair

    data = str(getattr(cfg["task"], "data", "") or "").split(os.pathsep)[0]
    if data and os.path.isdir(data):
        s, t = infer_language_pair(data)
        if s and t:
            return src or s, tgt or t
    raise SplitError(f"the checkpoint names no languages and its data-bin ({data or 'not recorded'}) is not "
                     "available to infer them: give --source-lang and --target-lang")


def _set(node, key, value):
    """Set ``key`` on a cfg node: an argparse Namespace (legacy model args) or an omegaconf DictConfig."""
    from omegaconf import OmegaConf, open_dict

    if OmegaConf.is_config(node):
        with open_dict(node):
            node[key] = value
    else:
        setattr(node, key, value)


def _drop(node, key):
    from omegaconf import OmegaConf, open_dict

    if OmegaConf.is_config(node):
        if key in node:
            with open_dict(node):
                del node[key]
    elif hasattr(node, key):
        delattr(node, key)


def split_state(state, source_lang=None, target_lang=None):
    """``{"fwd": state, "rev": state}``: the two directions of a loaded joint checkpoint (fairseq's dict)."""
    cfg = state.get("cfg")
    if cfg is None:
        raise SplitError("the checkpoint has no cfg (written by a fairseq older than 0.10?)")
    arch = getattr(cfg["model"], "arch", None) or getattr(cfg["model"], "_name", None)
    if arch not in PLAIN_ARCH:
        raise SplitError(f"not an agreement checkpoint: its architecture is {arch} "
                         f"(expected one of {', '.join(sorted(PLAIN_ARCH))})")
    src, tgt = _languages(cfg, source_lang, target_lang)
    out = {}
    for name, (s, t) in (("fwd", (src, tgt)), ("rev", (tgt, src))):
        prefix = name + "."
        weights = {k[len(prefix):]: v for k, v in state["model"].items() if k.startswith(prefix)}
        if not weights:
            raise SplitError(f"the checkpoint has no {prefix}* weights")
        rest = {k: v for k, v in state.items() if k not in ("model", "last_optimizer_state", "criterion", "cfg")}
        new = copy.deepcopy(rest)
        new["cfg"] = new_cfg = copy.deepcopy(cfg)
        new["model"] = weights
        for node in (new_cfg["model"],):
            _set(node, "arch", PLAIN_ARCH[arch])
            _set(node, "_name", PLAIN_ARCH[arch])
            for key in ("init_fwd", "init_rev", *_AGREEMENT_OPTIONS):
                _drop(node, key)
            _set(node, "source_lang", s)
            _set(node, "target_lang", t)
            _set(node, "criterion", "dhmm_label_smoothed_cross_entropy")
        _set(new_cfg["task"], "source_lang", s)
        _set(new_cfg["task"], "target_lang", t)
        if new_cfg.get("criterion") is not None:
            _set(new_cfg["criterion"], "_name", "dhmm_label_smoothed_cross_entropy")
            for key in _AGREEMENT_OPTIONS:
                _drop(new_cfg["criterion"], key)
        for h in new.get("optimizer_history") or []:
            h["criterion_name"] = "DHMMLabelSmoothedCrossEntropyCriterion"
        out[name] = new
    return out


def split_checkpoint(path, out_dir, source_lang=None, target_lang=None):
    """Write ``out_dir/fwd.pt`` and ``out_dir/rev.pt``; returns their paths."""
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        raise SplitError(f"checkpoint not found: {path}")
    from hmm_nmt_align.safe_checkpoint import CheckpointError

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except CheckpointError as e:  # not a checkpoint, or a pickle payload (refused, never run)
        raise SplitError(f"{e.what}" + (f" ({e.detail})" if e.detail else "")) from None
    parts = split_state(state, source_lang, target_lang)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, part in parts.items():
        dest = os.path.join(out_dir, f"{name}.pt")
        with atomic_output(dest, suffix=".tmp.pt") as tmp:
            torch.save(part, tmp)
        written.append(dest)
    return written


@interruptible("split_agreement")
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hmm_nmt_align.split_agreement", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help="a transformer_dhmm(_first_order)_agreement checkpoint")
    ap.add_argument("--out-dir", required=True, help="folder for fwd.pt and rev.pt")
    ap.add_argument("--source-lang", help="the joint model's source language (default: from the checkpoint)")
    ap.add_argument("--target-lang", help="the joint model's target language (default: from the checkpoint)")
    args = ap.parse_args(argv)
    for name in ("fwd.pt", "rev.pt"):
        if same_file(os.path.join(args.out_dir, name), args.checkpoint):
            sys.stderr.write(f"split_agreement: error: --out-dir {args.out_dir}: {name} would overwrite the input "
                             f"checkpoint {args.checkpoint}\n")
            return 2
    try:
        written = split_checkpoint(args.checkpoint, args.out_dir, args.source_lang, args.target_lang)
    except SplitError as e:
        sys.stderr.write(f"split_agreement: error: {args.checkpoint}: {e}\n")
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
