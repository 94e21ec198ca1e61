"""One sentence alignment (:class:`Alignment`: sure and possible links) and its Pharaoh line.

Pure Python: the home of the alignment object and of the Pharaoh line format, used by the model layer's
hub (:mod:`hmm_nmt.aligner.hub`) and by the file readers and writers of :mod:`hmm_nmt_align.io`, which document
the formats and import these names.
"""
import re
from dataclasses import dataclass, field
from typing import FrozenSet, Iterable, Optional, Tuple

Link = Tuple[int, int]

__all__ = ["Alignment", "AlignmentFormatError", "Link", "format_pharaoh", "parse_pharaoh_line"]


class AlignmentFormatError(ValueError):
    """Bad alignment input; ``str()`` is ``FILE:LINE: message`` (or ``FILE: message``)."""

    def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None):
        self.path = path
        self.line = line
        self.message = message
        where = "" if path is None else (f"{path}:{line}: " if line is not None else f"{path}: ")
        super().__init__(where + message)


@dataclass(frozen=True)
class Alignment:
    """Sure links S and possible links P of one sentence pair; P always contains S."""

    sure: FrozenSet[Link] = field(default_factory=frozenset)
    possible: FrozenSet[Link] = field(default_factory=frozenset)

    def __post_init__(self):
        object.__setattr__(self, "sure", frozenset(self.sure))
        object.__setattr__(self, "possible", frozenset(self.possible) | self.sure)

    @classmethod
    def from_links(cls, links: Iterable[Link]) -> "Alignment":
        """An alignment whose links are all sure (what an aligner outputs)."""
        return cls(frozenset(links))

    @property
    def links(self) -> FrozenSet[Link]:
        """All links (P); for a hypothesis this is the set A."""
        return self.possible

    def reversed(self) -> "Alignment":
        return Alignment(frozenset((j, i) for i, j in self.sure), frozenset((j, i) for i, j in self.possible))

    def __len__(self):
        return len(self.possible)


_PHARAOH_TOKEN = re.compile(r"^(\d+)([-?p])(\d+)$")
_SPACED_P = re.compile(r"(?<!\S)(\d+)\s+p\s+(\d+)(?!\S)")


def parse_pharaoh_line(text: str, one_based: bool = False, path: Optional[str] = None,
                       lineno: Optional[int] = None) -> Alignment:
    """Parse one Pharaoh line (``0-0 1?2 3p4``) into an :class:`Alignment`."""
    sure, possible = set(), set()
    off = 1 if one_based else 0
    text = _SPACED_P.sub(r"\1p\2", text)  # "3 p 4" is the spaced spelling of "3p4"
    for tok in text.split():
        m = _PHARAOH_TOKEN.match(tok)
        if m is None:
            raise AlignmentFormatError(
                f"malformed link {tok!r} (expected i-j for a sure link, i?j or ipj for a possible one)", path, lineno)
        i, j = int(m.group(1)) - off, int(m.group(3)) - off
        if i < 0 or j < 0:
            raise AlignmentFormatError(f"link {tok!r} has index 0 but positions are 1-based (--one-based)", path, lineno)
        (sure if m.group(2) == "-" else possible).add((i, j))
    return Alignment(frozenset(sure), frozenset(possible))


def format_pharaoh(alignment, one_based: bool = False, possible_mark: str = "?") -> str:
    """One Pharaoh line, links sorted by (i, j); possible-only links written ``i?j`` (or ``ipj``)."""
    if not isinstance(alignment, Alignment):
        alignment = Alignment.from_links(alignment)
    if possible_mark not in ("?", "p"):
        raise ValueError("possible_mark must be '?' or 'p'")
    off = 1 if one_based else 0
    out = []
    for i, j in sorted(alignment.possible):
        sep = "-" if (i, j) in alignment.sure else possible_mark
        out.append(f"{i + off}{sep}{j + off}")
    return " ".join(out)
