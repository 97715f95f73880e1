"""Readers for document formats beyond text: one small module per format, one registry by extension.

Each reader turns a file into a Document whose text keeps the file's structure in Markdown (headings as `#`,
tables as Markdown tables), so the structure chunker gives heading paths and keeps table rows with their
header. The registry holds module names only: a reader's module (and its library) is imported when a file
of its kind is read, never at import time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reader:
    kind: str  # the Document's kind
    module: str  # ragvps.ingest.formats.<module>.read(source, warn) -> list[Document]
    library: str | None = None  # the module it needs beyond the core dependencies, checked before reading
    extra: str | None = None  # the optional dependency group that library comes from


READERS: dict[str, Reader] = {
    ".docx": Reader("docx", "docx", "docx", "office"),
    ".docm": Reader("docx", "docx", "docx", "office"),
    ".pptx": Reader("pptx", "pptx", "pptx", "office"),
    ".pptm": Reader("pptx", "pptx", "pptx", "office"),
    ".xlsx": Reader("xlsx", "xlsx"),
    ".xlsm": Reader("xlsx", "xlsx"),
    ".csv": Reader("csv", "delimited"),
    ".tsv": Reader("csv", "delimited"),
    ".epub": Reader("epub", "epub"),
    ".odt": Reader("odt", "odt"),
    ".rtf": Reader("rtf", "rtf"),
}

# Kinds whose text is Markdown the structure chunker parses (tables included).
MARKDOWN_KINDS = frozenset({"markdown", "docx", "pptx", "odt", "rtf"})
# Kinds whose text is only `#` headings, Markdown tables (one row a line) and paragraphs (one a line): scanned line by
# line (no parser), so a million-row sheet costs memory in proportion to its text only. A PDF's text is written so
# by ingest/pdflayout.py.
SHEET_KINDS = frozenset({"xlsx", "csv", "pdf"})
