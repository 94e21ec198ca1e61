"""Alignment matrices of reference pairs from any translation model, batched over a fairseq pair dataset.

The model layer computes the matrices: a model with an ``alignment_matrices`` method (the direct HMM,
:meth:`hmm_nmt.models.transformer_dhmm.TransformerDHMMModel.alignment_matrices`: ``alignment``, ``posterior``)
or, for a stock fairseq transformer, :func:`hmm_nmt.aligner.attention.attention_matrices`
(``attention``). This module dispatches on that method, never on a model class, batches a dataset by length,
cuts each sentence's matrices to its real tokens (:class:`SentenceMatrices`), and reads word links off them
(:func:`links_by_method`, with :mod:`hmm_nmt_align.base.links`).

``alignment`` distribution: zero order p(j | e_<i, f) (Eq. 8 of the paper); first order the predicted
distribution sum_j' p(j | j', e_<i, f) q_{i-1}(j'), q_{i-1} the forward (filtered) state over the reference
prefix. ``posterior``: p(b_i = j | E, F), lexicon included (forward-backward). ``attention``: the
cross-attention weights averaged over all heads of the chosen decoder layers (1-based; default the last two,
the baseline of Wang et al. 2021 following Garg et al. 2019). Row i belongs to the reference token e_i.
"""
import sys
from dataclasses import dataclass, field, replace
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from hmm_nmt.aligner.attention import attention_matrices, default_layers, is_attention_model
from hmm_nmt_align.base.console import ExtractionError  # noqa: F401  (defined below the model layer: see there)
from hmm_nmt_align.base.links import METHODS, LinkOptions, scored_word_links, sentence_word_links

__all__ = ["METHODS", "ExtractionError", "SentenceMatrices", "model_type", "available_methods", "unavailable",
           "default_layers", "parse_layers", "batch_matrices", "dataset_matrices", "links_by_method"]

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
    own = getattr(model, "alignment_model_type", None)
    if own is not None:
        return own()
    if is_attention_model(model):
        return "transformer"
    return "other"


def available_methods(model) -> Tuple[str, ...]:
    own = getattr(model, "ALIGNMENT_METHODS", None)
    if own is not None and callable(getattr(model, "alignment_matrices", None)):
        return tuple(own)
    if is_attention_model(model):
        return ("attention",)
    return ()


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


def unavailable(method: str, kind: str, avail: Sequence[str]) -> str:
    names = {"dhmm0": "a zero-order transformer_dhmm", "dhmm1": "a first-order transformer_dhmm",
             "transformer": "a plain transformer", "other": "a model that is neither transformer nor transformer_dhmm"}
    need = "a transformer_dhmm checkpoint" if method in ("alignment", "posterior") else \
        "a plain fairseq transformer checkpoint"
    return (f"--method {method} needs {need}, but the checkpoint holds {names[kind]}"
            + (f" (available: {', '.join(avail)})" if avail else " (no method available)"))


# ----------------------------------------------------------------------------------------------- matrices
@torch.no_grad()
def batch_matrices(model, sample, methods: Sequence[str], layers: Optional[Sequence[int]] = None,
                   transition: bool = False) -> Dict[str, torch.Tensor]:
    """Padded (B, I, J) matrices of one collated batch for each of ``methods``; ``transition``: (B, I, J, J).

    ``layers`` are 1-based decoder layers (``attention`` only). All methods share one encoder pass.
    """
    kind = model_type(model)
    avail = available_methods(model)
    for m in methods:
        if m not in avail:
            raise ExtractionError(unavailable(m, kind, avail))
    net = sample["net_input"]
    src, lengths, prev = net["src_tokens"], net["src_lengths"], net["prev_output_tokens"]
    own = getattr(model, "alignment_matrices", None)
    if own is not None and avail:
        if transition and kind != "dhmm1":
            raise ExtractionError("transition matrices exist only for a first-order model (--alignment-order 1)")
        return own(src, lengths, prev, sample["target"], methods=methods, transition=transition)
    if "attention" in methods:
        if transition:
            raise ExtractionError("transition matrices exist only for a first-order transformer_dhmm model")
        return {"attention": attention_matrices(model, src, lengths, prev, layers)}
    return {}


def dataset_matrices(model, dataset, src_dict, tgt_dict, keep: Sequence[int], methods: Sequence[str],
                     layers: Optional[Sequence[int]] = None, transition: bool = False,
                     batch_size: Optional[int] = 32, max_tokens: Optional[int] = None, progress: bool = False,
                     desc: str = "aligning") -> Iterator[SentenceMatrices]:
    """:func:`extract_matrices` on any fairseq pair dataset (binarized subset or text encoded in memory)."""
    avail = available_methods(model)
    for m in methods:
        if m not in avail:
            raise ExtractionError(unavailable(m, model_type(model), avail))
    if len(keep) == 0:
        return
    keep = np.asarray(keep, dtype=np.int64)
    if max_tokens is not None:  # fairseq batches by max(source, target) tokens and asserts each pair fits
        sizes = np.maximum(dataset.src_sizes[keep], dataset.tgt_sizes[keep])
        over = np.nonzero(sizes > max_tokens)[0]
        if len(over):
            k = int(keep[over[0]])
            raise ExtractionError(f"--max-tokens {max_tokens} is smaller than sentence pair {k} (0-based; line {k + 1} "
                                  f"of the input: {dataset.src_sizes[k]} source / {dataset.tgt_sizes[k]} target tokens "
                                  f"with EOS): give --max-tokens {int(sizes.max())} or more")
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


def _links(fwd, so, to, opts: LinkOptions, rev, eos_s: bool, eos_t: bool, scores: bool) -> list:
    if scores:
        return scored_word_links(fwd, so, to, opts, rev, eos_s, eos_t)
    return sentence_word_links(fwd, so, to, opts, rev, eos_s, eos_t)


def links_by_method(items: Iterator[SentenceMatrices], methods: Sequence[str], owners, opts: LinkOptions,
                    rev_items: Optional[Iterator[SentenceMatrices]] = None,
                    scores: bool = False, directional: bool = False) -> Dict[str, Dict[int, list]]:
    """{method: {sentence id: word links}}; ``owners(item) -> (src_owner, tgt_owner, eos_s, eos_t)``.

    With ``scores`` each link is ``(source word, target word, confidence)`` (:func:`link_scores`).
    ``directional`` (with ``rev_items``) adds ``"fwd:" + method`` and ``"rev:" + method``: each direction's
    own links (``opts`` without the merge; the reverse ones written source-target), from the same matrices.

    Without a reverse direction the matrices are consumed as they come; with one, the forward matrices of
    the real tokens are kept until the reverse model reaches the same sentence.
    """
    out: Dict[str, Dict[int, list]] = {m: {} for m in methods}
    if rev_items is None:
        for it in items:
            so, to, eos_s, eos_t = owners(it)
            for m in methods:
                out[m][it.id] = _links(it.matrices[m], so, to, opts, None, eos_s, eos_t, scores)
        return out
    one = replace(opts, symmetrize=None)
    if directional:
        out.update({f"{d}:{m}": {} for d in ("fwd", "rev") for m in methods})
    fwd = {it.id: it for it in items}
    for r in rev_items:
        it = fwd.pop(r.id)
        so, to, eos_s, eos_t = owners(it)
        if len(r.src_tokens) != len(it.tgt_tokens) or len(r.tgt_tokens) != len(it.src_tokens):
            raise ExtractionError(
                f"sentence {r.id}: the reverse model sees {len(r.tgt_tokens)} source / {len(r.src_tokens)} target "
                f"tokens, the forward model {len(it.src_tokens)} / {len(it.tgt_tokens)}: not the same segmentation")
        for m in methods:
            out[m][r.id] = _links(it.matrices[m], so, to, opts, r.matrices[m], eos_s, eos_t, scores)
            if directional:
                out[f"fwd:{m}"][r.id] = sentence_word_links(it.matrices[m], so, to, one, None, eos_s, eos_t)
                out[f"rev:{m}"][r.id] = [(s, t) for t, s in
                                         sentence_word_links(r.matrices[m], to, so, one, None, eos_t, eos_s)]
    assert not fwd, f"the reverse model skipped sentences {sorted(fwd)[:5]}"
    return out


