"""Piece links for ``--alignment-guide-weight``: word links of a first pass turned into the binarized
``SPLIT.align.SRC-TGT`` datasets that fairseq's ``--load-alignments`` reads (imports fairseq).

A word link (source word s, target word t) allows every piece of t to align to every piece of s; fairseq's
format is one flat ``j0 i0 j1 i1 ...`` integer row per sentence pair, source piece first, 0-based, over the
pieces without EOS. The reverse direction's file holds the same links with the sides swapped.
"""
from typing import Iterable, List, Sequence, Tuple

__all__ = ["piece_links", "write_link_dataset", "write_link_datasets"]


def piece_links(links: Iterable[Tuple[int, int]], src_owner: Sequence[int], tgt_owner: Sequence[int]
                ) -> List[Tuple[int, int]]:
    """The (source piece, target piece) pairs of word links (source word, target word); ``src_owner[j]`` is the
    word of piece j. A link to a word the owners do not have raises ValueError."""
    src_pieces, tgt_pieces = {}, {}
    for j, w in enumerate(src_owner):
        src_pieces.setdefault(w, []).append(j)
    for i, w in enumerate(tgt_owner):
        tgt_pieces.setdefault(w, []).append(i)
    out = set()
    for s, t in links:
        if s not in src_pieces or t not in tgt_pieces:
            raise ValueError(f"link {s}-{t} is outside the sentence pair ({max(src_owner, default=-1) + 1} source, "
                             f"{max(tgt_owner, default=-1) + 1} target words)")
        out.update((j, i) for j in src_pieces[s] for i in tgt_pieces[t])
    return sorted(out)


def write_link_dataset(prefix: str, rows: Iterable[Sequence[Tuple[int, int]]]) -> int:
    """``prefix.bin``/``prefix.idx`` as fairseq-preprocess ``--align-suffix`` writes them (mmap); returns the
    number of rows. The caller writes to a temporary prefix and renames both files."""
    return write_link_datasets([prefix], rows)[0]


def write_link_datasets(prefixes: Sequence[str], rows: Iterable[Sequence[Tuple[int, int]]]) -> Tuple[int, int]:
    """:func:`write_link_dataset` of one stream of rows to ``prefixes[0]``, and with each link's sides swapped
    to ``prefixes[1]`` when given (the reverse direction's file), in one pass: nothing held in memory. Returns
    (rows, links)."""
    import numpy as np
    import torch
    from fairseq.data import indexed_dataset

    builders = [indexed_dataset.make_builder(p + ".bin", impl="mmap", vocab_size=None) for p in prefixes]
    n = n_links = 0
    for row in rows:
        flat = np.asarray(row, dtype=np.int64).reshape(-1, 2)
        for builder, links in zip(builders, (flat, flat[:, ::-1])):
            builder.add_item(torch.from_numpy(np.ascontiguousarray(links).reshape(-1)))
        n, n_links = n + 1, n_links + len(flat)
    for builder, p in zip(builders, prefixes):
        builder.finalize(p + ".idx")
    return n, n_links
