"""Markdown pieces the format readers write: headings, list items, paragraphs and tables that a Markdown
parser reads back as the same structure (cell text escaped, rows padded to the header's width)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

_SPACE = re.compile(r"\s+")
# Line starts that would turn prose into a heading or a code fence (lists, quotes and tables are harmless).
_BLOCK_START = re.compile(r"^()(#|```|~~~|[=-]+\s*$)")


def clean(text: object) -> str:
    """One line of text: whitespace runs (line breaks too) as one space, NUL dropped."""
    return _SPACE.sub(" ", str(text).replace("\x00", "")).strip()


def paragraph(text: str) -> str:
    """A paragraph of prose that Markdown will not take for a heading, list, quote, table or fence."""
    lines = [line.strip() for line in text.replace("\x00", "").splitlines()]
    return "\n".join(_BLOCK_START.sub(r"\1\\\2", line) for line in lines if line)


def heading(level: int, text: str) -> str:
    return f"{'#' * min(max(level, 1), 6)} {clean(text)}"


def cell(value: object) -> str:
    text = "" if value is None else clean(value)
    return text.replace("\\", "\\\\").replace("|", "\\|")


def table_row(values: Iterable[object], width: int) -> str:
    cells = [cell(v) for v in values][:width]
    cells += [""] * (width - len(cells))
    return "| " + " | ".join(cells) + " |"


def table(rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table whose first row is the header; rows of other lengths are padded or cut to it."""
    rows = [r for r in rows if any(clean(v) for v in r if v is not None)]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    lines = [table_row(rows[0], width), "|" + " --- |" * width]
    lines += [table_row(r, width) for r in rows[1:]]
    return "\n".join(lines)


def header_lines(values: Sequence[object]) -> tuple[str, str]:
    """A table's header row and delimiter row, for readers that stream the rows after it."""
    width = max(len(values), 1)
    return table_row(values, width), "|" + " --- |" * width


def text_line(values: Iterable[object]) -> str:
    """Cells outside a table (a sheet's title rows) as one line of prose that reads as nothing else."""
    line = " ".join(c for c in (clean(v) for v in values if v is not None) if c)
    return "\\" + line if line[:1] in ("#", "|", "`", "~", "=", "-", ">") else line


HEADER_SCAN = 50  # rows looked at to find a sheet's header


def sheet_lines(rows: Iterator[Sequence[str]]) -> Iterator[str]:
    """A sheet's rows (cells as text) as Markdown lines, streamed: title lines, then a table whose header is
    the first of the first HEADER_SCAN rows filled at least half as much as the fullest of them (rows above it,
    such as a title or a unit, become text lines; a blank line separates them from the table)."""
    head = sheet_head(rows)
    if head is None:
        return
    yield from head.lines
    yield from head.rows


@dataclass
class SheetHead:
    lines: list[str]  # the title lines, the header row and the delimiter row
    rows: Iterator[str]  # the table's rows after the header, as Markdown lines, streamed
    buffered: int  # of those rows, how many were read already (looking for the header)


def sheet_head(rows: Iterator[Sequence[str]]) -> SheetHead | None:
    """The sheet's title and header lines, and its rows to come (None: not a cell filled in the first rows)."""
    head: list[Sequence[str]] = []
    for row in rows:
        head.append(row)
        if len(head) >= HEADER_SCAN:
            break
    filled = [sum(1 for c in r if c.strip()) for r in head]
    if not any(filled):
        return None
    header_at = next(i for i, n in enumerate(filled) if n * 2 >= max(filled))
    lines: list[str] = []
    for r in head[:header_at]:
        if line := text_line(r):
            lines += [line, ""]
    width = max(len(r) for r in head[header_at:])
    lines += header_lines(list(head[header_at]) + [""] * (width - len(head[header_at])))
    body = (
        table_row(r if len(r) <= width else [*r[: width - 1], " ".join(r[width - 1 :])], width)
        for r in chain(head[header_at + 1 :], rows)
        if filled_row(r)
    )
    return SheetHead(lines, body, sum(1 for r in head[header_at + 1 :] if filled_row(r)))


def filled_row(row: Sequence[str]) -> bool:
    """Whether a row has a cell with text (a blank row is not a table row)."""
    return any(c.strip() for c in row)
