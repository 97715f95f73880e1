"""CSV and TSV as one Markdown table whose first row is the header. The encoding comes from a byte order mark
(UTF-8, UTF-16, UTF-32), else UTF-8, else Windows-1252; the delimiter from csv.Sniffer on the first 64 KB
(a .tsv defaults to tab). Rows are streamed: memory grows with the text written, never with a parse tree."""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Callable
from pathlib import Path

from ragvps.ingest.formats import md
from ragvps.ingest.sources import SkipFile, SourceFile
from ragvps.records import Document

SAMPLE = 1 << 16
FIELD_LIMIT = 1 << 20  # characters in one field; a longer one is a broken file
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    codec = encoding(source.path)
    with source.path.open("r", encoding=codec, newline="", errors="replace") as f:
        sample = f.read(SAMPLE)
        if "\x00" in sample:
            raise SkipFile("binary", f"{source.rel}: binary content, not {source.path.suffix} text; skipped")
        if not sample.strip():
            raise SkipFile("no text", f"{source.rel}: an empty table; skipped")
        dialect = _dialect(sample, source.path.suffix.lower())
        f.seek(0)
        text = _markdown(f, dialect, source.rel)
    if "\ufffd" in text and codec == "cp1252":
        warn(f"{source.rel}: not UTF-8; read as Windows-1252")
    return [Document(source.rel, source.rel, Path(source.rel).stem, text, "csv", {"encoding": codec,
                                                                                  "delimiter": dialect.delimiter})]


def encoding(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(SAMPLE)
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not a character cut at the sample's end
            return "cp1252"
    return "utf-8"


def _dialect(sample: str, ext: str) -> type[csv.Dialect] | csv.Dialect:
    try:
        return csv.Sniffer().sniff(sample[: sample.rfind("\n") + 1] or sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel_tab if ext == ".tsv" else csv.excel


def _markdown(f: io.TextIOBase, dialect: type[csv.Dialect] | csv.Dialect, rel: str) -> str:
    """The rows as Markdown lines, written as they are read."""
    out = io.StringIO()
    old = csv.field_size_limit(FIELD_LIMIT)
    try:
        for line in md.sheet_lines(csv.reader(f, dialect)):
            out.write(line)
            out.write("\n")
    except csv.Error as exc:
        raise SkipFile("unreadable", f"{rel}: not a readable table ({exc}); skipped") from exc
    finally:
        csv.field_size_limit(old)
    if not out.tell():
        raise SkipFile("no text", f"{rel}: an empty table; skipped")
    return out.getvalue().rstrip("\n")
