"""Forced alignment of reference sentence pairs with a trained fairseq checkpoint (``hmm-nmt-align``).

For every sentence pair (F, E) of a binarized subset the model is run on the *reference* target (teacher
forcing), which gives a target-by-source matrix per sentence; each target token is linked to the source
token with the largest value (argmax per row):

``alignment``  (``transformer_dhmm``) the model's alignment distribution. Zero order: p(j | e_<i, f)
               (Eq. 8 of the paper). First order: the predicted distribution
               sum_j' p(j | j', e_<i, f) q_{i-1}(j'), where q_{i-1} is the forward (filtered) state
               p(b_{i-1} = j' | e_<i, f) over the reference prefix.
``posterior``  (``transformer_dhmm``) p(b_i = j | E, F), lexicon included (forward-backward; the HMM's
               "posterior alignment").
``attention``  (fairseq's plain ``transformer``) the cross-attention weights averaged over all heads of
               the chosen decoder layers (1-based ``--layers``; default the last two, i.e. layers 5 and 6 of
               a 6-layer model, the baseline of Wang et al. 2021 following Garg et al. 2019).

Row i of each matrix belongs to the reference token e_i (the decoder's query at step i predicts e_i from
e_<i). fairseq left-pads the source and right-pads the target, and appends EOS to both: matrices are cut
to the real tokens of each sentence (by the padding mask, so any padding side works), the argmax of a
target row is taken over the real source tokens (EOS excluded, as fairseq's ``--print-alignment`` does; with
``--null-eos`` a token whose argmax is EOS stays unaligned instead), and the target EOS row is dropped.
With ``--bpe subword_nmt`` (``@@``) or ``--bpe sentencepiece`` (``▁``) the piece links are mapped to
words by :mod:`alignment.subword` (two words are linked when any of their pieces are).

Output: word-level Pharaoh (``i-j``, 0-based source word i, target word j), one line per sentence, in
the original corpus order (fairseq sample ids). Sentences with an empty side give an empty line.

This is the only module of the package that imports fairseq (and torch).
"""
import argparse
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

import hmm_nmt  # noqa: F401  (registers the plugin; makes checkpoints loadable under torch >= 2.6)
import torch

from .io import atomic_write, format_pharaoh, read_tokens, AlignmentFormatError
from .subword import subword_to_word_links

__all__ = ["METHODS", "BPE_STYLES", "ExtractionError", "SentenceMatrices", "load_model", "model_type",
           "available_methods", "default_layers", "parse_layers", "load_subset", "batch_matrices",
           "extract_matrices", "argmax_links", "word_links", "align_subset", "main"]

METHODS = ("alignment", "posterior", "attention")
# fairseq's --bpe names -> alignment.subword styles
BPE_STYLES = {"none": None, "subword_nmt": "bpe", "sentencepiece": "spm"}


class ExtractionError(Exception):
    """A user error (bad path, subset, method or option); the CLI prints it and exits with status 2."""


@dataclass
class SentenceMatrices:
    """Matrices of one sentence pair, cut to its real tokens (EOS included, padding removed).

    ``src_tokens`` (J) and ``tgt_tokens`` (I) are the dictionary strings of the pieces (EOS last);
    ``matrices[name]`` is (I, J) for each computed method; ``transition`` is (I, J, J) p(j | j') of a
    first-order model at every target position (rows j', columns j), when it was asked for.
    """

    id: int
    src_tokens: List[str]
    tgt_tokens: List[str]
    matrices: Dict[str, np.ndarray] = field(default_factory=dict)
    transition: Optional[np.ndarray] = None


# ----------------------------------------------------------------------------------------------- model
def model_type(model) -> str:
    """``dhmm0``, ``dhmm1`` (transformer_dhmm of that alignment order), ``transformer`` or ``other``."""
    from fairseq.models.transformer import TransformerDecoderBase, TransformerModel

    from hmm_nmt.models.transformer_dhmm import TransformerDHMMModel

    if isinstance(model, TransformerDHMMModel):
        return "dhmm1" if model.decoder.first_order is not None else "dhmm0"
    if isinstance(model, TransformerModel) and isinstance(model.decoder, TransformerDecoderBase):
        return "transformer"
    return "other"


def available_methods(model) -> Tuple[str, ...]:
    kind = model_type(model)
    if kind.startswith("dhmm"):
        return ("alignment", "posterior")
    if kind == "transformer":
        return ("attention",)
    return ()


def default_layers(model) -> List[int]:
    """1-based decoder layers averaged by ``attention``: the last two (5 and 6 of 6), or the only one."""
    n = len(model.decoder.layers)
    return list(range(max(1, n - 1), n + 1))


def parse_layers(text: Optional[str], model) -> List[int]:
    """``"5,6"`` -> [5, 6], checked against the model's number of decoder layers; None -> default."""
    if text is None:
        return default_layers(model)
    n = len(model.decoder.layers)
    try:
        layers = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ExtractionError(f"--layers: expected comma-separated layer numbers like 5,6, got {text!r}") from None
    if not layers:
        raise ExtractionError(f"--layers: no layer given in {text!r}")
    bad = [k for k in layers if not 1 <= k <= n]
    if bad:
        raise ExtractionError(f"--layers: layer {bad[0]} out of range; the decoder has layers 1..{n} (1-based)")
    return sorted(set(layers))


def load_model(path: str, data: str, cpu: bool = False):
    """Load a checkpoint with its task pointed at the data-bin ``data``; returns ``(model, task)`` in eval mode."""
    if not os.path.isfile(path):
        raise ExtractionError(f"--path: checkpoint not found: {path}")
    if not os.path.isdir(data):
        raise ExtractionError(f"--data: data-bin directory not found: {data}")
    from fairseq import checkpoint_utils

    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    except Exception as e:  # corrupt file, dictionary of another size, unknown architecture, ...
        detail = " ".join(str(e).split())  # one line, even for a multi-line state_dict mismatch
        if len(detail) > 400:
            detail = detail[:400] + " ..."
        raise ExtractionError(f"cannot load checkpoint {path} with data {data}: {type(e).__name__}: {detail}") from None
    model = models[0]
    device = "cuda" if torch.cuda.is_available() and not cpu else "cpu"
    model.to(device).float().eval()
    return model, task


def load_subset(task, subset: str):
    """The task's dataset for ``subset`` (``test``, ``valid``, ``train``, ``test1`` ...)."""
    if subset in task.datasets:
        return task.dataset(subset)
    try:
        task.load_dataset(subset, combine=False, epoch=1)
    except (FileNotFoundError, KeyError) as e:
        msg = e.args[0] if e.args else str(e)
        raise ExtractionError(f"--subset {subset}: {msg}") from None
    dataset = task.dataset(subset)
    if getattr(dataset, "tgt", None) is None:
        raise ExtractionError(f"--subset {subset}: no target side; forced alignment needs reference pairs")
    return dataset


# ----------------------------------------------------------------------------------------------- matrices
@torch.no_grad()
def batch_matrices(model, sample, methods: Sequence[str], layers: Optional[Sequence[int]] = None,
                   transition: bool = False) -> Dict[str, torch.Tensor]:
    """Padded (B, I, J) matrices of one collated batch for each of ``methods``; ``transition``: (B, I, J, J).

    ``layers`` are 1-based decoder layers (``attention`` only).
    """
    kind = model_type(model)
    avail = available_methods(model)
    for m in methods:
        if m not in avail:
            raise ExtractionError(_unavailable(m, kind, avail))
    net = sample["net_input"]
    src, lengths, prev = net["src_tokens"], net["src_lengths"], net["prev_output_tokens"]
    out = {}
    if kind.startswith("dhmm"):
        if "alignment" in methods or transition:
            # full forward: extra["attn"][0] is p(j | e_<i, f) (order 0) or the filtered prediction (order 1)
            _, extra = model(src, lengths, prev)
            if "alignment" in methods:
                out["alignment"] = extra["attn"][0].float()
            if transition:
                if "log_trans" not in extra:
                    raise ExtractionError("transition matrices exist only for a first-order model (--alignment-order 1)")
                out["transition"] = extra["log_trans"].float().exp()
        if "posterior" in methods:
            out["posterior"] = model.alignment_posteriors(src, lengths, prev, sample["target"]).float()
    elif "attention" in methods:
        if transition:
            raise ExtractionError("transition matrices exist only for a first-order transformer_dhmm model")
        layers = list(layers) if layers is not None else default_layers(model)
        encoder_out = model.encoder(src, src_lengths=lengths)
        per_layer = []
        for layer in layers:
            # fairseq averages the heads of ``alignment_layer`` (0-based); all layers have the same
            # number of heads, so the mean of the layer means is the mean over all their heads
            _, extra = model.decoder(prev, encoder_out=encoder_out, features_only=True, alignment_layer=layer - 1)
            per_layer.append(extra["attn"][0].float())
        out["attention"] = torch.stack(per_layer).mean(0)
    return out


def _unavailable(method: str, kind: str, avail: Sequence[str]) -> str:
    names = {"dhmm0": "a zero-order transformer_dhmm", "dhmm1": "a first-order transformer_dhmm",
             "transformer": "a plain transformer", "other": "a model that is neither transformer nor transformer_dhmm"}
    need = "a transformer_dhmm checkpoint" if method in ("alignment", "posterior") else \
        "a plain fairseq transformer checkpoint"
    return (f"--method {method} needs {need}, but the checkpoint holds {names[kind]}"
            + (f" (available: {', '.join(avail)})" if avail else " (no method available)"))


def _sentence_ids(dataset, ids: Optional[Sequence[int]]) -> Tuple[List[int], List[int]]:
    """(ids to compute, ids skipped because a side is empty); sizes include the EOS fairseq appends."""
    n = len(dataset)
    if ids is None:
        ids = range(n)
        strict = False
    else:
        strict = True
    keep, empty = [], []
    for k in ids:
        if not 0 <= k < n:
            raise ExtractionError(f"sentence index {k} out of range: the subset has {n} sentences (0-based)")
        if dataset.src_sizes[k] <= 1 or dataset.tgt_sizes[k] <= 1:
            if strict:
                side = "source" if dataset.src_sizes[k] <= 1 else "target"
                raise ExtractionError(f"sentence {k} has an empty {side} side: nothing to align")
            empty.append(int(k))
        else:
            keep.append(int(k))
    return keep, empty


def _check_positions(model, dataset, ids: Sequence[int]) -> None:
    from fairseq import utils

    max_src, max_tgt = utils.resolve_max_positions(model.max_positions())
    for k in ids:
        if dataset.src_sizes[k] > max_src or dataset.tgt_sizes[k] > max_tgt:
            raise ExtractionError(
                f"sentence {k} ({dataset.src_sizes[k]} source / {dataset.tgt_sizes[k]} target tokens with EOS) is "
                f"longer than the model allows ({max_src} / {max_tgt} positions)")


def extract_matrices(model, task, subset: str, ids: Optional[Sequence[int]] = None,
                     methods: Sequence[str] = ("alignment",), layers: Optional[Sequence[int]] = None,
                     transition: bool = False, batch_size: Optional[int] = 32, max_tokens: Optional[int] = None,
                     progress: bool = False) -> Iterator[SentenceMatrices]:
    """Yield :class:`SentenceMatrices` for the sentences ``ids`` (sample ids = 0-based line numbers of the
    subset; default all sentences with two non-empty sides), in batch order (sort by ``.id`` if needed).

    Sentences are batched by length (``batch_size`` sentences and/or ``max_tokens`` tokens per batch);
    the result does not depend on the batching (tested).
    """
    dataset = load_subset(task, subset)
    keep, _ = _sentence_ids(dataset, ids)
    _check_positions(model, dataset, keep)
    avail = available_methods(model)
    for m in methods:
        if m not in avail:
            raise ExtractionError(_unavailable(m, model_type(model), avail))
    if not keep:
        return
    keep = np.asarray(keep, dtype=np.int64)
    order = keep[np.lexsort((dataset.tgt_sizes[keep], dataset.src_sizes[keep]))]
    # required_batch_size_multiple must stay 1: ve-fairseq 0.12.3's batch_by_size drops the last batch when
    # its size is not a multiple (fairseq-generate's default of 8 silently skips up to 7 sentences)
    batches = dataset.batch_by_size(order, max_tokens=max_tokens, max_sentences=batch_size,
                                    required_batch_size_multiple=1)
    assert sum(len(b) for b in batches) == len(keep), "batching lost sentences"
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    pad = src_dict.pad()
    device = next(model.parameters()).device
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(keep), desc=f"aligning {subset}", unit="sent", file=sys.stderr, mininterval=1.0)
    try:
        for batch in batches:
            sample = dataset.collater([dataset[int(k)] for k in batch])
            sample = _to(sample, device)
            mats = batch_matrices(model, sample, methods, layers, transition)
            src, tgt = sample["net_input"]["src_tokens"], sample["target"]
            for b, sid in enumerate(sample["id"].tolist()):
                cols = src[b].ne(pad).nonzero().squeeze(1)
                rows = tgt[b].ne(tgt_dict.pad()).nonzero().squeeze(1)
                item = SentenceMatrices(int(sid), [src_dict[t] for t in src[b, cols].tolist()],
                                        [tgt_dict[t] for t in tgt[b, rows].tolist()])
                for name, m in mats.items():
                    cut = m[b].index_select(0, rows).index_select(1, cols)
                    if name == "transition":
                        item.transition = cut.index_select(2, cols).cpu().numpy()
                    else:
                        item.matrices[name] = cut.cpu().numpy()
                yield item
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()


def _to(sample, device):
    from fairseq import utils

    return sample if device.type == "cpu" else utils.move_to_cuda(sample, device=device)


# ----------------------------------------------------------------------------------------------- links
def argmax_links(matrix: np.ndarray, src_eos: bool = True, tgt_eos: bool = True,
                 null_eos: bool = False) -> List[Tuple[int, int]]:
    """Piece-level links (source j, target i): the argmax source of every target row.

    With ``tgt_eos`` the last row (the target EOS) is dropped. With ``src_eos`` the last column (the source
    EOS) is not a link target: by default the argmax is taken over the other columns, so every target
    token is linked (fairseq's ``extract_hard_alignment`` convention, as in ``--print-alignment``); with
    ``null_eos`` a row whose argmax is the EOS column gets no link (EOS acting as the empty word).
    """
    matrix = np.asarray(matrix)
    n_rows, n_cols = matrix.shape
    rows = n_rows - 1 if tgt_eos else n_rows
    if rows <= 0 or n_cols - int(src_eos) <= 0:
        return []
    if src_eos and not null_eos:
        matrix = matrix[:, :-1]
    best = matrix.argmax(axis=1)  # ties: the first (leftmost) position, like torch.max
    return [(int(best[i]), i) for i in range(rows) if not (src_eos and best[i] == n_cols - 1)]


def word_links(links: Sequence[Tuple[int, int]], src_pieces: Sequence[str], tgt_pieces: Sequence[str],
               bpe: str = "none") -> List[Tuple[int, int]]:
    """Map piece links to word links (``bpe`` is a key of :data:`BPE_STYLES`); pieces exclude EOS."""
    style = BPE_STYLES[bpe]
    if style is None:
        return sorted(set(links))
    return subword_to_word_links(links, src_pieces, tgt_pieces, style=style, eos=None)


def _read_pieces(prefix: str, task, dataset) -> Tuple[List[List[str]], List[List[str]]]:
    """Segmented text PREFIX.SRC / PREFIX.TGT, checked against the binarized subset, line by line."""
    out = []
    for lang, sizes in ((task.cfg.source_lang, dataset.src_sizes), (task.cfg.target_lang, dataset.tgt_sizes)):
        path = f"{prefix}.{lang}"
        try:
            lines = read_tokens(path)
        except AlignmentFormatError as e:
            raise ExtractionError(f"--pieces: {e}") from None
        if len(lines) != len(sizes):
            raise ExtractionError(f"--pieces: {path} has {len(lines)} lines but the subset has {len(sizes)} sentences")
        for k, (toks, size) in enumerate(zip(lines, sizes)):
            if len(toks) + 1 != size:
                raise ExtractionError(f"--pieces: {path}:{k + 1}: {len(toks)} tokens but the binarized sentence "
                                      f"has {size - 1} (+ EOS): not the text this subset was made from")
        out.append(lines)
    return out[0], out[1]


def align_subset(model, task, subset: str, method: str, layers: Optional[Sequence[int]] = None,
                 bpe: str = "none", pieces: Optional[str] = None, null_eos: bool = False,
                 batch_size: Optional[int] = 32,
                 max_tokens: Optional[int] = None, progress: bool = False) -> Tuple[List[List[Tuple[int, int]]], dict]:
    """Word links ``[(i source word, j target word), ...]`` for every sentence of ``subset`` in corpus order,
    and statistics (``sentences``, ``empty``, ``links``, ``unk``)."""
    dataset = load_subset(task, subset)
    _, empty = _sentence_ids(dataset, None)
    text = _read_pieces(pieces, task, dataset) if pieces else None
    unk = (task.source_dictionary.unk_word, task.target_dictionary.unk_word)
    links: List[Optional[List[Tuple[int, int]]]] = [None] * len(dataset)
    n_unk = 0
    for item in extract_matrices(model, task, subset, None, (method,), layers, False, batch_size, max_tokens,
                                 progress):
        m = item.matrices[method]
        eos_s = item.src_tokens[-1] == task.source_dictionary.eos_word
        eos_t = item.tgt_tokens[-1] == task.target_dictionary.eos_word
        src = item.src_tokens[:-1] if eos_s else item.src_tokens
        tgt = item.tgt_tokens[:-1] if eos_t else item.tgt_tokens
        if text is not None:
            src, tgt = text[0][item.id], text[1][item.id]
        elif bpe != "none":
            n_unk += src.count(unk[0]) + tgt.count(unk[1])
        links[item.id] = word_links(argmax_links(m, eos_s, eos_t, null_eos), src, tgt, bpe)
    for k in empty:
        links[k] = []
    missing = [k for k, v in enumerate(links) if v is None]
    assert not missing, f"sentences {missing[:5]} were not aligned"
    stats = {"sentences": len(links), "empty": len(empty), "links": sum(len(v) for v in links), "unk": n_unk}
    return links, stats


# ----------------------------------------------------------------------------------------------- CLI
def setup_logging() -> None:
    """INFO on stderr for the command-line tools.

    Importing fairseq runs ``logging.basicConfig(level=DEBUG)`` (in fairseq.tasks.text_to_speech), which
    would flood stderr with matplotlib's font search; fairseq's own CLIs avoid it the same way.
    """
    logging.getLogger().setLevel(logging.INFO)
    # fairseq's self-attention passes a float causal mask with a bool padding mask (harmless, per batch)
    warnings.filterwarnings("ignore", message="Support for mismatched key_padding_mask and attn_mask")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hmm-nmt-align",
        description="Forced word alignment of the reference pairs of a binarized subset with a fairseq checkpoint "
                    "(argmax per target token), written as word-level Pharaoh (source-target, 0-based) in corpus order.")
    p.add_argument("--path", required=True, metavar="CKPT", help="checkpoint (.pt) of a transformer_dhmm or transformer")
    p.add_argument("--data", required=True, metavar="DATA-BIN", help="fairseq-preprocess output directory")
    p.add_argument("--subset", default="test", help="subset to align (default: test)")
    p.add_argument("--method", required=True, choices=METHODS,
                   help="alignment: argmax of the alignment distribution (transformer_dhmm); posterior: of "
                        "p(b_i=j|E,F) (transformer_dhmm); attention: of the cross-attention averaged over all heads "
                        "of --layers (plain transformer)")
    p.add_argument("--layers", metavar="L1,L2", help="attention: 1-based decoder layers to average "
                                                    "(default: the last two, e.g. 5,6 of 6)")
    p.add_argument("--bpe", choices=sorted(BPE_STYLES), default="none",
                   help="subword segmentation of the data, to map piece links back to words "
                        "(subword_nmt: '@@ ' continuation; sentencepiece: '\u2581' word start)")
    p.add_argument("--pieces", metavar="PREFIX",
                   help="segmented text the subset was binarized from (PREFIX.SRC_LANG, PREFIX.TGT_LANG): its "
                        "pieces replace the dictionary's for the word mapping (needed when pieces are <unk>)")
    p.add_argument("--null-eos", action="store_true",
                   help="a target token whose argmax is the source EOS stays unaligned (EOS as the empty word); "
                        "default: the argmax is over the real source tokens, so every target token is linked")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="sentences per batch (default 32)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="tokens per batch (default: no limit)")
    p.add_argument("--reverse", action="store_true",
                   help="write target-source pairs (j-i): for the reverse-direction model of a symmetrization")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is available")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-o", "--output", default="-", metavar="OUT", help="output file (default: stdout)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    setup_logging()
    try:
        for name in ("batch_size", "max_tokens"):
            v = getattr(args, name)
            if v is not None and v < 1:
                raise ExtractionError(f"--{name.replace('_', '-')} must be positive, got {v}")
        if args.output != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
            raise ExtractionError(f"-o: directory of {args.output} does not exist")
        if args.layers is not None and args.method != "attention":
            raise ExtractionError("--layers applies to --method attention only")
        model, task = load_model(args.path, args.data, args.cpu)
        avail = available_methods(model)
        if args.method not in avail:
            raise ExtractionError(_unavailable(args.method, model_type(model), avail))
        layers = parse_layers(args.layers, model) if args.method == "attention" else None
        links, stats = align_subset(model, task, args.subset, args.method, layers, args.bpe, args.pieces,
                                    args.null_eos, args.batch_size, args.max_tokens, progress=not args.no_progress)
        if stats["unk"]:
            sys.stderr.write(f"{p.prog}: warning: {stats['unk']} pieces are {task.source_dictionary.unk_word} in the "
                             "dictionary; their subword markers are lost, so word boundaries around them may be "
                             "wrong (give --pieces PREFIX with the segmented text)\n")
        text = "".join(format_pharaoh([(j, i) if args.reverse else (i, j) for i, j in sent]) + "\n" for sent in links)
        atomic_write(args.output, text)
    except ExtractionError as e:
        sys.stderr.write(f"{p.prog}: error: {e}\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"{p.prog}: error: {args.output}: cannot write: {e.strerror}\n")
        return 2
    desc = args.method + (f" (layers {','.join(map(str, layers))})" if layers else "")
    sys.stderr.write(f"{p.prog}: {stats['sentences']} sentences ({stats['empty']} with an empty side), "
                     f"{stats['links']} word links, method {desc}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
