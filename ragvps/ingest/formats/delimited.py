"""CSV and TSV as one Markdown table whose first row is the header. The encoding comes from a byte order mark
(UTF-8, UTF-16, UTF-32), else UTF-8, else Windows-1252; the delimiter from csv.Sniffer on the first 64 KB
(a .tsv defaults to tab). Rows are streamed: memory grows with the text written, never with a parse tree.
A large file is read in parts instead (`parts`, used by ragvps.ingest.parts): PART_ROWS rows at a time, each
part a document whose table repeats the title and header lines, so memory stays flat in the file's size."""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.formats import md
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document

SAMPLE = 1 << 16
PART_ROWS = 5000  # table rows in one part of a large file
FIELD_LIMIT = 1 << 20  # characters in one field; a longer one is a broken file
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    with _opened(source) as (f, dialect, codec):
        text = _markdown(f, dialect, source.rel)
    if "\ufffd" in text and codec == "cp1252":
        warn(f"{source.rel}: not UTF-8; read as Windows-1252")
    return [
        Document(
            source.rel,
            source.rel,
            Path(source.rel).stem,
            text,
            "csv",
            {"encoding": codec, "delimiter": dialect.delimiter},
        )
    ]


Dialect = type[csv.Dialect] | csv.Dialect


@contextmanager
def _opened(source: SourceFile) -> Iterator[tuple[io.TextIOBase, Dialect, str]]:
    """The file open at its start, its dialect and encoding; SkipFile when it is binary or empty."""
    codec = encoding(source.path)
    with source.path.open("r", encoding=codec, newline="", errors="replace") as f:
        sample = f.read(SAMPLE)
        if "\x00" in sample:
            raise SkipFile("binary", f"{source.rel}: binary content, not {source.path.suffix} text; skipped")
        if not sample.strip():
            raise SkipFile("no text", f"{source.rel}: an empty table; skipped")
        dialect = _dialect(sample, source.path.suffix.lower())
        f.seek(0)
        old = csv.field_size_limit(FIELD_LIMIT)
        try:
            yield f, dialect, codec
        except csv.Error as exc:
            raise SkipFile("unreadable", f"{source.rel}: not a readable table ({exc}); skipped") from exc
        finally:
            csv.field_size_limit(old)


def table_rows(source: SourceFile) -> int:
    """The table rows `parts` will give (cheaply: the rows are parsed, not written); SkipFile when the file
    cannot be read as a table, found before anything of it is stored."""
    with _opened(source) as (f, dialect, _):
        rows = csv.reader(f, dialect)
        head = md.sheet_head(rows)
        if head is None:
            raise SkipFile("no text", f"{source.rel}: an empty table; skipped")
        return head.buffered + sum(1 for r in rows if md.filled_row(r))


def parts(source: SourceFile, warn: Callable[[str], None], size: int | None = None) -> Iterator[Document]:
    """The table `size` rows (PART_ROWS) at a time, each part a document `<file>#rows-<first>-<last>` whose
    text is the title and header lines then its rows; SkipFile when the file cannot be read as a table."""
    size = size or PART_ROWS
    stem = Path(source.rel).stem
    with _opened(source) as (f, dialect, codec):
        head = md.sheet_head(csv.reader(f, dialect))
        if head is None:
            raise SkipFile("no text", f"{source.rel}: an empty table; skipped")
        meta: dict[str, object] = {"encoding": codec, "delimiter": dialect.delimiter}
        first, lines = 1, list(head.lines)
        for line in head.rows:
            lines.append(line)
            if len(lines) - len(head.lines) == size:
                yield _part(source.rel, stem, first, size, lines, meta)
                first, lines = first + size, list(head.lines)
        if len(lines) > len(head.lines) or first == 1:
            yield _part(source.rel, stem, first, len(lines) - len(head.lines), lines, meta)
    if codec == "cp1252":
        warn(f"{source.rel}: not UTF-8; read as Windows-1252")


def _part(rel: str, stem: str, first: int, rows: int, lines: list[str], meta: dict[str, object]) -> Document:
    last = first + max(rows, 1) - 1
    return Document(
        f"{rel}#rows-{first}-{last}",
        rel,
        f"{stem}, rows {first}-{last}",
        "\n".join(lines),
        "csv",
        meta | {"rows": [first, last]},
    )


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


def _dialect(sample: str, ext: str) -> Dialect:
    try:
        return csv.Sniffer().sniff(sample[: sample.rfind("\n") + 1] or sample, delimiters=",;\t|")
    except csv.Error:
        return csv.excel_tab if ext == ".tsv" else csv.excel


def _markdown(f: io.TextIOBase, dialect: Dialect, rel: str) -> str:
    """The rows as Markdown lines, written as they are read."""
    out = io.StringIO()
    for line in md.sheet_lines(csv.reader(f, dialect)):
        out.write(line)
        out.write("\n")
    if not out.tell():
        raise SkipFile("no text", f"{rel}: an empty table; skipped")
    return out.getvalue().rstrip("\n")
