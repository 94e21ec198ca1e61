"""Word alignment from Python: a fairseq hub interface with ``align`` and ``translate(..., alignment=True)``.

::

    from hmm_nmt.aligner.hub import from_pretrained           # any transformer_dhmm or plain transformer checkpoint
    hub = from_pretrained("checkpoints", checkpoint_file="checkpoint_best.pt", data_name_or_path="data-bin",
                          bpe="subword_nmt", bpe_codes="codes")
    hub.align(["das haus ist klein"], ["the house is small"])          # method: posterior (dhmm), attention
    hub.translate(["das haus ist klein"], beam=5, alignment=True)      # [(translation, WordAlignment)]
    hub.translate(["das haus ist klein"], beam=5, eos_penalty=2.0)     # longer output (--eos-penalty)

``TransformerDHMMModel.from_pretrained`` returns the same interface.  Sentences are split into words by the
hub's tokenizer (``--tokenizer``, e.g. moses) when the checkpoint has one, else by whitespace; each word
is segmented on its own by the hub's BPE (``subword_nmt``, ``sentencepiece`` or none), so the piece-to-word
map is exact even where a piece is ``<unk>``.  Links are ``(i, j)``: source word i, target word j, 0-based,
into :attr:`WordAlignment.source` / :attr:`WordAlignment.target`.

The hub lives in the model layer (``hmm_nmt.aligner``), below ``alignment``, so that the models can return it
without importing the tools built on them; ``hmm_nmt.aligner.hub`` re-exports it. It uses only the model layer's
API (:mod:`hmm_nmt.aligner.matrices` dispatches to a model's ``alignment_matrices`` or to the attention path)
and the pure helpers of :mod:`hmm_nmt_align.base`.
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import torch
from fairseq.hub_utils import GeneratorHubInterface

from hmm_nmt.aligner import matrices as mx
from hmm_nmt.aligner.pairs import EncodedPair, align_encoded, encode_pair, too_long
from hmm_nmt_align.base.links import LinkOptions, parse_decision
from hmm_nmt_align.base.pharaoh import format_pharaoh
from hmm_nmt_align.base.segment import Segmenter
from hmm_nmt_align.base.subword import word_index
from hmm_nmt_align.base.subword import words as subword_words

__all__ = ["WordAlignment", "AlignmentHubInterface", "from_pretrained"]

# fairseq --bpe names whose pieces map back to words, and the hmm_nmt_align.base.subword style of their pieces
_STYLES = {None: None, "subword_nmt": "bpe", "sentencepiece": "spm"}


@dataclass
class WordAlignment:
    source: List[str]
    target: List[str]
    links: List[Tuple[int, int]]

    @property
    def pharaoh(self) -> str:
        """``"0-0 1-2 ..."``, the line ``hmm-nmt-align`` would write."""
        return format_pharaoh(self.links)


class AlignmentHubInterface(GeneratorHubInterface):
    """:class:`fairseq.hub_utils.GeneratorHubInterface` plus word alignment (see the module docstring)."""

    # ------------------------------------------------------------------ words and pieces
    def _bpe_name(self) -> Optional[str]:
        if self.bpe is None:
            return None
        name = getattr(self.cfg.bpe, "_name", None) or type(self.bpe).__name__
        if name not in _STYLES:
            raise ValueError(f"word alignment maps pieces to words for --bpe subword_nmt, sentencepiece or none, "
                             f"not {name!r}")
        return name

    def words(self, sentence: str) -> List[str]:
        """The words of a sentence: the hub's tokenizer output, split on whitespace."""
        return self.tokenize(sentence).split()

    def segmenter(self) -> Segmenter:
        name = self._bpe_name()
        if name is None:
            return Segmenter(None, "none")
        return Segmenter(lambda w: self.bpe.encode(w).split(), name)

    def default_method(self) -> str:
        avail = mx.available_methods(self.models[0])
        if not avail:
            raise ValueError("word alignment needs a transformer_dhmm or a plain fairseq transformer checkpoint")
        return "posterior" if "posterior" in avail else avail[0]

    def _options(self, links: str, symmetrize: Optional[str], reverse, null_eos: bool = False,
                 pool: str = "pieces") -> LinkOptions:
        decision, threshold = parse_decision(links)
        if symmetrize and reverse is None:
            raise ValueError("symmetrize needs reverse=<hub of the target-to-source model>")
        if null_eos and decision != "argmax":
            raise ValueError("null_eos applies to links='argmax' only")
        return LinkOptions(decision, threshold, null_eos,
                           (symmetrize or "grow-diag") if reverse is not None else None, pool)

    def _run(self, pairs, method, opts, layers, batch_size, reverse=None, rev_pairs=None):
        model = self.models[0]
        avail = mx.available_methods(model)
        if method not in avail:
            raise ValueError(mx.unavailable(method, mx.model_type(model), avail).replace("--method ", "method "))
        layers = mx.parse_layers(layers, model) if method == "attention" else None
        bad = too_long(model, pairs)
        if bad:
            k, why = next(iter(bad.items()))
            raise ValueError(f"sentence {k}: {why}")
        keep = [k for k, p in enumerate(pairs) if len(p.src) > 1 and len(p.tgt) > 1]
        rev = None
        if reverse is not None:
            rev = (reverse.models[0], reverse.task)
        models = [model] + ([rev[0]] if rev else [])
        modes = [m.training for m in models]
        try:
            for m in models:
                m.eval()
            out = align_encoded(model, self.task, pairs, keep, [method], opts, layers, batch_size, None, False,
                                   rev, rev_pairs)[method]
        finally:
            for m, mode in zip(models, modes):
                m.train(mode)
        return [out.get(k, []) for k in range(len(pairs))]

    # ------------------------------------------------------------------ public
    def align(self, src_sentences: Union[str, Sequence[str]], tgt_sentences: Union[str, Sequence[str]],
              method: Optional[str] = None, links: str = "argmax", layers: Optional[str] = None,
              reverse: Optional["AlignmentHubInterface"] = None, symmetrize: Optional[str] = None,
              batch_size: int = 32, null_eos: bool = False,
              pool: str = "pieces") -> Union[WordAlignment, List[WordAlignment]]:
        """Forced word alignment of sentence pairs (the target is given, not generated).

        ``method``: ``posterior`` (default for a transformer_dhmm), ``alignment``, or ``attention`` (plain
        transformer, the mean over the heads of ``layers``, "5,6"; default the last two decoder layers).
        ``links``: ``argmax``, ``mutual``, ``union`` or ``threshold:T``. ``reverse``: the hub of the
        target-to-source model, merged by ``symmetrize`` (``prod``, ``mean`` or an atools heuristic such
        as ``grow-diag``; default ``grow-diag``, chosen on the toy dev set). ``null_eos`` (argmax): a target
        word whose best source position is the EOS stays unaligned (the EOS attention sink of attention
        models); by default the argmax is over the real source words. ``pool``: ``pieces`` (default: links
        on the subword pieces, two words linked when any of their pieces are) or ``words`` (each matrix pooled
        to words first, :func:`hmm_nmt_align.base.links.pool_words`; not with ``null_eos``). A single pair of strings
        gives a single result.
        """
        if isinstance(src_sentences, str) != isinstance(tgt_sentences, str):
            raise TypeError("give two strings or two lists of strings")
        if isinstance(src_sentences, str):
            return self.align([src_sentences], [tgt_sentences], method, links, layers, reverse, symmetrize,
                              batch_size, null_eos, pool)[0]
        if len(src_sentences) != len(tgt_sentences):
            raise ValueError(f"{len(src_sentences)} source sentences but {len(tgt_sentences)} target sentences")
        method = method or self.default_method()
        opts = self._options(links, symmetrize, reverse, null_eos, pool)
        seg = self.segmenter()
        src_words = [self.words(s) for s in src_sentences]
        tgt_words = [self.words(t) for t in tgt_sentences]
        pairs = [encode_pair(s, t, seg, self.src_dict, self.tgt_dict) for s, t in zip(src_words, tgt_words)]
        rev_pairs = None
        if reverse is not None:
            rev_pairs = [encode_pair(t, s, seg, reverse.src_dict, reverse.tgt_dict)
                         for s, t in zip(src_words, tgt_words)]
        found = self._run(pairs, method, opts, layers, batch_size, reverse, rev_pairs)
        return [WordAlignment(s, t, a) for s, t, a in zip(src_words, tgt_words, found)]

    def generate(self, tokenized_sentences, beam: int = 5, verbose: bool = False, eos_penalty: float = 0.0,
                 **kwargs):
        """fairseq's ``generate`` (under ``translate`` and ``sample``) plus ``eos_penalty``: δ nats off
        log p(</s>) at every search step, as ``--task translation_eos_penalty --eos-penalty δ`` does on the
        command line (hmm_nmt/tasks/translation_eos_penalty.py); 0 is the stock search."""
        if not eos_penalty:
            return super().generate(tokenized_sentences, beam, verbose, **kwargs)
        from hmm_nmt.tasks.translation_eos_penalty import add_eos_penalty

        build = self.task.build_generator

        def build_generator(models, args, **kw):  # fairseq's generate builds its generator on every call
            gen = build(models, args, **kw)
            add_eos_penalty(gen.model, self.tgt_dict.eos(), float(eos_penalty))
            return gen

        self.task.build_generator = build_generator
        try:
            return super().generate(tokenized_sentences, beam, verbose, **kwargs)
        finally:
            del self.task.build_generator  # the instance attribute; the task's own method again

    def translate(self, sentences: Union[str, Sequence[str]], beam: int = 5, verbose: bool = False,
                  alignment: bool = False, method: Optional[str] = None, links: str = "argmax",
                  layers: Optional[str] = None, **kwargs):
        """fairseq's ``translate``; with ``alignment=True`` each result is ``(translation, WordAlignment)``.

        The alignment is the forced alignment (``method``, ``links`` as in :meth:`align`) of the source with
        the best hypothesis *as generated* (its own pieces, so no re-segmentation); ``WordAlignment.target``
        are the hypothesis' words before detokenization, which the link indices refer to.
        """
        if not alignment:
            return super().translate(sentences, beam, verbose, **kwargs)
        if isinstance(sentences, str):
            return self.translate([sentences], beam, verbose, alignment, method, links, layers, **kwargs)[0]
        method = method or self.default_method()
        opts = self._options(links, None, None)
        seg = self.segmenter()
        style = _STYLES[self._bpe_name()]
        src_words = [self.words(s) for s in sentences]
        pairs = []
        for words in src_words:
            sp, so = seg.segment(words)
            pairs.append(EncodedPair(self.src_dict.encode_line(" ".join(sp), add_if_not_exist=False).long(),
                                        None, so, []))
        hypos = self.generate([p.src for p in pairs], beam, verbose, **kwargs)
        out_text, tgt_words = [], []
        for p, h in zip(pairs, hypos):
            tokens = h[0]["tokens"].cpu()
            pieces = [self.tgt_dict[t] for t in tokens.tolist()]
            if pieces and pieces[-1] == self.tgt_dict.eos_word:
                pieces = pieces[:-1]
            else:
                tokens = torch.cat([tokens, tokens.new_tensor([self.tgt_dict.eos()])])
            p.tgt = tokens
            p.tgt_owner = (list(range(len(pieces))) if style is None
                           else word_index(pieces, style, eos=None, unk=self.tgt_dict.unk_word))
            words = (pieces if style is None
                     else subword_words(pieces, style, eos=None, unk=self.tgt_dict.unk_word))
            tgt_words.append(words)
            out_text.append(self.decode(h[0]["tokens"]))
        found = self._run(pairs, method, opts, layers, 32)
        return [(t, WordAlignment(s, w, a)) for t, s, w, a in zip(out_text, src_words, tgt_words, found)]


def from_pretrained(model_name_or_path: str, checkpoint_file: str = "model.pt", data_name_or_path: str = ".",
                    **kwargs) -> AlignmentHubInterface:
    """fairseq's ``from_pretrained`` for any translation checkpoint (stock transformer included), returning
    an :class:`AlignmentHubInterface`. Keyword arguments are fairseq's (``bpe``, ``bpe_codes``,
    ``sentencepiece_model``, ``tokenizer``, ``source_lang`` ...)."""
    from fairseq import hub_utils  # hmm_nmt is imported: transformer_dhmm is registered, checkpoints load

    x = hub_utils.from_pretrained(model_name_or_path, checkpoint_file, data_name_or_path, **kwargs)
    return AlignmentHubInterface(x["args"], x["task"], x["models"])
