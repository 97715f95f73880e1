"""OpenDocument text (.odt) as Markdown: `text:h` headings by outline level, paragraphs, list items, and
tables (a repeated or spanned cell written once per grid cell it covers). Parsed with defusedxml."""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

from ragvps.ingest.bounds import Meter, SkipFile
from ragvps.ingest.formats import md
from ragvps.ingest.formats.zipguard import open_zip
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document

_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_DC = "{http://purl.org/dc/elements/1.1/}"
MAX_REPEAT = 1000  # a repeated row or column counted beyond this is a styling run to the sheet's edge


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    with open_zip(source, "an OpenDocument text") as archive:
        meter = Meter.of(source, archive)
        try:
            content = fromstring(archive.read("content.xml"), forbid_dtd=True)
            meta = fromstring(archive.read("meta.xml"), forbid_dtd=True) if "meta.xml" in archive.namelist() else None
        except (KeyError, ParseError, DefusedXmlException, zipfile.BadZipFile) as exc:
            raise SkipFile(
                "corrupt file",
                f"{source.rel}: not a readable OpenDocument text ({exc.__class__.__name__}: {str(exc)[:200]}); skipped",
            ) from exc
    body = content.find(f"{_OFFICE}body/{_OFFICE}text")
    blocks = [b for b in _blocks(body, 0, meter) if b] if body is not None else []
    if not blocks:
        raise SkipFile("no text", f"{source.rel}: an empty document, no text; skipped")
    title = " ".join((meta.findtext(f".//{_DC}title") or "").split()) if meta is not None else ""
    return [Document(source.rel, source.rel, title or Path(source.rel).stem, "\n\n".join(blocks), "odt")]


def _blocks(parent: Any, depth: int, meter: Meter) -> Iterator[str]:
    """The body's blocks as Markdown, each counted by `meter` before the next is made."""
    for block in _unmetered(parent, depth, meter):
        meter.add(len(block) + 2)
        yield block


def _unmetered(parent: Any, depth: int, meter: Meter) -> Iterator[str]:
    for el in parent:
        if el.tag == f"{_TEXT}h":
            yield md.heading(int(el.get(f"{_TEXT}outline-level", "1") or 1), _text(el))
        elif el.tag == f"{_TEXT}p":
            yield md.paragraph(_text(el))
        elif el.tag == f"{_TEXT}list":
            items = [line for item in el.iter(f"{_TEXT}list-item") for line in _item(item, depth)]
            yield "\n".join(items)
        elif el.tag == f"{_TABLE}table":
            yield md.table(_rows(el, meter))
        elif el.tag == f"{_TEXT}section":
            yield from _unmetered(el, depth, meter)


def _item(item: Any, depth: int) -> Iterator[str]:
    for child in item:
        if child.tag in (f"{_TEXT}p", f"{_TEXT}h") and (text := md.clean(_text(child))):
            yield "  " * depth + "- " + text


def _rows(table: Any, meter: Meter) -> list[list[str]]:
    """The table's grid, its repeated rows and cells counted (by `meter`) before they are written."""
    rows: list[list[str]] = []
    counted = meter.chars
    for row in table.iter(f"{_TABLE}table-row"):
        cells: list[str] = []
        for cell in row:
            if cell.tag not in (f"{_TABLE}table-cell", f"{_TABLE}covered-table-cell"):
                continue
            repeat = min(int(cell.get(f"{_TABLE}number-columns-repeated", "1") or 1), MAX_REPEAT)
            text = " ".join(_text(p) for p in cell.iter(f"{_TEXT}p"))
            if cell.tag == f"{_TABLE}covered-table-cell" and cells:
                text = text or cells[-1]  # a merged cell's text in each cell it covers
            cells += [text] * repeat
        repeat = min(int(row.get(f"{_TABLE}number-rows-repeated", "1") or 1), MAX_REPEAT)
        meter.add(repeat * sum(len(c) + 3 for c in cells))
        rows += [cells] * repeat
    meter.chars = counted  # the table is counted again, whole, as a block
    return rows


def _text(el: Any) -> str:
    """An element's text: spaces (`text:s`), tabs and line breaks as whitespace, notes and annotations dropped."""
    out: list[str] = [el.text or ""]
    for child in el:
        tag = child.tag
        if tag == f"{_TEXT}s":
            out.append(" " * min(int(child.get(f"{_TEXT}c", "1") or 1), 100))
        elif tag in (f"{_TEXT}tab", f"{_TEXT}line-break"):
            out.append(" ")
        elif tag not in (f"{_TEXT}note", f"{_OFFICE}annotation"):
            out.append(_text(child))
        out.append(child.tail or "")
    return "".join(out)
