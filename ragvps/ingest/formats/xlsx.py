"""Excel .xlsx (and .xlsm, read as data: macros are never run) as one `##` section per sheet holding a
Markdown table (the header found as md.sheet_lines says; columns empty in every row dropped). Cells are the
values Excel saved (a formula's last result, never re-computed). Rows are streamed twice in read-only mode:
once to find the used columns, once to write."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import openpyxl

from ragvps.ingest.bounds import Meter, SkipFile
from ragvps.ingest.formats import md
from ragvps.ingest.formats.zipguard import has_macros, open_zip
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    with open_zip(source, "an Excel workbook") as archive:
        meter = Meter.of(source, archive)
        if has_macros(archive):
            warn(f"{source.rel}: has macros; read as data only (ragvps never runs them)")
    sections: list[str] = []
    try:
        book = openpyxl.load_workbook(source.path, read_only=True, data_only=True, keep_links=False)
        try:
            for sheet in book.worksheets:
                text = sheet_markdown(sheet.title, partial(sheet.iter_rows, values_only=True), meter)
                if text:
                    sections.append(text)
            title = (book.properties.title or "").strip()
        finally:
            book.close()
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError) as exc:
        raise SkipFile(
            "corrupt file",
            f"{source.rel}: not a readable Excel workbook ({exc.__class__.__name__}: {str(exc)[:200]}); skipped",
        ) from exc
    if not sections:
        raise SkipFile("no text", f"{source.rel}: every sheet is empty; skipped")
    return [Document(source.rel, source.rel, title or Path(source.rel).stem, "\n\n".join(sections), "xlsx")]


def sheet_markdown(name: str, rows: Callable[[], Iterator[Sequence[Any]]], meter: Meter | None = None) -> str:
    """A sheet as `## name` and its lines; "" when no cell has a value. `meter` counts each row's text as it is
    written (a cell pointing at a long shared string many times fails the file, not the machine)."""
    used: set[int] = set()
    for row in rows():
        used.update(i for i, v in enumerate(row) if v is not None and value(v))
    if not used:
        return ""
    columns = sorted(used)
    picked = ([value(row[i]) if i < len(row) else "" for i in columns] for row in rows())
    if meter is not None:
        picked = (_counted(cells, meter) for cells in picked)
    return "\n".join([md.heading(2, name), "", *md.sheet_lines(picked)])


def _counted(cells: list[str], meter: Meter) -> list[str]:
    meter.add(sum(len(c) + 3 for c in cells))
    return cells


def value(v: object) -> str:
    """A cell as text: whole floats without `.0`, dates in ISO form, None as empty."""
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    if isinstance(v, dt.datetime) and v.time() == dt.time():
        return v.date().isoformat()
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    return md.clean(v)
