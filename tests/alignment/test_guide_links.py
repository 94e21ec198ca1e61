"""Word links of a first pass as fairseq's binarized piece alignments (hmm_nmt_align.guide)."""
import pytest
import torch
from dhmm_testlib import zipf_dict
from fairseq.data import LanguagePairDataset, data_utils

from hmm_nmt_align.guide import piece_links, write_link_dataset, write_link_datasets


def test_piece_links_cover_every_piece_pair_of_linked_words():
    # source words: 0 = [0], 1 = [1, 2]; target words: 0 = [0, 1], 1 = [2]
    src_owner, tgt_owner = [0, 1, 1], [0, 0, 1]
    assert piece_links([(1, 0)], src_owner, tgt_owner) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert piece_links([(0, 1), (1, 1)], src_owner, tgt_owner) == [(0, 2), (1, 2), (2, 2)]
    assert piece_links([], src_owner, tgt_owner) == []
    with pytest.raises(ValueError, match="outside"):
        piece_links([(2, 0)], src_owner, tgt_owner)


def test_dataset_reads_back_through_fairseqs_loader_and_collater(tmp_path):
    rows = [[(0, 0), (1, 0), (1, 2)], [], [(3, 0)]]
    prefix = str(tmp_path / "train.align.src-tgt")
    assert write_link_dataset(prefix, rows) == 3
    ds = data_utils.load_indexed_dataset(prefix, None, "mmap")
    assert [ds[k].view(-1, 2).tolist() for k in range(3)] == [[list(x) for x in r] for r in rows]
    d = zipf_dict()
    w = [d.index(f"w{k}") for k in range(9)]
    eos = d.eos()
    src = [torch.tensor([w[0], w[1], eos]), torch.tensor([w[2], eos]), torch.tensor([w[2], w[3], w[4], w[5], eos])]
    tgt = [torch.tensor([w[6], w[7], w[8], eos]), torch.tensor([w[1], eos]), torch.tensor([w[1], eos])]
    pairs = LanguagePairDataset(src, torch.tensor([3, 2, 5]), d, tgt, torch.tensor([4, 2, 2]), d, align_dataset=ds)
    sample = pairs.collater([pairs[k] for k in range(3)])
    assert sample["alignments"].shape == (4, 2)  # every link in range: none dropped



def test_both_directions_are_written_in_one_pass_the_reverse_with_its_sides_swapped(tmp_path):
    rows = [[(0, 0), (1, 0), (1, 2)], [], [(3, 0), (2, 5)]]
    fwd, rev = str(tmp_path / "a.src-tgt"), str(tmp_path / "a.tgt-src")
    assert write_link_datasets([fwd, rev], iter(rows)) == (3, 5)  # a generator: nothing needs the rows twice
    read = [data_utils.load_indexed_dataset(p, None, "mmap") for p in (fwd, rev)]
    assert [read[0][k].view(-1, 2).tolist() for k in range(3)] == [[list(x) for x in r] for r in rows]
    assert [read[1][k].view(-1, 2).tolist() for k in range(3)] == [[[i, j] for j, i in r] for r in rows]
