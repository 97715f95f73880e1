"""Rich Text Format with striprtf (a small pure-Python parser): its paragraphs, and its tables (which striprtf
writes as `a|b|` lines) as Markdown tables. RTF headings are only formatting, so they stay paragraphs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from striprtf.striprtf import rtf_to_text

from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.formats import md
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document

MAX_BYTES = 64 << 20  # RTF is read whole; embedded pictures make some files large


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    if source.path.stat().st_size > MAX_BYTES:
        raise SkipFile("too large", f"{source.rel}: an RTF file over {MAX_BYTES >> 20} MB; skipped")
    raw = source.path.read_bytes()
    if not raw.lstrip().startswith(b"{\\rtf"):
        raise SkipFile(
            "not the format its name says", f"{source.rel}: named .rtf but it does not start with `{{\\rtf`; skipped"
        )
    text = rtf_to_text(raw.decode("latin-1"), errors="replace").replace("\x00", "")
    text = _markdown([line.strip() for line in text.splitlines()])
    if not text:
        raise SkipFile("no text", f"{source.rel}: an RTF document without text; skipped")
    return [Document(source.rel, source.rel, Path(source.rel).stem, text, "rtf")]


def _markdown(lines: list[str]) -> str:
    blocks: list[str] = []
    rows: list[list[str]] = []
    for line in [*lines, ""]:
        if line.endswith("|") and "|" in line[:-1] or line == "|":
            rows.append(line[:-1].split("|"))
            continue
        if rows:
            blocks.append(md.table(rows))
            rows = []
        if line:
            blocks.append(md.paragraph(line))
    return "\n\n".join(b for b in blocks if b)
