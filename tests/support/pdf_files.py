"""PDFs written by hand for the reader's tests and bench/pdf_bench.py: text runs placed where a test wants them (two
columns, running heads, headings in a larger bold font, a table, words hyphenated at a line end, ligatures), in the
order a test wants them in the content stream. No PDF library needed: Helvetica and Helvetica-Bold are standard."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

WIDTH, HEIGHT = 612, 792
# Helvetica's StandardEncoding has the fi and fl ligature glyphs at these codes (PDFium reads them as U+FB01/2).
_CODES = {"\ufb01": b"\xae", "\ufb02": b"\xaf"}


@dataclass(frozen=True)
class Run:
    """One line of text at (x, y), its baseline, in points from the page's lower left corner."""

    x: float
    y: float
    text: str
    size: float = 10
    bold: bool = False


def _string(text: str) -> bytes:
    out = bytearray(b"(")
    for ch in text:
        if ch in _CODES:
            out += _CODES[ch]
        elif ch in "()\\":
            out += b"\\" + ch.encode()
        else:
            out += ch.encode("latin-1", "replace")
    return bytes(out + b")")


def content(runs: list[Run]) -> bytes:
    return b"\n".join(
        b"BT /F%d %g Tf %g %g Td %s Tj ET" % (2 if r.bold else 1, r.size, r.x, r.y, _string(r.text)) for r in runs
    )


def write_pdf(path: Path, streams: list[bytes], compress: bool = True) -> Path:
    """A PDF of one page per content stream, Helvetica as /F1 and Helvetica-Bold as /F2."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold >>",
    ]
    refs = []
    for stream in streams:
        objects.append(stream_object(stream, compress))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> >>" % (WIDTH, HEIGHT, len(objects))
        )
        refs.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(refs), len(refs))
    return write_objects(path, objects)


def stream_object(data: bytes, compress: bool = True) -> bytes:
    if compress:
        data = zlib.compress(data)
    flate = b" /Filter /FlateDecode" if compress else b""
    return b"<< /Length %d%s >>\nstream\n" % (len(data), flate) + data + b"\nendstream"


def write_objects(path: Path, objects: list[bytes]) -> Path:
    """A PDF file of these objects (numbered from 1; the first the catalog) with its cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def wrap(text: str, width: float, size: float) -> list[str]:
    """`text` cut into lines about `width` points wide (Helvetica averages about half its size a character); a long
    word that would pass the end is hyphenated there, as TeX does."""
    per_line = max(10, int(width / (size * 0.5)))
    lines: list[str] = []
    line = ""
    for word in text.split():
        if len(line) + 1 + len(word) <= per_line:
            line = f"{line} {word}".strip()
            continue
        room = per_line - len(line) - 2
        if room >= 3 and len(word) - room >= 3 and word.isalpha():
            lines.append(f"{line} {word[:room]}-".strip())
            line = word[room:]
        else:
            lines.append(line)
            line = word
    return [*lines, line] if line else lines


@dataclass
class Book:
    """A two-column book: per page a running head (its title) and a foot (a confidentiality line, the page number); a
    chapter starts a page, its heading in 16 pt bold across both columns; paragraphs in 10 pt, hyphenated at line
    ends, the first line of each indented."""

    title: str
    interleave: bool = False  # write the two columns' lines alternately (reading order only from the geometry)
    column: float = 250
    gutter: float = 32
    size: float = 10
    leading: float = 12

    def pages(self, chapters: list[tuple[str, list[str]]]) -> list[list[Run]]:
        left, top, bottom = 48.0, HEIGHT - 90.0, 80.0
        pages: list[list[Run]] = []
        cols: list[list[Run]] = [[], []]
        head: list[Run] = []
        col, y = 0, top

        def new_page(chapter: str) -> None:
            nonlocal col, y, cols, head
            if head or cols[0]:
                pages.append(self._page(head, cols, len(pages) + 1))
            head, cols, col, y = [Run(left, HEIGHT - 50, self.title, 8)], [[], []], 0, top

        for chapter, paragraphs in chapters:
            new_page(chapter)
            head.append(Run(left, y, chapter, 16, True))
            y -= 34
            for paragraph in paragraphs:
                for n, line in enumerate(wrap(paragraph, self.column - 12, self.size)):
                    if y < bottom:
                        col, y = col + 1, top - 34 if not cols[1] and head[1:] else top
                        if col == 2:
                            new_page(chapter)
                    indent = 12 if n == 0 else 0
                    cols[col].append(Run(left + col * (self.column + self.gutter) + indent, y, line, self.size))
                    y -= self.leading
                y -= self.leading * 0.8
        pages.append(self._page(head, cols, len(pages) + 1))
        return pages

    def _page(self, head: list[Run], cols: list[list[Run]], number: int) -> list[Run]:
        foot = [Run(48, 40, "Confidential: for the harbour board only", 7), Run(WIDTH - 60, 40, str(number), 9)]
        if not self.interleave:
            return [*head, *cols[0], *cols[1], *foot]
        mixed = [r for pair in zip(cols[0], cols[1], strict=False) for r in pair]
        longer = cols[0] if len(cols[0]) > len(cols[1]) else cols[1]
        return [*head, *mixed, *longer[len(mixed) // 2 :], *foot]

    def write(self, path: Path, chapters: list[tuple[str, list[str]]]) -> Path:
        return write_pdf(path, [content(runs) for runs in self.pages(chapters)])
