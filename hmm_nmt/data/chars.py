"""The character alphabet of the taggers' character features, and character-id tensors of words.

One deterministic mapping, shared by the ``sequence_tagging`` task (which puts per-token character ids into
its batches, ``net_input["src_chars"]``) and the model's character encoder
(:class:`hmm_nmt.models.char_features.CharEncoder`, which sizes its character embedding by it and falls back to the
dictionary strings when a batch carries no characters):

* id 0 is padding, id 1 the unknown character (also the single character of a special symbol and of an
  empty string);
* ids 2, 3, ... are the sorted set of the characters of the word dictionary's (non-special) words;
* with ``case_variants`` (a task that lowercases words before the dictionary lookup, ``--lowercase``, while
  the characters are read from the original casing), the single-character upper- and title-case forms of
  those characters that are not in the set already follow, sorted, so that the ids of the dictionary's own
  characters do not move.

Words are cut to their first :data:`MAX_WORD_CHARS` characters. No fairseq import: the word dictionary is
anything with ``symbols`` and ``nspecial``.
"""
import torch

MAX_WORD_CHARS = 40
PAD, UNK = 0, 1


class CharAlphabet:
    """Characters -> ids (see the module docstring)."""

    def __init__(self, chars, variants=()):
        self.chars = tuple(chars)  # the dictionary's characters, sorted
        self.variants = tuple(variants)  # case variants appended after them
        self.index = {c: k + 2 for k, c in enumerate(self.chars + self.variants)}
        self._cache = {}

    @classmethod
    def from_dictionary(cls, dictionary, case_variants=False):
        chars = sorted({c for w in dictionary.symbols[dictionary.nspecial:] for c in w})
        variants = ()
        if case_variants:
            have = set(chars)
            variants = sorted({v for c in chars for v in (c.upper(), c.title())
                               if len(v) == 1 and v not in have and v.lower() in have})
        return cls(chars, variants)

    def __len__(self):
        """Size of a character embedding over this alphabet (padding and unknown included)."""
        return len(self.index) + 2

    @property
    def base_size(self):
        """Size without the case variants (the alphabet of the dictionary's characters alone)."""
        return len(self.chars) + 2

    def variant_folds(self):
        """``(variant id, id of its lowercase form)`` for every case variant."""
        return [(self.index[v], self.index[v.lower()]) for v in self.variants]

    def encode(self, word):
        """Character ids of one word (at least one: the unknown character for an empty string)."""
        ids = self._cache.get(word)
        if ids is None:
            ids = [self.index.get(c, UNK) for c in word[:MAX_WORD_CHARS]] or [UNK]
            self._cache[word] = ids
        return ids

    def decode(self, ids):
        """The characters of a row of ids (padding dropped, ``\\ufffd`` for the unknown character)."""
        names = self.chars + self.variants
        return "".join("\ufffd" if i == UNK else names[i - 2] for i in ids if i != PAD)

    def words_to_tensor(self, words):
        """(len(words), C) LongTensor of the words' character ids, right padded with 0 (C: longest word)."""
        rows = [self.encode(w) for w in words]
        width = max((len(r) for r in rows), default=1)
        return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.long).view(len(rows), width)


def collate_chars(rows, num_tokens=None, max_chars=MAX_WORD_CHARS):
    """(B, T, C) LongTensor from per-sentence (T_b, C_b) character-id tensors, right padded with 0 in both
    the token and the character dimension; T is ``num_tokens`` (default: the longest sentence), C the longest
    word of the batch, at most ``max_chars``."""
    T = max((r.size(0) for r in rows), default=0) if num_tokens is None else num_tokens
    C = min(max((r.size(1) for r in rows), default=1), max_chars)
    out = torch.zeros(len(rows), T, C, dtype=torch.long)
    for b, r in enumerate(rows):
        n, c = min(r.size(0), T), min(r.size(1), C)
        out[b, :n, :c] = r[:n, :c]
    return out
