"""The chunker's first step: a document's blocks (headings, prose, lines, code) with their heading paths,
each bounded in length, and the sentence and line splits inside a block. Pure functions over text offsets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain
from typing import Any

from markdown_it import MarkdownIt

from ragvps.ingest.sources import inline_text
from ragvps.records import Document
from ragvps.text import strip_span

SEGMENT_CHARS = 1 << 19  # a longer document is tokenized one segment at a time, so memory stays bounded
PARSE_CHARS = 1 << 22  # a longer Markdown text is parsed one window of lines at a time

Block = tuple[int, int, int, str]  # kind: heading | prose | lines | code | table | rows (a table's next part)
_NEWLINE = re.compile(r"\r\n?|\n")
_BLANK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
_MD_KINDS = {
    "heading_open": "heading",
    "paragraph_open": "prose",
    "blockquote_open": "prose",
    "fence": "code",
    "code_block": "code",
    "table_open": "table",
}


class _Paths:
    """Heading paths, interned; path 0 is the document's title alone."""

    def __init__(self, title: str):
        self.title = " ".join(title.split())
        self.paths: list[tuple[str, ...]] = [(self.title,) if self.title else ()]
        self.index: dict[tuple[str, ...], int] = {self.paths[0]: 0}
        self.stack: list[tuple[int, str]] = []

    def enter(self, level: int, heading: str) -> int:
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        self.stack.append((level, " ".join(heading.split())))
        names = [name for _, name in self.stack if name]
        if names and self.title and names[0].casefold() == self.title.casefold():
            names = names[1:]  # the h1 that is the title
        path = (*self.paths[0], *names)
        if path not in self.index:
            self.index[path] = len(self.paths)
            self.paths.append(path)
        return self.index[path]


def _markdown_blocks(doc: Document, paths: _Paths) -> list[Block]:
    text = doc.text
    starts = _markdown_starts(text, paths)
    lines = _line_starts(text, {line for line, _, _ in starts})
    blocks: list[Block] = []
    # A block runs to the next block's first line, so text no token maps (link definitions) is kept.
    for n, (line, kind, p) in enumerate(starts):
        a = 0 if n == 0 else lines[line]
        b = lines[starts[n + 1][0]] if n + 1 < len(starts) else len(text)
        _add_bounded(blocks, text, a, b, p, kind)
    if not starts:
        _add_bounded(blocks, text, 0, len(text), 0, "prose")
    return blocks


def _markdown_starts(text: str, paths: _Paths) -> list[tuple[int, str, int]]:
    """(first line, kind, path) of each top-level Markdown block.

    Blocks only: inline content is parsed for headings alone (a huge paragraph's inline tokens would take
    gigabytes), with the block parse's link references, as a full parse would. A text longer than
    PARSE_CHARS is parsed one window of lines at a time; a window ends before its last block, which the next
    window parses again whole (a single block longer than a window is cut at the window's end).
    """
    block_parser = MarkdownIt("commonmark").enable("table").disable("inline")
    inline = MarkdownIt("commonmark")
    env: dict[str, Any] = {}
    starts: list[tuple[int, str, int]] = []
    path, pos, first_line = 0, 0, 0
    while True:
        end = len(text)
        if end - pos > PARSE_CHARS:
            end = text.rfind("\n", pos, pos + PARSE_CHARS) + 1
            if end <= pos:  # one line longer than a window: parse it whole (a long line costs little)
                end = text.find("\n", pos + PARSE_CHARS) + 1 or len(text)
        toks = block_parser.parse(text[pos:end], env)
        tops = [i for i, tok in enumerate(toks) if tok.level == 0 and tok.nesting != -1 and tok.map is not None]
        resume = None
        if end < len(text) and len(tops) > 1:
            resume = toks[tops[-1]].map[0]  # type: ignore[index]
            tops = tops[:-1]
        for i in tops:
            tok = toks[i]
            kind = _MD_KINDS.get(tok.type, "lines")
            if kind == "heading":
                heading = inline.parseInline(toks[i + 1].content, env)[0]
                path = paths.enter(int(tok.tag[1]), inline_text(heading))
            starts.append((first_line + tok.map[0], kind, path))  # type: ignore[index]
        del toks
        if end >= len(text):
            return starts
        if resume is None:
            first_line += sum(1 for _ in _NEWLINE.finditer(text, pos, end))
            pos = end
        else:
            for n, m in enumerate(_NEWLINE.finditer(text, pos, end), start=1):
                if n == resume:
                    pos = m.end()
                    break
            first_line += resume


def _line_starts(text: str, wanted: set[int]) -> dict[int, int]:
    """The character offset of each wanted line (0-based), without a list of every line's."""
    found = {0: 0} if 0 in wanted else {}
    last = max(wanted, default=0)
    for n, m in enumerate(_NEWLINE.finditer(text), start=1):
        if n > last:
            break
        if n in wanted:
            found[n] = m.end()
    return found


def _add_bounded(blocks: list[Block], text: str, a: int, b: int, p: int, kind: str) -> None:
    """Append text[a:b] as one block, or as several when it is longer than a segment (one huge paragraph,
    table or line), so that no block is tokenized whole. A table's later parts are "rows" blocks, which the
    chunker heads with the table's header row."""
    a, b = strip_span(text, a, b)
    if b - a <= SEGMENT_CHARS:
        if a < b:
            blocks.append((a, b, p, kind))
        return
    for pa, pb in _bounded(text, a, b):
        pa, pb = strip_span(text, pa, pb)
        if pa < pb:
            blocks.append((pa, pb, p, kind))
            kind = "rows" if kind == "table" else kind


def _sheet_blocks(doc: Document, paths: _Paths) -> list[Block]:
    """Blocks of a text the sheet readers wrote (formats.md.sheet_lines): `#` heading lines, runs of `|` table
    lines, other lines as prose. Scanned line by line, without a Markdown parser, so a million-row sheet costs
    no parse tree."""
    text = doc.text
    blocks: list[Block] = []
    path, pos, table, last = 0, 0, -1, 0
    for m in chain(_NEWLINE.finditer(text), [None]):
        end = m.start() if m else len(text)
        first = text[pos : pos + 1]
        if first == "|":
            table = pos if table < 0 else table
        else:
            if table >= 0:
                _add_bounded(blocks, text, table, last, path, "table")
                table = -1
            if first == "#":
                line = text[pos:end]
                level = len(line) - len(line.lstrip("#"))
                path = paths.enter(level, line[level:].strip())
                blocks.append((pos, end, path, "heading"))
            elif text[pos:end].strip():
                _add_bounded(blocks, text, pos, end, path, "prose")
        last = end
        pos = m.end() if m else len(text)
    if table >= 0:
        _add_bounded(blocks, text, table, last, path, "table")
    return blocks


def _plain_blocks(doc: Document, paths: _Paths) -> Iterator[Block]:
    """Paragraphs (split at blank lines, and at lines or spaces if huge); headings from doc.metadata (HTML)."""
    text = doc.text
    heads = {int(h[0]): (int(h[1]), str(h[2])) for h in doc.metadata.get("headings", [])}  # type: ignore[attr-defined]
    path = 0
    a = 0
    for m in chain(_BLANK.finditer(text), [None]):
        b = m.start() if m else len(text)
        for pa, pb in _bounded(text, a, b):
            pa, pb = strip_span(text, pa, pb)
            if pa >= pb:
                continue
            kind = "prose"
            if pa in heads:
                path = paths.enter(*heads[pa])
                kind = "heading"
            yield pa, pb, path, kind
        if m:
            a = m.end()


def _bounded(text: str, a: int, b: int, size: int | None = None) -> Iterator[tuple[int, int]]:
    """Spans of at most `size` (a segment's) characters each: cut at the last line break, else after the
    last sentence's end, else at the last space, else anywhere."""
    size = size or SEGMENT_CHARS
    while b - a > size:
        end = a + size
        cut = text.rfind("\n", a, end)
        if cut <= a:
            cut = max(text.rfind(mark, a, end - 1) for mark in (". ", "! ", "? ")) + 1
        if cut <= a:
            cut = text.rfind(" ", a, end)
        if cut <= a:
            cut = end
        yield a, cut
        a = cut
    yield a, b


# --- sentences --------------------------------------------------------------------------------------------


def _lines(text: str, a: int, b: int) -> list[tuple[int, int]]:
    spans = []
    for m in _NEWLINE.finditer(text, a, b):
        spans.append(strip_span(text, a, m.start()))
        a = m.end()
    spans.append(strip_span(text, a, b))
    return [s for s in spans if s[0] < s[1]]


# --- the chunker ------------------------------------------------------------------------------------------

Piece = tuple[int, int, int, int, bool]  # start, end, text tokens, path index, exact by construction
