"""What a command that reads files starts before the use case loads: the PDF reader's process, when the path has a
PDF, forked from this one while it has no other thread, so that its start (numpy and PDFium: about 0.1 s) overlaps
this process's own (the use case's imports) instead of waiting at the first page."""

from __future__ import annotations

import os
from pathlib import Path

from ragvps.config import Settings
from ragvps.ingest import pdfproc

LOOK = 2000  # the names a folder is looked through for a PDF, at most


def start_readers(settings: Settings, path: str) -> None:
    """Start the PDF reader's process if `path` is a PDF, or a folder with one among its first LOOK names."""
    if _has_pdf(Path(path)):
        pdfproc.start(settings.chunk.pdf_max_memory_mb)


def _has_pdf(path: Path) -> bool:
    if not path.is_dir():
        return path.suffix.lower() == ".pdf"
    seen = 0
    for _, dirs, files in os.walk(path):
        if any(name.lower().endswith(".pdf") for name in files):
            return True
        seen += len(dirs) + len(files)
        if seen > LOOK:
            return False
    return False
