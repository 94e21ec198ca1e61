"""Subword-to-word mapping for subword-nmt BPE (@@) and SentencePiece (▁)."""
import random

import pytest

from hmm_nmt_align.base.subword import subword_to_word_links, word_index, words

BPE_SRC = ["das", "Haus@@", "boot", "ist", "ge@@", "lb@@", "lich", "</s>"]  # das Hausboot ist gelblich </s>
SPM_TGT = ["▁the", "▁house", "boat", "▁is", "▁yellow", "ish", "</s>"]  # the houseboat is yellowish </s>


def test_word_index_bpe_and_spm():
    assert word_index(BPE_SRC, "bpe") == [0, 1, 1, 2, 3, 3, 3, None]
    assert words(BPE_SRC, "bpe") == ["das", "Hausboot", "ist", "gelblich"]
    assert word_index(SPM_TGT, "spm") == [0, 1, 1, 2, 3, 3, None]
    assert words(SPM_TGT, "spm") == ["the", "houseboat", "is", "yellowish"]
    # a lone ▁ opens a word; a first piece without ▁ still is word 0
    assert word_index(["he", "llo", "▁", ",", "▁x"], "spm") == [0, 0, 1, 1, 2]
    assert words(["he", "llo", "▁", ",", "▁x"], "spm") == ["hello", ",", "x"]
    with pytest.raises(ValueError):
        word_index(["a"], "wordpiece")


def test_links_any_piece_links_the_words_and_eos_dropped():
    # piece links: das-the, Haus@@-house, boot-boat, boot-house (duplicate word link), ist-is,
    # lb@@-yellow, lich-ish, and links touching EOS on either side (explicit </s> at 7 / 6)
    links = [(0, 0), (1, 1), (2, 2), (2, 1), (3, 3), (5, 4), (6, 5), (7, 6), (6, 6), (7, 4)]
    assert subword_to_word_links(links, BPE_SRC, SPM_TGT, style="bpe", tgt_style="spm") == [
        (0, 0), (1, 1), (2, 2), (3, 3)]


def test_implicit_eos_one_past_the_end_dropped_and_beyond_is_error():
    src, tgt = ["a@@", "b", "c"], ["x", "y@@", "z"]  # words: ab c / x yz ; EOS implicit at index 3
    assert subword_to_word_links([(0, 2), (2, 0), (3, 1), (1, 3)], src, tgt, "bpe") == [(0, 1), (1, 0)]
    with pytest.raises(IndexError):
        subword_to_word_links([(4, 0)], src, tgt, "bpe")
    with pytest.raises(IndexError):
        subword_to_word_links([(0, -1)], src, tgt, "bpe")


@pytest.mark.parametrize("style", ["bpe", "spm"])
def test_random_segmentations_agree_with_brute_force(style):
    """Segment random words randomly, link random pieces, compare with linking words through a
    piece->word table built independently from the segmentation itself."""
    rng = random.Random(7)
    for _ in range(100):
        def segment(n_words):
            pieces, owner = [], []
            for w in range(n_words):
                k = rng.randint(1, 3)
                for p in range(k):
                    body = "x" * rng.randint(1, 3)
                    if style == "bpe":
                        pieces.append(body + ("@@" if p < k - 1 else ""))
                    else:
                        pieces.append(("▁" if p == 0 else "") + body)
                    owner.append(w)
            return pieces, owner

        src, so = segment(rng.randint(1, 5))
        tgt, to = segment(rng.randint(1, 5))
        links = {(rng.randrange(len(src)), rng.randrange(len(tgt))) for _ in range(rng.randint(0, 8))}
        expected = sorted({(so[i], to[j]) for i, j in links})
        assert subword_to_word_links(links, src, tgt, style) == expected
