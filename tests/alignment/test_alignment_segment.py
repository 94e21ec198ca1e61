"""Word-by-word segmentation (hmm_nmt_align.base.segment): the pieces of a sentence and the word of every piece."""
import io
import random

import pytest

from hmm_nmt_align.base.segment import Segmenter, load_segmenter
from hmm_nmt_align.base.subword import word_index


def _corpus(n=400, seed=3):
    rng = random.Random(seed)
    syll = ["ka", "mu", "ro", "zi", "te", "lo", "sa", "ne"]
    vocab = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(60)]
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def test_none_keeps_words():
    assert Segmenter().segment(["a", "bb", "c"]) == (["a", "bb", "c"], [0, 1, 2])
    assert Segmenter().segment([]) == ([], [])


def test_subword_nmt_codes(tmp_path):
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    lines = _corpus()
    codes = io.StringIO()
    learn_bpe(io.StringIO("\n".join(lines) + "\n"), codes, 40)
    (tmp_path / "codes").write_text(codes.getvalue())
    seg = load_segmenter(bpe_codes=str(tmp_path / "codes"))
    bpe = BPE(io.StringIO(codes.getvalue()))
    split = 0
    for line in lines[:100]:
        pieces, owner = seg.segment(line.split())
        assert pieces == bpe.process_line(line).split()  # word by word = the whole line
        assert owner == word_index(pieces, "bpe", eos=None)
        split += len(pieces) > len(line.split())
    assert split > 20  # the codes really split words


def test_sentencepiece_model(tmp_path):
    import sentencepiece as spm

    lines = _corpus()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "m"), vocab_size=60,
                                   model_type="unigram", minloglevel=2)
    seg = load_segmenter(spm_model=str(tmp_path / "m.model"))
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    split = 0
    for line in lines[:100]:
        pieces, owner = seg.segment(line.split())
        assert pieces == sp.encode(line, out_type=str)  # whitespace pre-splitting: word by word = the line
        assert owner == word_index(pieces, "spm", eos=None)
        split += len(pieces) > len(line.split())
    assert split > 20
    with pytest.raises(FileNotFoundError):
        load_segmenter(spm_model=str(tmp_path / "missing.model"))
    with pytest.raises(ValueError, match="not both"):
        load_segmenter(bpe_codes="x", spm_model="y")


def test_codes_without_a_merge_split_words_into_characters_as_subword_nmt_would(tmp_path):
    """A vocabulary smaller than the script's characters learns no merge: subword-nmt cannot read that file, the
    segmenter splits into characters exactly as its BPE does when no merge applies."""
    import random

    from hmm_nmt_align.base.segment import load_segmenter

    (tmp_path / "none").write_text("#version: 0.2\n", encoding="utf-8")
    (tmp_path / "idle").write_text("#version: 0.2\n\u0400 \u0401</w>\n", encoding="utf-8")  # never applies
    none, idle = load_segmenter(str(tmp_path / "none")), load_segmenter(str(tmp_path / "idle"))
    rng = random.Random(0)
    alphabet = "ab@日本語é-" + "\u3042\u30a2"
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(300)]
    assert none.segment(words) == idle.segment(words)
    assert none.segment(["日本語", "x"])[0] == ["日@@", "本@@", "語", "x"]
