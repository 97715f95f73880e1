"""A PDF as one document: its pages read by PDFium in the reader's own process (ingest/pdfproc.py), laid out in
reading order (ingest/pdflayout.py), the pages without a text layer read by OCR (and with ocr_figures the large
images of the others); `metadata["pages"]` maps character offsets to page numbers, for citations."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragvps.ingest import pdfproc
from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.ocr import OcrFailed, OcrOptions, pdf_page_text
from ragvps.ingest.pdflayout import Opened, Page, PdfError, document_pages, paragraphs
from ragvps.ingest.pdfproc import PdfLimits
from ragvps.records import Document

log = logging.getLogger(__name__)


@dataclass
class _Read:
    """What the reader process gave for one file, OCR's text of its scanned pages and figures beside it."""

    rel: str
    ocr: OcrOptions | None
    opened: Opened = Opened(0, "")
    pages: list[Page] = field(default_factory=list)
    scanned: dict[int, str] = field(default_factory=dict)  # page number -> OCR's text
    figures: dict[int, list[str]] = field(default_factory=dict)
    failed: list[OcrFailed] = field(default_factory=list)

    def ocr_read(self, image: bytes, number: int) -> str:
        if self.ocr is None:
            return ""
        try:
            return paragraphs(pdf_page_text(image, self.rel, number, self.opened.pages, self.ocr))
        except OcrFailed as exc:  # the text pages are kept; the page is named in a warning
            self.failed.append(exc)
            self.ocr = None if exc.reason == "needs tesseract" else self.ocr
            return ""


def load_pdf(
    path: Path, rel: str, limits: PdfLimits, ocr: OcrOptions | None = None, warn: Callable[[str], None] | None = None
) -> Document:
    """The PDF at `path` (`rel` in its folder) as one document; SkipFile naming it when it cannot be read."""
    read = _Read(rel, ocr)
    figures = ocr is not None and ocr.figures
    try:
        for item in pdfproc.read(str(path), rel, limits, scans=ocr is not None, figures=figures):
            if isinstance(item, Opened):
                read.opened = item
                continue
            read.pages.append(item.page)
            number = item.page.number
            if item.scan:
                read.scanned[number] = read.ocr_read(item.scan, number)
            for image in item.figures:
                read.figures.setdefault(number, []).append(read.ocr_read(image, number))
    except PdfError as exc:
        raise SkipFile(exc.reason, str(exc)) from exc
    return _document(read, warn or log.warning)


def _document(read: _Read, warn: Callable[[str], None]) -> Document:
    texts, dropped = document_pages(read.pages)
    parts: list[str] = []
    pages: list[list[int]] = []
    offset = 0
    for page, text in zip(read.pages, texts, strict=True):
        text = read.scanned.get(page.number) or text
        figure = "\n\n".join(t for t in read.figures.get(page.number, []) if t)
        text = f"{text}\n\n{figure}" if text and figure else text or figure
        if not text:
            continue
        pages.append([offset, page.number])
        parts.append(text.replace("\x00", ""))
        offset += len(parts[-1]) + 2
    if not parts and read.failed:
        raise SkipFile(read.failed[0].reason, str(read.failed[0]))
    for page_failed in read.failed:
        warn(str(page_failed))
    if not parts:
        raise SkipFile("PDF without text", f"{read.rel}: no text layer (a scanned or image-only PDF?), skipped")
    scanned = sum(1 for t in read.scanned.values() if t)
    meta: dict[str, object] = {"pages": pages, "page_count": read.opened.pages}
    if scanned:
        meta["ocr_pages"] = scanned
    if dropped:
        meta["running_lines"] = dropped  # running heads and feet dropped
    title = read.opened.title or Path(read.rel).stem
    return Document(read.rel, read.rel, title, "\n\n".join(parts), "pdf", meta)
