"""Document context for taggers: consecutive sentences of one document tagged as one sequence (pure Python).

Sentence-level taggers see one sentence; in news text (CoNLL-2003) an entity is often named in full once and
repeated in short form later, so the neighbouring sentences help. With ``--tagging-unit document`` the
``sequence_tagging`` task trains and tags *units*: runs of consecutive sentences of the same document
(``Sentence.doc``, from ``-DOCSTART-`` lines), packed greedily up to a token budget, joined by a separator
token :data:`SEPARATOR` whose tag is ``O``. The separator keeps the sentence boundary visible to the model and
lets no entity run across it; :func:`split` takes a unit's predictions back to its sentences.
"""

SEPARATOR = "-docsep-"  # lower case: the same under --lowercase
SEPARATOR_TAG = "O"

__all__ = ["SEPARATOR", "SEPARATOR_TAG", "units", "join", "split"]


def units(docs, lengths, max_tokens):
    """Groups of sentence indices: consecutive sentences with the same document id in ``docs``, a new group
    whenever adding the next sentence (and its separator) would pass ``max_tokens`` tokens. A sentence longer
    than the budget is a group of its own. Every index appears once, in order."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    groups, size = [], 0
    for i, (doc, n) in enumerate(zip(docs, lengths)):
        if groups and docs[groups[-1][-1]] == doc and size + 1 + n <= max_tokens:
            groups[-1].append(i)
            size += 1 + n
        else:
            groups.append([i])
            size = n
    return groups


def join(seqs, group, sep):
    """The sequences ``seqs[i]`` for i in ``group``, concatenated with ``sep`` between them (a list)."""
    out = []
    for k, i in enumerate(group):
        if k:
            out.append(sep)
        out.extend(seqs[i])
    return out


def split(unit_seq, group, lengths):
    """Inverse of :func:`join`: the per-sentence pieces of a unit's sequence (separators dropped), as
    ``{sentence index: list}``."""
    expected = sum(lengths[i] for i in group) + len(group) - 1
    if len(unit_seq) != expected:
        raise ValueError(f"a unit of {len(group)} sentences has {expected} positions, got {len(unit_seq)}")
    out, pos = {}, 0
    for i in group:
        out[i] = list(unit_seq[pos:pos + lengths[i]])
        pos += lengths[i] + 1
    return out
