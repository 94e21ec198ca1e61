#!/usr/bin/env python
"""Bring the Hansards training text and the HLT-NAACL 2003 gold text to one form.

    python examples/hansards/normalize.py train --lang fr [--lines N] IN(.gz) OUT
    python examples/hansards/normalize.py gold --local ../shared/data/hansards_enfr --out DIR

The training copy (``isi_train.{e,f}.gz``) is untokenized, accent-stripped ASCII with Latin-1-era upper
case (``PREMIERE``), French contractions kept (``du``, ``des``, ``au``, ``aux``) and elisions attached
(``l'insuline``); the gold text is tokenized, accented, and decomposed (``de le``, ``à les``, ``le
insuline``, ``ne est``, ``se il``, ``aujourd' hui``, ``lui - même``, ``a il`` for ``a-t-il``; English
``do not``, ``cannot``). What the gold does was read off ``gold/enfr.src-tgt`` (no ``du``/``des``/``aux``
and one ``au`` in ``au - dessus``; every elision expanded, ``l'`` always to ``le``; no ``n't``).

* **training side**: sacremoses tokenization (``aggressive_dash_splits``, the ``@-@`` written as the gold's
  ``-``; English ``X n't`` expanded first), then the gold's decompositions, then lower case and accents
  stripped. Token counts change here.
* **gold side**: token by token (lower case, accents stripped, ``«``/``»`` as ``"``, ``-LRB-``/``-RRB-`` as
  brackets), so every word index,
  and so every gold link, stays as it is (tested on the real files).

``gold`` writes ``DIR/{test,trial}.{en,fr}`` (normalized words, English first as the gold links are) and
``DIR/{test,trial}.gold``: Pharaoh, **1-based**, ``i-j`` Sure / ``ipj`` Possible, i English, j French.
``test.gold`` is ``gold/enfr.gold`` copied unchanged; ``trial.gold`` is ``gold/trial/trial.align`` (0-based,
French first, ``f-e-P``) rewritten in that form, so both go to ``hmm-nmt-aer --gold-one-based``.
"""
import argparse
import gzip
import os
import re
import sys
import unicodedata
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "alignment")]  # this checkout's packages
from hmm_nmt_align.base.atomic import atomic_output  # noqa: E402  (standard library only)

__all__ = ["strip_accents", "normalize_gold_tokens", "normalize_train_line", "read_wpt_sentences",
           "read_src_tgt", "convert_trial_links", "write_gold"]

# French elisions as the gold expands them (l' -> le always: "le opposition", "le intention")
ELISIONS = {"l'": "le", "d'": "de", "qu'": "que", "j'": "je", "n'": "ne", "s'": "se", "c'": "ce", "m'": "me",
            "t'": "te", "jusqu'": "jusque", "lorsqu'": "lorsque", "puisqu'": "puisque", "quelqu'": "quelque",
            "quoiqu'": "quoique"}
CONTRACTIONS = {"du": ["de", "le"], "des": ["de", "les"], "au": ["a", "le"], "aux": ["a", "les"]}
# English negations: the gold writes "do not", "cannot" and has no "n't"
_NT_SPECIAL = {"can": "cannot", "won": "will not", "shan": "shall not", "ain": "is not"}
_NT = re.compile(r"\b([A-Za-z]+n)'t\b", re.IGNORECASE)


def strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")


_GOLD_MAP = {"«": '"', "»": '"', "-lrb-": "(", "-rrb-": ")"}  # the trial's English has -LRB- / -RRB-


def _norm_word(w: str) -> str:
    w = strip_accents(w.lower())
    return _GOLD_MAP.get(w, w)


def normalize_gold_tokens(tokens: Sequence[str]) -> List[str]:
    """The gold side: one output word per input word (indices untouched)."""
    return [_norm_word(w) for w in tokens]


def _expand_nt(m: "re.Match") -> str:
    word = m.group(1)  # "don", "can", "isn"
    return _NT_SPECIAL.get(word.lower(), word[:-1] + " not")


_TOKENIZERS = {}


def _tokenizer(lang: str):
    if lang not in _TOKENIZERS:
        from sacremoses import MosesTokenizer

        _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    return _TOKENIZERS[lang]


def normalize_train_line(line: str, lang: str) -> str:
    """One untokenized training line in the gold's form (``lang`` is ``en`` or ``fr``)."""
    if lang == "en":
        line = _NT.sub(_expand_nt, line)
    toks = _tokenizer(lang).tokenize(line.strip(), escape=False, aggressive_dash_splits=True)
    toks = [_norm_word("-" if t == "@-@" else t) for t in toks]
    if lang != "fr":
        return " ".join(toks)
    out: List[str] = []
    k = 0
    while k < len(toks):
        t = toks[k]
        nxt = toks[k + 1] if k + 1 < len(toks) else ""
        if t == "-" and nxt == "t" and k + 2 < len(toks) and toks[k + 2] == "-" and out:
            k += 3  # a-t-il -> "a il" (the euphonic t is dropped in the gold)
            continue
        if t in ELISIONS:
            out.append(ELISIONS[t])
        elif t in CONTRACTIONS and not (t == "au" and nxt == "-"):  # "au - dessus" keeps its "au"
            out.extend(CONTRACTIONS[t])
        else:
            out.append(t)
        k += 1
    return " ".join(out)


# --------------------------------------------------------------------------------------------- gold files
def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # the original WPT release is Latin-1
        return raw.decode("latin-1")


_S = re.compile(r"^<s snum=(\d+)>(.*)</s>\s*$")


def read_wpt_sentences(path: str) -> List[Tuple[int, List[str]]]:
    """``<s snum=N> w1 w2 ... </s>`` lines (UTF-8 or Latin-1) as (snum, words)."""
    out = []
    for k, line in enumerate(_read_text(path).splitlines()):
        if not line.strip():
            continue
        m = _S.match(line.strip())
        if not m:
            raise ValueError(f"{path}:{k + 1}: not a '<s snum=N> ... </s>' line")
        out.append((int(m.group(1)), m.group(2).split()))
    return out


def read_src_tgt(path: str) -> List[Tuple[List[str], List[str]]]:
    """``en ||| fr`` lines of ``gold/enfr.src-tgt``."""
    out = []
    for line in _read_text(path).splitlines():
        en, fr = line.split("|||")
        out.append((en.split(), fr.split()))
    return out


def convert_trial_links(line: str) -> str:
    """``trial.align`` (0-based, French first, ``f-e`` / ``f-e-P``) to 1-based English-first ``i-j`` / ``ipj``."""
    out = []
    for tok in line.split():
        parts = tok.split("-")
        f, e = int(parts[0]), int(parts[1])
        possible = len(parts) == 3 and parts[2] == "P"
        if len(parts) not in (2, 3) or (len(parts) == 3 and not possible):
            raise ValueError(f"malformed trial link {tok!r}")
        out.append(f"{e + 1}{'p' if possible else '-'}{f + 1}")
    return " ".join(out)


def write_gold(local: str, out_dir: str) -> dict:
    """Normalized test and trial text plus gold links (see the module docstring); returns counts."""
    os.makedirs(out_dir, exist_ok=True)
    gold_dir = os.path.join(local, "gold")
    test = read_src_tgt(os.path.join(gold_dir, "enfr.src-tgt"))
    with open(os.path.join(gold_dir, "enfr.gold"), encoding="utf-8") as f:
        test_links = [line.rstrip("\n") for line in f]
    if len(test_links) != len(test):
        raise ValueError(f"enfr.gold has {len(test_links)} lines, enfr.src-tgt {len(test)}")
    trial_e = read_wpt_sentences(os.path.join(gold_dir, "trial", "trial.e"))
    trial_f = read_wpt_sentences(os.path.join(gold_dir, "trial", "trial.f"))
    if [s for s, _ in trial_e] != [s for s, _ in trial_f]:
        raise ValueError("trial.e and trial.f list different sentence numbers")
    with open(os.path.join(gold_dir, "trial", "trial.align"), encoding="utf-8") as f:
        trial_links = [convert_trial_links(line) for line in f.read().splitlines()]
    if len(trial_links) != len(trial_e):
        raise ValueError(f"trial.align has {len(trial_links)} lines, trial.e {len(trial_e)}")
    sets = {"test": ([e for e, _ in test], [f for _, f in test], test_links),
            "trial": ([w for _, w in trial_e], [w for _, w in trial_f], trial_links)}
    for name, (en, fr, links) in sets.items():
        for lang, sents in (("en", en), ("fr", fr)):
            with open(os.path.join(out_dir, f"{name}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(" ".join(normalize_gold_tokens(s)) + "\n" for s in sents)
        with open(os.path.join(out_dir, f"{name}.gold"), "w", encoding="utf-8") as f:
            f.writelines(x + "\n" for x in links)
    return {name: len(v[0]) for name, v in sets.items()}


# --------------------------------------------------------------------------------------------- CLI
def _open_in(path: str):
    if path == "-":
        return sys.stdin
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def normalize_lines(lines: Iterable[str], lang: str, limit: Optional[int] = None) -> Iterator[str]:
    for k, line in enumerate(lines):
        if limit is not None and k >= limit:
            break
        yield normalize_train_line(line, lang)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="normalize one side of the (untokenized) training text")
    t.add_argument("--lang", required=True, choices=["en", "fr"])
    t.add_argument("--lines", type=int, help="only the first N lines")
    t.add_argument("input", help="text or .gz ('-': stdin)")
    t.add_argument("output", help="'-': stdout")
    g = sub.add_parser("gold", help="normalized test/trial text and 1-based English-French gold links")
    g.add_argument("--local", required=True, help="the hansards_enfr folder")
    g.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "gold":
        n = write_gold(args.local, args.out)
        sys.stderr.write(f"normalize.py: {n['test']} test and {n['trial']} trial pairs in {args.out}\n")
        return 0
    src = _open_in(args.input)
    if args.output == "-":
        for line in normalize_lines(src, args.lang, args.lines):
            sys.stdout.write(line + "\n")
        return 0
    with atomic_output(args.output) as tmp, open(tmp, "w", encoding="utf-8") as dst:
        for line in normalize_lines(src, args.lang, args.lines):
            dst.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
