"""What a command that reads files starts before its use case loads: the PDF readers' processes, when its path has a
PDF, forked from this process while it has no other thread, so that their start (numpy and PDFium: about 0.15 s)
overlaps this process's own (the command line parsed, the use case's imports) instead of waiting at the first page.
Their memory is bounded at their first file, by its settings (ingest/pdfproc.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ragvps.ingest import pdfproc

LOOK = 2000  # the names a folder is looked through for a PDF, at most
COMMANDS = ("chunk", "ingest")  # the commands that read the files their path names


def start_readers(path: str) -> None:
    """Start the PDF readers if `path` is a PDF, or a folder with one among its first LOOK names."""
    if _has_pdf(Path(path)):
        pdfproc.start()


def start_for_arguments(command: str | None, args: Sequence[str]) -> None:
    """Start the PDF readers before the command line is parsed (about 0.15 s) where it reads a path with a PDF."""
    if pdf_path(command, args) is not None:
        pdfproc.start()


def pdf_path(command: str | None, args: Sequence[str]) -> str | None:
    """The first of a reading command's (COMMANDS) words `args` that names a PDF or a folder with one. A guess from the
    words alone: a wrong one starts readers no file needs (they go with the command), or leaves them to
    `start_readers`."""
    if command not in COMMANDS:
        return None
    return next((w for w in args if not w.startswith("-") and os.path.exists(w) and _has_pdf(Path(w))), None)


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
