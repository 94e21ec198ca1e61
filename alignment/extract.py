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

Raw text (``--src-text/--tgt-text`` with ``--bpe-codes``, ``--spm-model`` or ``--bpe none``): each word is
segmented on its own (:mod:`alignment.segment`), so the piece-to-word map is known before the pieces meet
the dictionary; they are binarized in memory with the checkpoint's dictionaries. Binarized input without
the text takes word boundaries from the dictionary's strings, where an ``<unk>`` piece has lost its marker:
it is taken to continue a word (:mod:`alignment.subword`), which never produces a link outside the sentence.

Links: ``--links`` chooses the decision on each matrix (:mod:`alignment.links`: argmax, mutual, union,
threshold:T); ``--rev-path`` adds the target-to-source model, merged before the decision (``prod``,
``mean``) or after it (the atools heuristics of :mod:`alignment.symmetrize`).

With the package's hub interface (:mod:`alignment.hub`), these are the only modules that import fairseq.
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
from .links import SOFT, decide, parse_decision, soft_combine
from .segment import load_segmenter
from .subword import subword_to_word_links, word_index
from .symmetrize import METHODS as HARD_SYMMETRIZATIONS, symmetrize

__all__ = ["METHODS", "BPE_STYLES", "ExtractionError", "SentenceMatrices", "LinkOptions", "EncodedPair", "load_model",
           "model_type", "available_methods", "default_layers", "parse_layers", "load_subset", "batch_matrices",
           "extract_matrices", "dataset_matrices", "argmax_links", "word_links", "sentence_word_links",
           "align_subset", "encode_pair", "pair_dataset", "too_long", "align_encoded", "read_text_pair",
           "align_text", "main"]

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


def _dictionary_dir(path: str, task_cfg) -> Tuple[str, dict]:
    """The folder with the checkpoint's ``dict.SRC.txt`` and ``dict.TGT.txt``: the checkpoint's own folder,
    else the data-bin it was trained on; and the overrides naming the languages when the checkpoint does not
    (fairseq then infers them from the training data-bin's file names)."""
    from fairseq.data.data_utils import infer_language_pair

    src, tgt = getattr(task_cfg, "source_lang", None), getattr(task_cfg, "target_lang", None)
    trained = str(getattr(task_cfg, "data", "") or "").split(os.pathsep)[0]
    tried = []
    for folder in (os.path.dirname(os.path.abspath(path)), trained):
        if not folder or not os.path.isdir(folder):
            continue
        tried.append(folder)
        s, t = (src, tgt) if src and tgt else infer_language_pair(folder)
        if s and t and all(os.path.isfile(os.path.join(folder, f"dict.{x}.txt")) for x in (s, t)):
            return folder, {"source_lang": s, "target_lang": t}
    names = f"dict.{src}.txt and dict.{tgt}.txt" if src and tgt else "the dictionaries"
    raise ExtractionError(f"no {names} next to the checkpoint or in its training data-bin "
                          f"({', '.join(tried) or 'not recorded'}): give --data DIR (a folder with the dictionaries)")


def load_model(path: str, data: Optional[str] = None, cpu: bool = False):
    """Load a checkpoint with its task pointed at ``data``; returns ``(model, task)`` in eval mode.

    ``data`` is a data-bin, or any folder with the dictionaries ``dict.SRC.txt`` / ``dict.TGT.txt``; None
    looks for them next to the checkpoint, then in the data-bin recorded in the checkpoint.
    """
    if not os.path.isfile(path):
        raise ExtractionError(f"--path: checkpoint not found: {path}")
    if data is not None and not os.path.isdir(data):
        raise ExtractionError(f"--data: data-bin directory not found: {data}")
    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import overwrite_args_by_name

    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        if state.get("cfg") is None:
            from fairseq.dataclass.utils import convert_namespace_to_omegaconf

            state["cfg"] = convert_namespace_to_omegaconf(state["args"])
            state["args"] = None
        overrides = {}
        if data is None:
            data, overrides = _dictionary_dir(path, state["cfg"].task)
        overwrite_args_by_name(state["cfg"], {"data": data, **overrides})
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    except ExtractionError:
        raise
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
    # the encoder runs once per batch, whatever the number of methods
    encoder_out = model.encoder(src, src_lengths=lengths)
    if kind.startswith("dhmm"):
        dec = model.decoder
        features = None
        if "posterior" in methods or ("alignment" in methods and kind == "dhmm0"):
            features = dec(prev, encoder_out=encoder_out, features_only=True)
        if "alignment" in methods and kind == "dhmm0":
            # p(j | e_<i, f) needs no lexicon: the decoder's full forward would only add the vocabulary mixture
            extra = features[1]
            out["alignment"] = dec.prune_alignment(extra["log_align"], extra["src_pad"])[0].float().exp()
        full_extra = None
        if "alignment" in methods and kind == "dhmm1":
            # order 1: the prediction sum_j' p(j | j') q(j') filters with the lexicon (full forward)
            _, full_extra = dec(prev, encoder_out=encoder_out)
            out["alignment"] = full_extra["attn"][0].float()
        if transition:
            extra = features[1] if features is not None else full_extra
            if extra is None:
                extra = dec(prev, encoder_out=encoder_out, features_only=True)[1]
            if "log_trans" not in extra:
                raise ExtractionError("transition matrices exist only for a first-order model (--alignment-order 1)")
            out["transition"] = extra["log_trans"].float().exp()
        if "posterior" in methods:
            out["posterior"] = model.alignment_posteriors(src, lengths, prev, sample["target"],
                                                          features=features).float()
    elif "attention" in methods:
        if transition:
            raise ExtractionError("transition matrices exist only for a first-order transformer_dhmm model")
        layers = list(layers) if layers is not None else default_layers(model)
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
    the result does not depend on the batching (tested). All ``methods`` share one encoder pass per batch.
    """
    dataset = load_subset(task, subset)
    keep, _ = _sentence_ids(dataset, ids)
    _check_positions(model, dataset, keep)
    yield from dataset_matrices(model, dataset, task.source_dictionary, task.target_dictionary, keep, methods,
                                layers, transition, batch_size, max_tokens, progress, f"aligning {subset}")


def dataset_matrices(model, dataset, src_dict, tgt_dict, keep: Sequence[int], methods: Sequence[str],
                     layers: Optional[Sequence[int]] = None, transition: bool = False,
                     batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False,
                     desc: str = "aligning") -> Iterator[SentenceMatrices]:
    """:func:`extract_matrices` on any fairseq pair dataset (binarized subset or text encoded in memory)."""
    avail = available_methods(model)
    for m in methods:
        if m not in avail:
            raise ExtractionError(_unavailable(m, model_type(model), avail))
    if len(keep) == 0:
        return
    keep = np.asarray(keep, dtype=np.int64)
    order = keep[np.lexsort((dataset.tgt_sizes[keep], dataset.src_sizes[keep]))]
    # required_batch_size_multiple must stay 1: ve-fairseq 0.12.3's batch_by_size drops the last batch when
    # its size is not a multiple (fairseq-generate's default of 8 silently skips up to 7 sentences)
    batches = dataset.batch_by_size(order, max_tokens=max_tokens, max_sentences=batch_size,
                                    required_batch_size_multiple=1)
    assert sum(len(b) for b in batches) == len(keep), "batching lost sentences"
    pad = src_dict.pad()
    device = next(model.parameters()).device
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(keep), desc=desc, unit="sent", file=sys.stderr, mininterval=1.0)
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
               bpe: str = "none", unk: Optional[str] = None) -> List[Tuple[int, int]]:
    """Map piece links to word links (``bpe`` is a key of :data:`BPE_STYLES`); pieces exclude EOS.

    Pieces equal to ``unk`` continue a word (:mod:`alignment.subword`), so no link leaves the sentence.
    """
    style = BPE_STYLES[bpe]
    if style is None:
        return sorted(set(links))
    return subword_to_word_links(links, src_pieces, tgt_pieces, style=style, eos=None, unk=unk)


@dataclass
class LinkOptions:
    """How links are read off the matrices (see :mod:`alignment.links`).

    ``decision``/``threshold``: ``argmax`` (default), ``mutual``, ``union`` or ``threshold`` with its T;
    ``null_eos``: argmax only, a target token whose argmax is the source EOS stays unaligned;
    ``symmetrize`` (with a reverse model): ``prod``/``mean`` (soft, before the decision) or an atools
    heuristic of :mod:`alignment.symmetrize` (after the decision, on word links).
    """

    decision: str = "argmax"
    threshold: float = 0.0
    null_eos: bool = False
    symmetrize: Optional[str] = None


def _directional(m: np.ndarray, opts: LinkOptions, eos_s: bool = True, eos_t: bool = True) -> List[Tuple[int, int]]:
    """Piece links (j, i) of one direction's (I [+ EOS], J [+ EOS]) matrix."""
    if opts.decision == "argmax":
        return argmax_links(m, eos_s, eos_t, opts.null_eos)
    return decide(m[: m.shape[0] - int(eos_t), : m.shape[1] - int(eos_s)], opts.decision, opts.threshold)


def sentence_word_links(fwd: np.ndarray, src_owner: Sequence[int], tgt_owner: Sequence[int], opts: LinkOptions,
                        rev: Optional[np.ndarray] = None, eos_s: bool = True,
                        eos_t: bool = True) -> List[Tuple[int, int]]:
    """Word links (i source word, j target word) of one sentence pair.

    ``fwd`` (I [+ EOS], J [+ EOS]) is the source-to-target model's matrix, ``rev`` (J [+ EOS], I [+ EOS]) the
    target-to-source model's on the same pieces; ``src_owner[j]``/``tgt_owner[i]`` is the word of piece j/i.
    """
    def to_words(links):
        return sorted({(src_owner[j], tgt_owner[i]) for j, i in links})

    if rev is None:
        return to_words(_directional(fwd, opts, eos_s, eos_t))
    n_src, n_tgt = len(src_owner), len(tgt_owner)
    if opts.symmetrize in SOFT:
        combined = soft_combine(fwd[:n_tgt, :n_src], rev[:n_src, :n_tgt], opts.symmetrize)
        return to_words(decide(combined, opts.decision, opts.threshold))
    f = to_words(_directional(fwd, opts, eos_s, eos_t))
    r = to_words([(j, i) for i, j in _directional(rev, opts, eos_t, eos_s)])
    return symmetrize(f, r, opts.symmetrize)


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


def _owners(pieces: Sequence[str], style: Optional[str], unk: Optional[str] = None) -> List[int]:
    return list(range(len(pieces))) if style is None else word_index(pieces, style, eos=None, unk=unk)


def _links_by_method(items: Iterator[SentenceMatrices], methods: Sequence[str], owners, opts: LinkOptions,
                     rev_items: Optional[Iterator[SentenceMatrices]] = None) -> Dict[str, Dict[int, list]]:
    """{method: {sentence id: word links}}; ``owners(item) -> (src_owner, tgt_owner, eos_s, eos_t)``.

    Without a reverse direction the matrices are consumed as they come; with one, the forward matrices of
    the real tokens are kept until the reverse model reaches the same sentence.
    """
    out: Dict[str, Dict[int, list]] = {m: {} for m in methods}
    if rev_items is None:
        for it in items:
            so, to, eos_s, eos_t = owners(it)
            for m in methods:
                out[m][it.id] = sentence_word_links(it.matrices[m], so, to, opts, None, eos_s, eos_t)
        return out
    fwd = {it.id: it for it in items}
    for r in rev_items:
        it = fwd.pop(r.id)
        so, to, eos_s, eos_t = owners(it)
        if len(r.src_tokens) != len(it.tgt_tokens) or len(r.tgt_tokens) != len(it.src_tokens):
            raise ExtractionError(
                f"sentence {r.id}: the reverse model sees {len(r.tgt_tokens)} source / {len(r.src_tokens)} target "
                f"tokens, the forward model {len(it.src_tokens)} / {len(it.tgt_tokens)}: not the same segmentation")
        for m in methods:
            out[m][r.id] = sentence_word_links(it.matrices[m], so, to, opts, r.matrices[m], eos_s, eos_t)
    assert not fwd, f"the reverse model skipped sentences {sorted(fwd)[:5]}"
    return out


def align_subset(model, task, subset: str, method, layers: Optional[Sequence[int]] = None,
                 bpe: str = "none", pieces: Optional[str] = None, null_eos: bool = False,
                 batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False,
                 opts: Optional[LinkOptions] = None, rev=None):
    """Word links ``[(i source word, j target word), ...]`` for every sentence of ``subset`` in corpus order,
    and statistics (``sentences``, ``empty``, ``links``, ``unk``).

    ``method`` is one method name (returns a list of links per sentence) or a sequence of them (returns
    ``{method: links}``; one encoder pass per batch for all). ``rev``: ``(model, task)`` of the
    target-to-source model on the same data-bin, for ``opts.symmetrize``.
    """
    methods = [method] if isinstance(method, str) else list(method)
    opts = opts or LinkOptions(null_eos=null_eos)
    dataset = load_subset(task, subset)
    _, empty = _sentence_ids(dataset, None)
    text = _read_pieces(pieces, task, dataset) if pieces else None
    sd, td = task.source_dictionary, task.target_dictionary
    style = BPE_STYLES[bpe]
    n_unk = [0]

    def owners(it):
        eos_s, eos_t = it.src_tokens[-1] == sd.eos_word, it.tgt_tokens[-1] == td.eos_word
        src = it.src_tokens[:-1] if eos_s else it.src_tokens
        tgt = it.tgt_tokens[:-1] if eos_t else it.tgt_tokens
        if text is not None:
            return _owners(text[0][it.id], style), _owners(text[1][it.id], style), eos_s, eos_t
        if style is not None:
            n_unk[0] += src.count(sd.unk_word) + tgt.count(td.unk_word)
        return _owners(src, style, sd.unk_word), _owners(tgt, style, td.unk_word), eos_s, eos_t

    items = extract_matrices(model, task, subset, None, methods, layers, False, batch_size, max_tokens, progress)
    rev_items = None
    if rev is not None:
        rev_items = extract_matrices(rev[0], rev[1], subset, None, methods, layers, False, batch_size, max_tokens,
                                     progress)
    by_method = _links_by_method(items, methods, owners, opts, rev_items)
    result = {}
    for m in methods:
        links = [by_method[m].get(k) for k in range(len(dataset))]
        for k in empty:
            links[k] = []
        missing = [k for k, v in enumerate(links) if v is None]
        assert not missing, f"sentences {missing[:5]} were not aligned"
        result[m] = links
    stats = {"sentences": len(dataset), "empty": len(empty), "links": sum(len(v) for v in result[methods[0]]),
             "unk": n_unk[0]}
    return (result[methods[0]] if isinstance(method, str) else result), stats


# ----------------------------------------------------------------------------------------------- raw text
@dataclass
class EncodedPair:
    """A word-tokenised sentence pair segmented and binarized for one model (EOS appended to both sides).

    ``src_owner[k]``/``tgt_owner[k]``: the word of piece k, from the segmenter (never from the dictionary).
    """

    src: torch.Tensor
    tgt: torch.Tensor
    src_owner: List[int]
    tgt_owner: List[int]
    unk: int = 0


def encode_pair(src_words: Sequence[str], tgt_words: Sequence[str], segmenter, src_dict, tgt_dict) -> EncodedPair:
    sp, so = segmenter.segment(src_words)
    tp, to = segmenter.segment(tgt_words)
    src = src_dict.encode_line(" ".join(sp), add_if_not_exist=False, append_eos=True).long()
    tgt = tgt_dict.encode_line(" ".join(tp), add_if_not_exist=False, append_eos=True).long()
    unk = int(src.eq(src_dict.unk()).sum()) + int(tgt.eq(tgt_dict.unk()).sum())
    return EncodedPair(src, tgt, so, to, unk)


def pair_dataset(pairs: Sequence[EncodedPair], task):
    """An in-memory fairseq ``LanguagePairDataset`` of the pairs, padded as the task pads."""
    from fairseq.data import LanguagePairDataset

    src_sizes = np.array([len(p.src) for p in pairs], dtype=np.int64)
    tgt_sizes = np.array([len(p.tgt) for p in pairs], dtype=np.int64)
    cfg = task.cfg
    return LanguagePairDataset([p.src for p in pairs], src_sizes, task.source_dictionary,
                               [p.tgt for p in pairs], tgt_sizes, task.target_dictionary,
                               left_pad_source=getattr(cfg, "left_pad_source", True),
                               left_pad_target=getattr(cfg, "left_pad_target", False), shuffle=False)


def too_long(model, pairs: Sequence[EncodedPair]) -> Dict[int, str]:
    """{index: reason} of the pairs longer than the model's positions."""
    from fairseq import utils

    max_src, max_tgt = utils.resolve_max_positions(model.max_positions())
    bad = {}
    for k, p in enumerate(pairs):
        if len(p.src) > max_src or len(p.tgt) > max_tgt:
            bad[k] = (f"{len(p.src)} source / {len(p.tgt)} target pieces with EOS, longer than the model allows "
                      f"({max_src} / {max_tgt} positions)")
    return bad


def align_encoded(model, task, pairs: Sequence[EncodedPair], keep: Sequence[int], methods: Sequence[str],
                  opts: Optional[LinkOptions] = None, layers: Optional[Sequence[int]] = None,
                  batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False,
                  rev=None, rev_pairs: Optional[Sequence[EncodedPair]] = None,
                  desc: str = "aligning") -> Dict[str, Dict[int, list]]:
    """{method: {index: word links}} for the pairs ``keep`` (indices into ``pairs``).

    ``rev = (model, task)`` and ``rev_pairs`` (the same sentences encoded target-to-source for it) add the
    reverse direction for ``opts.symmetrize``.
    """
    opts = opts or LinkOptions()
    items = dataset_matrices(model, pair_dataset(pairs, task), task.source_dictionary, task.target_dictionary,
                             keep, methods, layers, False, batch_size, max_tokens, progress, desc)
    rev_items = None
    if rev is not None:
        rm, rt = rev
        rev_items = dataset_matrices(rm, pair_dataset(rev_pairs, rt), rt.source_dictionary, rt.target_dictionary,
                                     keep, methods, layers, False, batch_size, max_tokens, progress, desc + " (reverse)")

    def owners(it):
        return pairs[it.id].src_owner, pairs[it.id].tgt_owner, True, True

    return _links_by_method(items, methods, owners, opts, rev_items)


def read_text_pair(src_path: str, tgt_path: str) -> Tuple[List[List[str]], List[List[str]]]:
    """Word-tokenised parallel text; a different number of lines is an error naming both files."""
    try:
        src, tgt = read_tokens(src_path), read_tokens(tgt_path)
    except AlignmentFormatError as e:
        raise ExtractionError(str(e)) from None
    except OSError as e:
        raise ExtractionError(f"{e.filename}: cannot read: {e.strerror}") from None
    if len(src) != len(tgt):
        raise ExtractionError(f"--src-text {src_path} has {len(src)} lines but --tgt-text {tgt_path} has {len(tgt)}: "
                              "the two sides must be line-parallel")
    return src, tgt


def align_text(model, task, src_lines: Sequence[Sequence[str]], tgt_lines: Sequence[Sequence[str]], segmenter,
               methods: Sequence[str], opts: Optional[LinkOptions] = None, layers: Optional[Sequence[int]] = None,
               batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False, rev=None):
    """Word links of word-tokenised sentence pairs, in input order.

    Returns ``({method: [links per line]}, stats, errors)``: a line with an empty side gets ``[]``; a line
    too long for a model gets ``[]`` and an entry ``(index, reason)`` in ``errors`` (the rest is aligned).
    """
    pairs = [encode_pair(s, t, segmenter, task.source_dictionary, task.target_dictionary)
             for s, t in zip(src_lines, tgt_lines)]
    bad = too_long(model, pairs)
    rev_pairs = None
    if rev is not None:
        rt = rev[1]
        rev_pairs = [encode_pair(t, s, segmenter, rt.source_dictionary, rt.target_dictionary)
                     for s, t in zip(src_lines, tgt_lines)]
        for k, why in too_long(rev[0], rev_pairs).items():
            bad.setdefault(k, "reverse model: " + why)
    empty = [k for k, (s, t) in enumerate(zip(src_lines, tgt_lines)) if not s or not t]
    keep = [k for k in range(len(pairs)) if k not in bad and (src_lines[k] and tgt_lines[k])]
    by_method = align_encoded(model, task, pairs, keep, methods, opts, layers, batch_size, max_tokens, progress,
                              rev, rev_pairs, desc="aligning")
    result = {m: [by_method[m].get(k, []) for k in range(len(pairs))] for m in methods}
    stats = {"sentences": len(pairs), "empty": len(empty), "links": sum(len(v) for v in result[methods[0]]),
             "unk": sum(p.unk for p in pairs), "too_long": len(bad)}
    return result, stats, sorted(bad.items())


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
        description="Forced word alignment of sentence pairs with a fairseq checkpoint, written as word-level "
                    "Pharaoh (source-target, 0-based) in input order. Input: the reference pairs of a binarized "
                    "subset (--data), or word-tokenised parallel text (--src-text/--tgt-text), segmented here.")
    p.add_argument("--path", required=True, metavar="CKPT", help="checkpoint (.pt) of a transformer_dhmm or transformer")
    p.add_argument("--data", metavar="DIR",
                   help="fairseq-preprocess output directory (binarized input); with --src-text: a folder with the "
                        "model's dict.SRC.txt/dict.TGT.txt (default: next to the checkpoint, else its training data-bin)")
    p.add_argument("--subset", default="test", help="binarized input: subset to align (default: test)")
    p.add_argument("--src-text", metavar="FILE", help="word-tokenised source text, one sentence per line")
    p.add_argument("--tgt-text", metavar="FILE", help="word-tokenised target text, line-parallel to --src-text")
    p.add_argument("--bpe-codes", metavar="CODES", help="text input: subword-nmt codes the model was trained with")
    p.add_argument("--spm-model", metavar="MODEL", help="text input: SentencePiece model the model was trained with")
    p.add_argument("--method", required=True, metavar="M[,M2]",
                   help="alignment: the alignment distribution (transformer_dhmm); posterior: p(b_i=j|E,F) "
                        "(transformer_dhmm); attention: the cross-attention averaged over all heads of --layers "
                        "(plain transformer). Several, comma-separated, share one encoder pass; -o then needs "
                        "{method} in its name")
    p.add_argument("--links", default="argmax", metavar="D",
                   help="argmax (default: each target word its best source word), mutual, union or threshold:T "
                        "(every link with probability > T; many-to-many)")
    p.add_argument("--rev-path", metavar="CKPT",
                   help="target-to-source checkpoint: align both directions and merge them with --symmetrize")
    p.add_argument("--rev-data", metavar="DIR", help="--data of the reverse checkpoint (default: as for --data)")
    p.add_argument("--symmetrize", choices=list(SOFT) + list(HARD_SYMMETRIZATIONS),
                   help="with --rev-path: prod or mean combine the two directions' matrices before --links (soft); "
                        "the atools heuristics merge the two directions' links after it (default: grow-diag, the "
                        "best on the toy dev set)")
    p.add_argument("--layers", metavar="L1,L2", help="attention: 1-based decoder layers to average "
                                                    "(default: the last two, e.g. 5,6 of 6)")
    p.add_argument("--bpe", choices=sorted(BPE_STYLES),
                   help="binarized input: subword segmentation of the data, to map piece links back to words "
                        "(subword_nmt: '@@ ' continuation; sentencepiece: '\u2581' word start); text input: "
                        "'none' when the words are the model's tokens")
    p.add_argument("--pieces", metavar="PREFIX",
                   help="binarized input: segmented text the subset was binarized from (PREFIX.SRC_LANG, "
                        "PREFIX.TGT_LANG): its pieces' markers give the word boundaries (without it, pieces that "
                        "are <unk> in the dictionary are taken to continue a word)")
    p.add_argument("--null-eos", action="store_true",
                   help="--links argmax: a target token whose argmax is the source EOS stays unaligned (EOS as the "
                        "empty word); default: the argmax is over the real source tokens")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="sentences per batch (default 32)")
    p.add_argument("--max-tokens", type=int, metavar="N", help="tokens per batch (default: no limit)")
    p.add_argument("--reverse", action="store_true",
                   help="write target-source pairs (j-i): for the reverse-direction model of a symmetrization")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is available")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-o", "--output", default="-", metavar="OUT", help="output file (default: stdout)")
    return p


def _check_args(args) -> Tuple[List[str], LinkOptions]:
    for name in ("batch_size", "max_tokens"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise ExtractionError(f"--{name.replace('_', '-')} must be positive, got {v}")
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if not methods or bad:
        raise ExtractionError(f"--method: unknown method {bad[0] if bad else args.method!r}; "
                              f"expected {', '.join(METHODS)} (comma-separated)")
    methods = list(dict.fromkeys(methods))
    if len(methods) > 1 and "{method}" not in args.output:
        raise ExtractionError("-o: with several methods the output name needs {method}, e.g. -o test.{method}.align")
    try:
        decision, threshold = parse_decision(args.links)
    except ValueError as e:
        raise ExtractionError(f"--links: {e}") from None
    if args.null_eos and decision != "argmax":
        raise ExtractionError("--null-eos applies to --links argmax only")
    if args.symmetrize and not args.rev_path:
        raise ExtractionError("--symmetrize needs --rev-path (the target-to-source checkpoint)")
    sym = (args.symmetrize or "grow-diag") if args.rev_path else None
    for out in {args.output.replace("{method}", m) for m in methods}:
        if out != "-" and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
            raise ExtractionError(f"-o: directory of {out} does not exist")
    if args.layers is not None and "attention" not in methods:
        raise ExtractionError("--layers applies to --method attention only")
    text = args.src_text is not None or args.tgt_text is not None
    if text:
        if args.src_text is None or args.tgt_text is None:
            raise ExtractionError("--src-text and --tgt-text go together")
        if args.pieces:
            raise ExtractionError("--pieces is for binarized input; with --src-text the pieces are made here")
        given = [n for n, v in (("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model),
                                ("--bpe none", args.bpe == "none")) if v]
        if len(given) != 1:
            raise ExtractionError("text input needs exactly one of --bpe-codes CODES, --spm-model MODEL or --bpe none"
                                  + (f" (got {' and '.join(given)})" if given else ""))
        need = {"subword_nmt": ("--bpe-codes", args.bpe_codes), "sentencepiece": ("--spm-model", args.spm_model)}
        if args.bpe in need and not need[args.bpe][1]:
            raise ExtractionError(f"--bpe {args.bpe} with text input needs {need[args.bpe][0]} (the model's segmentation)")
        for flag, path in (("--src-text", args.src_text), ("--tgt-text", args.tgt_text),
                           ("--bpe-codes", args.bpe_codes), ("--spm-model", args.spm_model)):
            if path is not None and not os.path.isfile(path):
                raise ExtractionError(f"{flag}: file not found: {path}")
    else:
        if args.data is None:
            raise ExtractionError("give --data DATA-BIN (binarized input) or --src-text/--tgt-text (text input)")
        if args.bpe_codes or args.spm_model:
            raise ExtractionError("--bpe-codes/--spm-model are for text input (--src-text/--tgt-text); binarized "
                                  "input takes --bpe subword_nmt|sentencepiece")
    return methods, LinkOptions(decision, threshold, args.null_eos, sym)


def main(argv: Optional[List[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    setup_logging()
    line_errors: List[Tuple[int, str]] = []
    try:
        methods, opts = _check_args(args)
        text = args.src_text is not None
        if text:  # fail on the text before spending time on the model
            src_lines, tgt_lines = read_text_pair(args.src_text, args.tgt_text)
            try:
                segmenter = load_segmenter(args.bpe_codes, args.spm_model)
            except (OSError, ValueError) as e:
                raise ExtractionError(f"{'--bpe-codes' if args.bpe_codes else '--spm-model'}: cannot load: {e}") from None
        model, task = load_model(args.path, args.data, args.cpu)
        for m in methods:
            avail = available_methods(model)
            if m not in avail:
                raise ExtractionError(_unavailable(m, model_type(model), avail))
        rev = None
        if args.rev_path:
            rev_data = args.rev_data or (args.data if not text else None)
            rev = load_model(args.rev_path, rev_data, args.cpu)
            for m in methods:
                if m not in available_methods(rev[0]):
                    raise ExtractionError("--rev-path: " + _unavailable(m, model_type(rev[0]), available_methods(rev[0])))
        layers = parse_layers(args.layers, model) if "attention" in methods else None
        progress = not args.no_progress
        if text:
            links, stats, line_errors = align_text(model, task, src_lines, tgt_lines, segmenter, methods, opts, layers,
                                                   args.batch_size, args.max_tokens, progress, rev)
        else:
            links, stats = align_subset(model, task, args.subset, methods, layers, args.bpe or "none", args.pieces,
                                        args.null_eos, args.batch_size, args.max_tokens, progress, opts, rev)
            if stats["unk"]:
                sys.stderr.write(f"{p.prog}: warning: {stats['unk']} pieces are {task.source_dictionary.unk_word} in "
                                 "the dictionary; their subword markers are lost, so each was taken to continue a "
                                 "word (links stay inside the sentence, but a word may be merged with its "
                                 "neighbour): give --pieces PREFIX with the segmented text, or align the text with "
                                 "--src-text/--tgt-text\n")
        for m in methods:
            out = "".join(format_pharaoh([(j, i) if args.reverse else (i, j) for i, j in sent]) + "\n"
                          for sent in links[m])
            atomic_write(args.output.replace("{method}", m), out)
    except ExtractionError as e:
        sys.stderr.write(f"{p.prog}: error: {e}\n")
        return 2
    except OSError as e:
        sys.stderr.write(f"{p.prog}: error: {args.output}: cannot write: {e.strerror}\n")
        return 2
    for k, why in line_errors:
        sys.stderr.write(f"{p.prog}: error: {args.src_text}:{k + 1}: {why}; its output line is empty\n")
    desc = ",".join(methods) + (f" (layers {','.join(map(str, layers))})" if layers else "")
    if opts.symmetrize:
        desc += f", both directions merged by {opts.symmetrize}"
    sys.stderr.write(f"{p.prog}: {stats['sentences']} sentences ({stats['empty']} with an empty side"
                     + (f", {len(line_errors)} too long, left empty" if line_errors else "")
                     + f"), {stats['links']} word links, method {desc}, links {args.links}\n")
    return 1 if line_errors else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
