"""``hmm-nmt-adapt``: fine-tune a checkpoint on the very sentence pairs it is about to align.

A statistical aligner (eflomal, fast_align, GIZA++) is trained on the text it aligns: the test pairs are part
of its training corpus, with no gold links involved. This tool gives a neural aligner the same footing: a
few updates of the checkpoint's own training loss (the criterion recorded in it, e.g. the direct HMM's
label-smoothed sentence likelihood) on the word-tokenised pairs to align, segmented as ``hmm-nmt-align
--src-text/--tgt-text`` segments them, then a checkpoint that ``hmm-nmt-align`` and ``fairseq-generate`` load
as before. Unsupervised: only the text is used, never a gold alignment. For a symmetrized alignment adapt each
direction's checkpoint on its own side order (``--src-text`` is always the checkpoint's source language).

::

    hmm-nmt-adapt --path en-fr.pt --src-text test.en --tgt-text test.fr --bpe-codes codes --updates 60 -o en-fr.adapted.pt
    hmm-nmt-adapt --path fr-en.pt --src-text test.fr --tgt-text test.en --bpe-codes codes --updates 60 -o fr-en.adapted.pt
    hmm-nmt-align --path en-fr.adapted.pt --rev-path fr-en.adapted.pt --src-text test.en --tgt-text test.fr ...

The optimiser is fairseq's usual one for these models (Adam, betas 0.9/0.98) at a constant ``--lr`` after a
linear warm-up of ``--warmup`` updates, on batches of at most ``--max-tokens`` target+source tokens drawn by
fairseq's batch sampler (shuffled per pass, ``--seed``); dropout is on, as in training. How many updates
help is a setting to choose on held-out gold (e.g. the trial pairs), not on the pairs scored.
"""
import argparse
import logging
import os
import sys
from typing import List, Optional

from hmm_nmt_align.base.atomic import atomic_output
from hmm_nmt_align.base.console import ExtractionError, clobbered_input, interruptible

from .extract import input_files, readable_file, setup_logging

# torch, fairseq and the model layer are imported once the arguments are checked (--help, a bad flag, Ctrl-C
# answer at once)

logger = logging.getLogger("hmm_nmt.adapt")

__all__ = ["adapt", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hmm-nmt-adapt",
        description="Fine-tune a fairseq checkpoint on the word-tokenised sentence pairs it will align (its own "
                    "training loss, no gold links), as statistical aligners train on the text they align.")
    p.add_argument("--path", required=True, metavar="CKPT", help="checkpoint (.pt) to adapt")
    p.add_argument("--data", metavar="DIR", help="folder with the model's dict.SRC.txt/dict.TGT.txt (default: next "
                                                 "to the checkpoint, else its training data-bin)")
    p.add_argument("--src-text", required=True, metavar="FILE", help="word-tokenised source text, one sentence a line")
    p.add_argument("--tgt-text", required=True, metavar="FILE", help="word-tokenised target text, line-parallel")
    p.add_argument("--bpe-codes", metavar="CODES", help="subword-nmt codes the model was trained with")
    p.add_argument("--spm-model", metavar="MODEL", help="SentencePiece model the model was trained with")
    p.add_argument("--bpe", choices=["none"], help="none: the words are the model's tokens (no segmentation)")
    p.add_argument("--updates", required=True, metavar="N[,N2...]",
                   help="optimizer updates; several (e.g. 30,60,120) write one checkpoint each from one run, and -o "
                        "then needs {updates} in its name")
    p.add_argument("--lr", type=float, default=5e-4, help="learning rate after the warm-up (default 5e-4)")
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="linear warm-up updates (default 10)")
    p.add_argument("--max-tokens", type=int, default=2048, metavar="N", help="tokens per batch (default 2048)")
    p.add_argument("--seed", type=int, default=1, help="batch order and dropout seed (default 1)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is available")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="adapted checkpoint (.pt)")
    return p


def _criterion(task, state):
    if state.get("cfg") is None:  # an old args-only checkpoint
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        state["cfg"] = convert_namespace_to_omegaconf(state["args"])
        state["args"] = None
    crit_cfg = state["cfg"].criterion
    if crit_cfg is None:
        raise ExtractionError("the checkpoint records no criterion: cannot tell which loss it was trained on")
    return task.build_criterion(crit_cfg)


def adapt(model, task, criterion, pairs, updates: int, lr: float = 5e-4, warmup: int = 10,
          max_tokens: int = 2048, seed: int = 1, progress: bool = True, on_update=None) -> List[float]:
    """``updates`` Adam steps of ``criterion`` on ``pairs`` (:class:`~hmm_nmt.aligner.pairs.EncodedPair`);
    returns the per-update training losses (per target token, as fairseq logs them, in nats).
    ``on_update(step, losses)``, when given, is called after every update (the model in training mode)."""
    import torch

    from hmm_nmt.aligner.pairs import pair_dataset

    dataset = pair_dataset(pairs, task)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-8)
    device = next(model.parameters()).device
    losses: List[float] = []
    model.train()
    torch.manual_seed(seed)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=updates, desc="adapting", unit="upd", file=sys.stderr, mininterval=5)
    epochs = task.get_batch_iterator(dataset, max_tokens=max_tokens, seed=seed, max_positions=model.max_positions(),
                                     ignore_invalid_inputs=False, disable_iterator_cache=True)
    while len(losses) < updates:
        for sample in epochs.next_epoch_itr(shuffle=True):
            if len(losses) >= updates:
                break
            if device.type != "cpu":
                from fairseq import utils

                sample = utils.move_to_cuda(sample)
            step = len(losses) + 1
            for g in opt.param_groups:
                g["lr"] = lr * min(1.0, step / warmup) if warmup > 0 else lr
            opt.zero_grad()
            loss, sample_size, _ = criterion(model, sample)
            (loss / sample_size).backward()  # fairseq's trainer divides the summed gradient by sample_size
            opt.step()
            losses.append(loss.item() / sample_size)
            if on_update is not None:
                on_update(len(losses), losses)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
    if bar is not None:
        bar.close()
    model.eval()
    return losses


def atomic_torch_save(obj, path: str) -> None:
    import torch

    with atomic_output(path, suffix=".tmp.pt") as tmp:  # through a symbolic link, as every writer
        torch.save(obj, tmp)


@interruptible("hmm-nmt-adapt")
def main(argv: Optional[List[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        try:
            save_at = sorted({int(x) for x in args.updates.split(",") if x.strip()})
        except ValueError:
            raise ExtractionError(f"--updates: expected N or N1,N2,... (integers), got {args.updates!r}") from None
        if not save_at or save_at[0] < 1 or args.max_tokens < 1:
            raise ExtractionError(f"--updates and --max-tokens must be positive, got {args.updates}, {args.max_tokens}")
        if len(save_at) > 1 and "{updates}" not in args.output:
            raise ExtractionError("-o: with several --updates the name needs {updates}, e.g. -o adapted.{updates}.pt")
        if args.lr <= 0 or args.warmup < 0:
            raise ExtractionError(f"--lr must be positive and --warmup not negative (got {args.lr}, {args.warmup})")
        given = [n for n, v in (("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model),
                                ("--bpe none", args.bpe == "none")) if v]
        if len(given) != 1:
            raise ExtractionError("give exactly one of --bpe-codes CODES, --spm-model MODEL or --bpe none (the model's "
                                  "segmentation)" + (f"; got {' and '.join(given)}" if given else ""))
        for flag, path in (("--src-text", args.src_text), ("--tgt-text", args.tgt_text),
                           ("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model)):
            if path is not None and not readable_file(path):
                raise ExtractionError(f"{flag}: file not found: {path}")
        if not os.path.isfile(args.path):
            raise ExtractionError(f"--path: checkpoint not found: {args.path}")
        out_dir = os.path.dirname(os.path.abspath(args.output.replace("{updates}", "0")))
        if not os.path.isdir(out_dir):
            raise ExtractionError(f"-o: directory {out_dir} does not exist")
        for step in save_at:
            out = args.output.replace("{updates}", str(step))
            hit = clobbered_input(out, input_files(args))
            if hit:
                raise ExtractionError(f"-o {out} is the same file as {hit[0]} {hit[1]}: refusing to overwrite an input")
        from hmm_nmt.aligner.pairs import encode_pair, too_long

        from .loading import load_model, read_checkpoint
        from .raw_text import read_text_inputs

        setup_logging()
        src_lines, tgt_lines, segmenter = read_text_inputs(args.src_text, args.tgt_text, args.bpe_codes,
                                                             args.spm_model)
        model, task = load_model(args.path, args.data, args.cpu)
        state = read_checkpoint(args.path)
        criterion = _criterion(task, state)
        lines = [k for k, (s, t) in enumerate(zip(src_lines, tgt_lines)) if s and t]  # 0-based input lines
        pairs = [encode_pair(src_lines[k], tgt_lines[k], segmenter, task.source_dictionary, task.target_dictionary)
                 for k in lines]
        long = too_long(model, pairs)
        if long:
            k, why = next(iter(long.items()))
            raise ExtractionError(f"{len(long)} pairs are too long for the model (the first, line {lines[k] + 1} of "
                                  f"{args.src_text}: {why}); shorten or drop them")
        if not pairs:
            raise ExtractionError(f"{args.src_text}: no pair with two non-empty sides to adapt on")
        for k, pair in enumerate(pairs):  # fairseq's batch sampler asserts that every pair fits a batch
            n = max(len(pair.src), len(pair.tgt))
            if n > args.max_tokens:
                raise ExtractionError(f"--max-tokens {args.max_tokens} is smaller than line {lines[k] + 1} of "
                                      f"{args.src_text} ({len(pair.src)} source / {len(pair.tgt)} target pieces with "
                                      f"EOS): give --max-tokens {max(max(len(q.src), len(q.tgt)) for q in pairs)} or "
                                      "more")
        logger.info(f"adapting {args.path} on {len(pairs)} pairs of {args.src_text} / {args.tgt_text}: "
                    f"{args.updates} updates, lr {args.lr}, warm-up {args.warmup}, max tokens {args.max_tokens}")
        from omegaconf import OmegaConf

        if OmegaConf.is_config(state.get("cfg")):  # stored as fairseq stores it: a plain container
            state["cfg"] = OmegaConf.to_container(state["cfg"], resolve=True, enum_to_str=True)
        state["last_optimizer_state"] = None  # a fresh optimizer if someone trains on from here
        written = []

        def save(step, losses):
            if step not in save_at:
                return
            out = args.output.replace("{updates}", str(step))
            state["model"] = model.state_dict()
            state["adaptation"] = {"from": os.path.abspath(args.path), "src_text": os.path.abspath(args.src_text),
                                   "tgt_text": os.path.abspath(args.tgt_text), "pairs": len(pairs), "updates": step,
                                   "lr": args.lr, "warmup": args.warmup, "max_tokens": args.max_tokens,
                                   "seed": args.seed, "loss_first": losses[0], "loss_last": losses[-1]}
            atomic_torch_save(state, out)
            written.append(out)

        losses = adapt(model, task, criterion, pairs, save_at[-1], args.lr, args.warmup, args.max_tokens,
                       args.seed, progress=not args.no_progress, on_update=save)
    except ExtractionError as e:
        sys.stderr.write(f"{p.prog}: error: {e}\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"{p.prog}: error: {args.output}: cannot write: {e.strerror}\n")
        return 2
    sys.stderr.write(f"{p.prog}: {len(pairs)} pairs, {save_at[-1]} updates, training loss {losses[0]:.3f} -> "
                     f"{losses[-1]:.3f} (first -> last update); wrote {', '.join(written)}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
