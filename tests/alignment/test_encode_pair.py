"""hmm_nmt.aligner.pairs.encode_pair: the ids fairseq's Dictionary.encode_line gives the same pieces."""
from fairseq.data import Dictionary

from hmm_nmt.aligner.pairs import encode_pair
from hmm_nmt_align.base.segment import Segmenter


def test_the_ids_and_the_unknown_count_are_encode_lines():
    d = Dictionary()
    for w in ("the", "cat@@", "s", "ça", "日本"):
        d.add_symbol(w)
    seg = Segmenter(lambda w: ["cat@@", "s"] if w == "cats" else [w])
    src, tgt = ["the", "cats", "zebra", "日本"], ["ça", "?", "the", "cats"]
    pair = encode_pair(src, tgt, seg, d, d)
    for words, ids in ((src, pair.src), (tgt, pair.tgt)):
        want = d.encode_line(" ".join(seg.segment(words)[0]), add_if_not_exist=False, append_eos=True).long()
        assert ids.dtype == want.dtype and ids.tolist() == want.tolist()
    assert pair.unk == 2 and pair.src_owner == [0, 1, 1, 2, 3] and pair.tgt_owner == [0, 1, 2, 3, 3]
    empty = encode_pair([], ["the"], seg, d, d)
    assert empty.src.tolist() == [d.eos()] and empty.unk == 0
