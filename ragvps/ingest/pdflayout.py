"""A PDF page's text in reading order, from PDFium's character boxes (ingest/pdf.py cuts them into segments): the
columns of a page read one after the other, running heads and feet that repeat across pages dropped, words
hyphenated at a line end joined, ligatures unfolded, the lines of a paragraph joined into one, headings found by
their font size and weight written as Markdown `#` headings, and rows of aligned cells written as a Markdown table.

Pure functions over small records (one per segment: a run of text on one line), in sorted passes; the text that
comes out is what the chunker scans line by line (formats.LINE_KINDS): a paragraph a line, `#` headings, `|` rows.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragvps.ingest.formats import md

LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl"})
LIGATURES |= str.maketrans({"\ufb05": "st", "\ufb06": "st"})
HYPHENS = ("-", "\xad", "\u2010", "\ufffe", "\x02")  # PDFium writes U+FFFE or U+0002 for a hyphen it saw at a line end
_DIGITS = re.compile(r"\d+")
_SPACE = re.compile(r"\s+")
_MARKER = re.compile(r"^(?:[\u2022\u2023\u25e6\u2043\u2219\u25aa\u25cf\u2013\u2014*-]|\(?\w{1,3}[.)])$")
_ENDS = (".", ":", "!", "?", '"', "\u201d")
REPEAT_PAGES = 3  # a line at a page's top or foot repeated on this many pages (digits aside) is a running head
EDGE = 0.12  # the share of a page's height at its top and at its foot where running heads and feet sit


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of text on one line (split at wide gaps: another column, a table's next cell); y grows upwards."""

    text: str
    x0: float
    x1: float
    y0: float  # bottom
    y1: float  # top
    size: float  # the font size of its first character
    bold: bool = False

    def __reduce__(self) -> tuple[type[Segment], tuple[str, float, float, float, float, float, bool]]:
        """Pickled as its fields (from the reader's process, a page's segments at a time): a quarter of the time a
        frozen dataclass's own state takes, which looks its fields up for each one."""
        return (Segment, (self.text, self.x0, self.x1, self.y0, self.y1, self.size, self.bold))


@dataclass(frozen=True)
class Page:
    number: int
    width: float
    height: float
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Opened:
    """The reader process's first answer about a file: its page count and title."""

    pages: int
    title: str


@dataclass(frozen=True)
class PageRead:
    page: Page
    scan: bytes = b""  # the page rendered (PGM) for OCR: it has no text layer
    figures: tuple[bytes, ...] = ()  # its large images rendered (PGM), with ocr_figures


class PdfError(Exception):
    """The file cannot be read: `reason` is the skip reason counted, the message names the file."""

    def __init__(self, reason: str, message: str):
        super().__init__(reason, message)
        self.reason = reason

    def __str__(self) -> str:
        return str(self.args[1])


def running_lines(pages: Sequence[Page]) -> set[tuple[int, int]]:
    """(page index, segment index) of the running heads and feet: a segment in a page's top or foot band whose text,
    digits aside, is there on REPEAT_PAGES pages or more (titles, page numbers, confidentiality lines); or one set
    apart from the page's text, not larger than the body, whose first word is at the same height on as many pages (a
    head naming the chapter: `Chapter 2: Structures`, `Chapter 3: Utilities`)."""
    if len(pages) < REPEAT_PAGES:
        return set()
    body = body_size(pages)
    where: dict[tuple[object, ...], list[tuple[int, int]]] = {}
    for p, page in enumerate(pages):
        for s, seg in enumerate(page.segments):
            if seg.y0 >= page.height * (1 - EDGE) or seg.y1 <= page.height * EDGE:
                text = _DIGITS.sub("#", _SPACE.sub(" ", seg.text.casefold()).strip())
                where.setdefault((text,), []).append((p, s))
                if seg.size < body * 1.15 and _apart(seg, page.segments):
                    where.setdefault((text.split(" ")[0], round(seg.y0 / 4), seg.y0 > page.height / 2), []).append(
                        (p, s)
                    )
    out: set[tuple[int, int]] = set()
    for spots in where.values():
        if len({p for p, _ in spots}) >= REPEAT_PAGES:
            out.update(spots)
    return out


def _apart(seg: Segment, segs: Sequence[Segment]) -> bool:
    """Nothing on the page lies within two of its line heights above or below it (beside it, on its row, may)."""
    for other in segs:
        if other is seg or (other.y0 < seg.y1 and seg.y0 < other.y1):
            continue
        if max(other.y0 - seg.y1, seg.y0 - other.y1) < 2 * seg.size:
            return False
    return True


def body_size(pages: Iterable[Page]) -> float:
    """The font size most of the text is in (counted by characters)."""
    sizes: Counter[float] = Counter()
    for page in pages:
        for seg in page.segments:
            sizes[round(seg.size * 2) / 2] += len(seg.text)
    return sizes.most_common(1)[0][0] if sizes else 10.0


@dataclass(frozen=True)
class Headings:
    """Which font sizes make headings, and their levels: larger sizes first; bold lines at the body size last."""

    body: float
    levels: dict[float, int]

    @classmethod
    def of(cls, pages: Sequence[Page]) -> Headings:
        body = body_size(pages)
        sizes = {round(s.size * 2) / 2 for p in pages for s in p.segments if s.size >= body * 1.15 and not _vertical(s)}
        big = sorted(sizes, reverse=True)
        return cls(body, {size: min(n + 1, 5) for n, size in enumerate(big)})

    def level(self, lines: list[Segment], text: str) -> int:
        """The heading level of a paragraph of `lines`, or 0 when it is not a heading."""
        if len(lines) > 2 or len(text) > 150 or not any(c.isalpha() for c in text):
            return 0
        size = round(lines[0].size * 2) / 2
        if size in self.levels:
            return self.levels[size]
        if all(s.bold for s in lines) and len(lines) == 1 and abs(size - self.body) < 1 and len(text) <= 80:
            return 0 if text.endswith(_ENDS) or text[:1].islower() else min(len(self.levels) + 1, 6)
        return 0


def columns(segs: list[Segment]) -> list[list[Segment]]:
    """The page's segments in reading order, cut into flows: two columns are read one after the other, between
    the segments that span both (a title, a figure's caption); one column is one flow."""
    if len(segs) < 6:
        return [sorted(segs, key=_top)]
    lo, hi = min(s.x0 for s in segs), max(s.x1 for s in segs)
    width = hi - lo
    gutter = _gutter(segs, lo + width * 0.3, lo + width * 0.7)
    if gutter is None:
        return [sorted(segs, key=_top)]
    left = [s for s in segs if s.x1 <= gutter]
    right = [s for s in segs if s.x0 >= gutter]
    wide = [s for s in segs if s.x0 < gutter < s.x1]
    narrow = sorted(s.x1 - s.x0 for s in left + right)
    if min(len(left), len(right)) < 3 or narrow[len(narrow) // 2] < width * 0.25 or len(wide) * 3 > len(segs):
        return [sorted(segs, key=_top)]
    flows: list[list[Segment]] = []
    for cut in [*sorted(wide, key=_top), None]:
        top = cut.y1 if cut is not None else -1e9
        for side in (left, right):
            above = sorted((s for s in side if s.y1 > top), key=_top)
            if above:
                flows.append(above)
            side[:] = [s for s in side if s.y1 <= top]
        if cut is not None:
            flows.append([cut])
    return flows


def _gutter(segs: list[Segment], lo: float, hi: float) -> float | None:
    """The middle of the widest band of x within [lo, hi] that no segment covers, if one is 4 points wide."""
    best_width, best_x = 0.0, None
    depth, free_from = 0, -1e9
    for x, step in sorted([(s.x0, 1) for s in segs] + [(s.x1, -1) for s in segs]):
        if depth == 0 and step == 1:
            a, b = max(free_from, lo), min(x, hi)
            if b - a > best_width:
                best_width, best_x = b - a, (a + b) / 2
        depth += step
        if depth == 0:
            free_from = x
    return best_x if best_width >= 4 else None


def _top(s: Segment) -> tuple[float, float]:
    return (-round(s.y1), s.x0)


def rows(flow: list[Segment]) -> list[list[Segment]]:
    """A flow's segments grouped into rows (segments whose vertical middles are within half a line), left to right."""
    out: list[list[Segment]] = []
    for seg in flow:
        mid = (seg.y0 + seg.y1) / 2
        if out and abs((out[-1][0].y0 + out[-1][0].y1) / 2 - mid) < max(seg.size, out[-1][0].size) * 0.5:
            out[-1].append(seg)
        else:
            out.append([seg])
    return [_item(sorted(r, key=lambda s: s.x0)) for r in out]


def _item(row: list[Segment]) -> list[Segment]:
    """A row whose first segment is a list's marker (a bullet, `3.`, `(a)`) as one segment: a list item."""
    if len(row) < 2 or not _MARKER.match(row[0].text):
        return row
    first, second = row[0], row[1]
    item = Segment(
        f"{first.text} {second.text}",
        first.x0,
        second.x1,
        min(first.y0, second.y0),
        max(first.y1, second.y1),
        second.size,
        second.bold,
    )
    return [item, *row[2:]]


def page_text(page: Page, drop: set[int], heads: Headings) -> str:
    """The page's text: paragraphs one a line, `#` headings, `|` table rows; blocks apart by a blank line."""
    segs = [s for i, s in enumerate(page.segments) if i not in drop]
    upright = [s for s in segs if not _vertical(s)]
    aside = [s.text for s in segs if _vertical(s)]  # a label along the margin: after the page's text
    return "\n\n".join([*_Writer(heads).flows(columns(upright)), *aside])


def _vertical(s: Segment) -> bool:
    """Text set along a margin, letters under each other: much taller than it is wide."""
    return len(s.text) >= 3 and s.y1 - s.y0 > 2.5 * max(s.x1 - s.x0, 1.0)


@dataclass
class _Flow:
    left: float
    right: float
    pitch: float  # the usual distance from one line's baseline to the next

    @classmethod
    def of(cls, lines: list[list[Segment]]) -> _Flow:
        single = [r[0] for r in lines if len(r) == 1] or [r[0] for r in lines]
        x0 = sorted(s.x0 for s in single)
        x1 = sorted(s.x1 for s in single)
        steps = sorted(a[0].y0 - b[0].y0 for a, b in zip(lines, lines[1:], strict=False) if a[0].y0 > b[0].y0)
        pitch = steps[len(steps) // 2] if steps else single[0].size * 1.2
        return cls(x0[len(x0) // 10], x1[len(x1) * 9 // 10], pitch)


class _Writer:
    def __init__(self, heads: Headings):
        self.heads = heads
        self.blocks: list[str] = []
        self.para: list[Segment] = []
        self.table: list[list[Segment]] = []

    def flows(self, flows: list[list[Segment]]) -> list[str]:
        for n, flow in enumerate(flows):
            if not flow:
                continue
            lines = rows(flow)
            shape = _Flow.of(lines)
            for i, row in enumerate(lines):
                if len(row) > 1:
                    self.end_paragraph()
                    self.table.append(row)
                    continue
                self.end_table()
                seg = row[0]
                if self.para and _breaks(self.para[-1], seg, shape, new_flow=i == 0 and n > 0):
                    self.end_paragraph()
                self.para.append(seg)
        self.end_paragraph()
        self.end_table()
        return self.blocks

    def end_paragraph(self) -> None:
        if not self.para:
            return
        text = joined(s.text for s in self.para)
        level = self.heads.level(self.para, text)
        if level:
            self.blocks.append(md.heading(level, text))
        elif text:
            self.blocks.append("\\" + text if text[:1] in ("#", "|") else text)
        self.para = []

    def end_table(self) -> None:
        table, self.table = self.table, []
        if len(table) == 1:  # one row of cells: a line with a wide gap ("1.2   Introduction")
            row = table[0]
            text = " ".join(s.text for s in row)
            self.para = [Segment(text, row[0].x0, row[-1].x1, row[0].y0, row[0].y1, row[0].size, row[0].bold)]
            self.end_paragraph()
        elif table:
            self.blocks.append("\n".join(table_lines(table)))


def _breaks(a: Segment, b: Segment, flow: _Flow, new_flow: bool) -> bool:
    """Whether line `b` starts a new paragraph after line `a`."""
    if abs(a.size - b.size) > 0.5 or a.bold != b.bold:
        return True
    if _MARKER.match(b.text.split(" ", 1)[0]):
        return True  # a list item
    ends = a.text.rstrip().endswith(_ENDS)
    if new_flow or b.y1 > a.y1:
        return ends or not b.text[:1].islower()
    if a.y0 - b.y0 > flow.pitch * 1.4:
        return True
    if b.x0 > flow.left + b.size * 0.8 and a.x0 <= flow.left + a.size * 0.8:
        return True  # an indented first line
    return ends and a.x1 < flow.right - a.size * 3  # a short last line


def joined(lines: Iterable[str]) -> str:
    """Lines of one paragraph as one line: a word hyphenated at a line end joined, ligatures unfolded."""
    parts: list[str] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if parts and parts[-1].endswith(HYPHENS) and parts[-1][-2:-1].isalpha() and line[:1].islower():
            parts[-1] = parts[-1][:-1]
        elif parts:
            parts.append(" ")
        parts.append(line)
    text = "".join(parts).translate(LIGATURES)
    return text.replace("\ufffe", "-").replace("\x02", "-") if "\ufffe" in text or "\x02" in text else text


def table_lines(table: list[list[Segment]]) -> list[str]:
    """Rows of aligned cells as a Markdown table, the first row its header; a cell goes to the header's column it
    overlaps most (or the nearest)."""
    header = table[0]
    width = len(header)
    lines = list(md.header_lines([s.text for s in header]))
    for row in table[1:]:
        cells = [""] * width
        for seg in row:
            j = max(range(width), key=lambda k: (_overlap(seg, header[k]), -abs(seg.x0 - header[k].x0)))
            cells[j] = f"{cells[j]} {seg.text}".strip()
        lines.append(md.table_row(cells, width))
    return lines


def _overlap(a: Segment, b: Segment) -> float:
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0))


def document_pages(pages: Sequence[Page]) -> tuple[list[str], int]:
    """Each page's text, and how many running heads and feet were dropped."""
    drop = running_lines(pages)
    by_page: dict[int, set[int]] = {}
    for p, s in drop:
        by_page.setdefault(p, set()).add(s)
    heads = Headings.of(pages)
    return [page_text(page, by_page.get(i, set()), heads) for i, page in enumerate(pages)], len(drop)


def paragraphs(text: str) -> str:
    """OCR's text (lines, blank lines between paragraphs) written as the layout writes a page: a paragraph a line."""
    blocks = (joined(block.splitlines()) for block in re.split(r"\n\s*\n", text))
    return "\n\n".join("\\" + b if b[:1] in ("#", "|") else b for b in blocks if b)
