"""Token spans for the chunker: a document's text tokenized once per segment, windows of tokens over a span
too long for one chunk (ending at word boundaries, with overlap), an exact re-cut for the rare piece that
counts over the limit, and a heading path shortened to fit."""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragvps import tokens
from ragvps.ingest.blocks import Piece
from ragvps.text import strip_span

if TYPE_CHECKING:
    from tokenizers import Encoding

_START = operator.itemgetter(0)


@dataclass
class Segment:
    """The tokens of doc.text[base:end], tokenized once; offsets relative to base."""

    base: int
    end: int
    enc: Encoding
    _words: list[int | None] | None = None
    offs: list[tuple[int, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.offs = self.enc.offsets  # a property that builds a new list on every access

    def span(self, a: int, b: int) -> tuple[int, int]:
        offs = self.offs
        return bisect_left(offs, a - self.base, key=_START), bisect_left(offs, b - self.base, key=_START)

    def inside_word(self, i: int) -> bool:
        """Whether token i continues the word of token i - 1."""
        if self._words is None:
            self._words = self.enc.word_ids
        return 0 < i < len(self._words) and self._words[i] == self._words[i - 1]


def windows(seg: Segment, text: str, a: int, b: int, i: int, j: int, size: int, overlap: int, p: int) -> list[Piece]:
    """Token windows over tokens [i, j) (text[a:b]) that end at word boundaries, with overlap."""
    offs = seg.offs
    out: list[Piece] = []
    s, sa = i, a
    while True:
        e = min(s + size, j)
        while e < j and e > s + 1 and seg.inside_word(e):
            e -= 1
        eb = b if e >= j else strip_span(text, sa, seg.base + offs[e][0])[1]
        exact = not seg.inside_word(s) and (e >= j or not seg.inside_word(e))
        out.append((sa, eb, e - s, p, exact))
        if e >= j:
            return out
        ns = max(e - overlap, s + 1)
        while s + 1 < ns < e and seg.inside_word(ns):
            ns -= 1
        s, sa = ns, seg.base + offs[ns][0]


def refit(text: str, a: int, b: int, limit: int, count: Callable[[str], int]) -> list[tuple[int, int, int]]:
    """Cut text[a:b] into consecutive pieces whose exact count is within `limit` (a rare safety net)."""
    out = []
    while a < b:
        hi = b
        n = count(text[a:hi])
        while n > limit and hi - a > 1:
            offs = tokens.encode(text[a:hi]).offsets
            k = min(limit, len(offs) - 1)
            cut = a + offs[k][0] if k > 0 else hi - 1
            hi = max(strip_span(text, a, min(cut, hi - 1))[1], a + 1)
            n = count(text[a:hi])
        out.append((a, hi, n))
        a = strip_span(text, hi, b)[0]
    return out


def shorten(parts: tuple[str, ...], cap: int) -> tuple[str, int]:
    """A heading path that fits in `cap` tokens: title > … > last heading, then cut after a token."""
    embed = f"{parts[0]} > … > {parts[-1]}" if len(parts) > 2 else " > ".join(parts)
    n = tokens.count(embed)
    offs = tokens.encode(embed).offsets
    keep = cap - 1
    while n > cap and keep > 0:
        cut = embed[: offs[keep - 1][1]].rstrip() + " …"
        n = tokens.count(cut)
        keep -= 1
        if n <= cap:
            return cut, n
    return (embed, n) if n <= cap else ("", 0)
