"""Character-level word features shared by the taggers (``sequence_tagger`` and ``iohmm_tagger``)."""
import torch
import torch.nn as nn

from hmm_nmt.data.chars import MAX_WORD_CHARS, PAD, UNK, CharAlphabet


class CharEncoder(nn.Module):
    """Character BiLSTM word features: (B, T) word indices -> (B, T, 2 * hidden), the final forward and
    backward states over each word's characters (at most MAX_WORD_CHARS).

    The characters are the batch's own, ``src_chars`` (B, T, C) ids over ``alphabet``
    (:class:`hmm_nmt.data.chars.CharAlphabet`, default: the one of ``dictionary``'s words), which the
    ``sequence_tagging`` task reads from the raw words of the data, so a word outside the dictionary
    (``<unk>`` for the word embedding) still gets its characters. Without ``src_chars`` (older callers), the
    characters are those of the dictionary strings of ``src_tokens`` (a special symbol, ``<unk>`` included,
    has the single unknown character); both give the same features for a word of the dictionary. Padding
    positions get the features of the unknown character in both paths.
    """

    def __init__(self, dictionary, embed_dim, hidden, alphabet=None):
        super().__init__()
        self.alphabet = alphabet if alphabet is not None else CharAlphabet.from_dictionary(dictionary)
        words = dictionary.symbols
        ids = torch.zeros(len(words), MAX_WORD_CHARS, dtype=torch.long)
        lens = torch.ones(len(words), dtype=torch.long)
        for k, w in enumerate(words):
            seq = self.alphabet.encode(w) if k >= dictionary.nspecial else [UNK]
            ids[k, : len(seq)] = torch.tensor(seq)
            lens[k] = len(seq)
        self.register_buffer("char_ids", ids, persistent=False)
        self.register_buffer("char_lens", lens, persistent=False)
        self.embed = nn.Embedding(len(self.alphabet), embed_dim, padding_idx=PAD)
        self.rnn = nn.LSTM(embed_dim, hidden, batch_first=True, bidirectional=True)
        self.output_dim = 2 * hidden

    def forward(self, src_tokens, src_chars=None):
        if src_chars is None:
            uniq, inverse = torch.unique(src_tokens, return_inverse=True)
            lens = self.char_lens[uniq]
            ids = self.char_ids[uniq][:, : int(lens.max())]
        else:
            rows = src_chars.reshape(-1, src_chars.size(-1))
            if rows.size(0) == 0:
                return src_chars.new_zeros(*src_tokens.shape, self.output_dim, dtype=self.embed.weight.dtype)
            empty = rows.ne(PAD).sum(1).eq(0)  # padding positions (and any empty word): the unknown character
            rows = torch.cat([torch.where(empty, UNK, rows[:, 0]).unsqueeze(1), rows[:, 1:]], dim=1)
            ids, inverse = torch.unique(rows, dim=0, return_inverse=True)
            lens = ids.ne(PAD).sum(1)
            ids = ids[:, : int(lens.max())]
            inverse = inverse.view(src_tokens.shape)
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(ids), lens.cpu(), batch_first=True, enforce_sorted=False)
        _, (h, _) = self.rnn(packed)
        rep = torch.cat([h[0], h[1]], dim=-1)  # (U, 2H)
        return rep[inverse]

    def upgrade_state_dict_named(self, state_dict, name):
        """A checkpoint whose character embedding predates the case variants of the alphabet (trained with
        ``--lowercase`` on lowercased characters): each variant starts as its lowercase character's row, so
        the model scores original-case words as it scored their lowercase forms."""
        key = f"{name}.embed.weight" if name else "embed.weight"
        w = state_dict.get(key)
        if w is None or w.size(0) != self.alphabet.base_size or len(self.alphabet) == w.size(0):
            return
        rows = torch.zeros(len(self.alphabet) - w.size(0), w.size(1), dtype=w.dtype)
        for v, low in self.alphabet.variant_folds():
            rows[v - w.size(0)] = w[low]
        state_dict[key] = torch.cat([w, rows], dim=0)
