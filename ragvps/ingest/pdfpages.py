"""PDFium's side of the PDF reader (pypdfium2), run in the reader's own process (ingest/pdfproc.py): each page's text
as segments (runs of text on one line, with their boxes, font size and weight) for ingest/pdflayout.py, and the
pages without a text layer rendered for OCR at the resolution Tesseract wants (300 dpi), as PGM images.

The characters' boxes come from one call per character into PDFium (about a microsecond each) into one array;
the lines are cut into segments by numpy, in one pass over the page.
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pypdfium2 as pdfium
import pypdfium2.raw as raw

from ragvps.ingest.pdflayout import Opened, Page, PageRead, PdfError, Segment

SCAN_DPI = 300  # Tesseract reads best at 300 dpi
MAX_PIXELS = 80_000_000  # a page rendered larger than this is rendered at a lower resolution
FIGURE_SHARE = 0.05  # an image covering this share of a page with text is a figure (read by OCR with ocr_figures)
SCAN_CHARS = 16  # a page with fewer characters and an image over half of it is a scan (a page number added)
_BOLD = ("bold", "black", "heavy", "demi", "semibold")
_SURROGATE = re.compile("[\ud800-\udfff]")
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_JOINER = "\u2060"
_LOOSE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
_OBJECT = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
_FONT = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def open_pdf(path: str, rel: str) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == raw.FPDF_ERR_PASSWORD:
            raise PdfError("encrypted PDF", f"{rel}: encrypted PDF (needs a password), skipped") from exc
        why = str(exc).removeprefix("Failed to load document ").strip("().") or "PDFium cannot open it"
        raise PdfError("unreadable PDF", f"{rel}: not a readable PDF ({why}), skipped") from exc


def open_counted(path: str, rel: str, max_pages: int) -> tuple[pdfium.PdfDocument, Opened]:
    """The document open, with its page count (within `max_pages`) and title."""
    doc = open_pdf(path, rel)
    count = len(doc)
    if count > max_pages:
        doc.close()
        raise PdfError(
            "too many pages",
            f"{rel}: {count:,} pages, more than pdf_max_pages={max_pages:,}; skipped (raise pdf_max_pages to read it)",
        )
    title = (doc.get_metadata_value("Title") or "").replace("\x00", "").strip()
    return doc, Opened(count, title)


def pages(doc: pdfium.PdfDocument, share: int, shares: int, scans: bool, figures: bool) -> Iterator[PageRead]:
    """The document's pages numbered share + 1, share + 1 + shares, ...: one reader's share of them."""
    for number in range(share + 1, len(doc) + 1, shares):
        page = doc[number - 1]
        try:
            yield read_page(page, number, scans, figures)
        finally:
            page.close()


def read_page(page: pdfium.PdfPage, number: int, scans: bool, figures: bool) -> PageRead:
    width, height = page.get_size()
    textpage = page.get_textpage()
    try:
        segs, chars = segments(textpage)
    finally:
        textpage.close()
    out = Page(number, width, height, segs)
    if not scans or (chars >= SCAN_CHARS and not figures):
        return PageRead(out)
    images = _images(page, width * height)
    if chars < SCAN_CHARS and (not chars or any(area > 0.5 * width * height for area, _ in images)):
        return PageRead(Page(number, width, height, ()), scan=render(page))
    if not figures:
        return PageRead(out)
    shots = [render(page, box) for area, box in images[:4] if area >= FIGURE_SHARE * width * height]
    return PageRead(out, figures=tuple(shots))


def segments(textpage: pdfium.PdfTextPage) -> tuple[tuple[Segment, ...], int]:
    """The page's segments in PDFium's order, and how many characters it shows. Only the first and last character
    of each word are measured: a segment is cut between words (another column, the next cell of a table)."""
    n = textpage.count_chars()
    if n <= 0:
        return (), 0
    text = indexed_text(textpage, n)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    space = (codes <= 32) | (codes == 0xA0)
    # a hyphen ends a word part too: PDFium joins a word hyphenated at a line end without a line break between
    hyphen = (codes == 0x2D) | (codes == 0xFFFE) | (codes == 0x02) | (codes == 0xAD) | (codes == 0x2010)
    after = space | hyphen
    firsts = np.flatnonzero(~space & np.concatenate(([True], after[:-1])))
    lasts = np.flatnonzero(~space & np.concatenate((space[1:], [True])) | (hyphen & ~space))
    if firsts.size != lasts.size:  # not expected; then every character is measured
        firsts = lasts = np.flatnonzero(~space)
    words = _words(textpage, firsts, lasts)
    if words is None:
        return (), 0
    keep, (left, top, right, bottom) = words
    firsts, lasts = firsts[keep], lasts[keep]
    high = np.maximum(top - bottom, 0.1)
    lines = np.cumsum(codes == 10)[firsts]
    gap = left[1:] - right[:-1]
    most = np.maximum(high[1:], high[:-1])
    shared = np.minimum(top[1:], top[:-1]) - np.maximum(bottom[1:], bottom[:-1])
    above = np.minimum(right[1:], right[:-1]) - np.maximum(left[1:], left[:-1])  # stacked: vertical text
    stacked = above > 0.5 * np.minimum(right[1:] - left[1:], right[:-1] - left[:-1])
    same = lines[1:] == lines[:-1]
    cut = ~same | (gap > most * 1.3) | (left[1:] < left[:-1] - most * 0.5)
    cut |= (shared < 0.3 * np.minimum(high[1:], high[:-1])) & ~(same & stacked)
    starts = np.concatenate(([0], np.flatnonzero(cut) + 1))
    ends = np.concatenate((starts[1:], [firsts.size])) - 1
    x0, x1 = np.minimum.reduceat(left, starts), np.maximum.reduceat(right, starts)
    y0, y1 = np.minimum.reduceat(bottom, starts), np.maximum.reduceat(top, starts)
    sizes = np.maximum.reduceat(high, starts).tolist()  # the loose box's height: about the font size, as drawn
    heads = firsts[starts].tolist()
    bolds = _bolds(textpage, heads)
    out = []
    for k, (a, b) in enumerate(zip(heads, lasts[ends].tolist(), strict=True)):
        seg_text = " ".join(text[a : b + 1].split()).replace(_JOINER, "")
        out.append(Segment(seg_text, float(x0[k]), float(x1[k]), float(y0[k]), float(y1[k]), sizes[k], bolds[k]))
    return tuple(out), int((~space).sum())


def indexed_text(textpage: pdfium.PdfTextPage, n: int) -> str:
    """The page's text, one character for each of PDFium's `n` character indices. A character outside the BMP
    (a mathematical italic epsilon) has two indices, its UTF-16 surrogates: it is put at the first and a word joiner
    at the second (dropped from the segment's text); a surrogate without its other half is U+FFFD."""
    text: str = textpage.get_text_range()
    if len(text) != n:
        text = "".join(chr(raw.FPDFText_GetUnicode(textpage.raw, k) or 32) for k in range(n))
    if not _SURROGATE.search(text):
        return text
    text = _PAIR.sub(lambda m: m[0].encode("utf-16-le", "surrogatepass").decode("utf-16-le") + _JOINER, text)
    return _SURROGATE.sub("\ufffd", text)


Boxes = np.ndarray[tuple[int, int], np.dtype[np.float32]]


def _words(
    textpage: pdfium.PdfTextPage,
    firsts: np.ndarray[tuple[int], np.dtype[np.intp]],
    lasts: np.ndarray[tuple[int], np.dtype[np.intp]],
) -> tuple[np.ndarray[tuple[int], np.dtype[np.bool_]], tuple[Boxes, ...]] | None:
    """The words' boxes (left, top, right, bottom) from their first and last characters' loose boxes (a box of no
    width is the other end's); which words have one."""
    ends = np.union1d(firsts, lasts)  # a word of one character is measured once
    measured = _boxes(textpage, ends)
    head, tail = measured[np.searchsorted(ends, firsts)], measured[np.searchsorted(ends, lasts)]
    head_ok = head[:, 2] - head[:, 0] > 0.01
    tail_ok = tail[:, 2] - tail[:, 0] > 0.01
    head[~head_ok] = tail[~head_ok]
    tail[~tail_ok] = head[~tail_ok]
    keep = head_ok | tail_ok
    if not keep.any():
        return None
    head, tail = head[keep], tail[keep]
    sides = (head[:, 0], np.maximum(head[:, 1], tail[:, 1]), tail[:, 2], np.minimum(head[:, 3], tail[:, 3]))
    return keep, sides


def _boxes(textpage: pdfium.PdfTextPage, indices: np.ndarray[tuple[int], np.dtype[np.intp]]) -> Boxes:
    """The characters' loose boxes (their font's ascent to descent: the height is about the font size), n x 4."""
    n = int(indices.size)
    out = (ctypes.c_float * (4 * max(n, 1)))()
    base = ctypes.addressof(out)
    loose = _LOOSE(ctypes.cast(raw.FPDFText_GetLooseCharBox, ctypes.c_void_p).value or 0)
    handle = ctypes.cast(textpage.raw, ctypes.c_void_p).value
    for k, index in enumerate(indices.tolist()):
        if not loose(handle, index, base + 16 * k):
            ctypes.memset(base + 16 * k, 0, 16)
    return np.frombuffer(memoryview(out).cast("B"), dtype=np.float32).reshape(-1, 4)[:n].copy()


def _bolds(textpage: pdfium.PdfTextPage, indices: list[int]) -> list[bool]:
    """Whether each character's font is bold (by its weight, or its name): its text object's font found by PDFium's
    functions called directly (a microsecond each), each font of the page looked at once."""
    text_object, text_font = _font_calls()
    handle = ctypes.cast(textpage.raw, ctypes.c_void_p).value
    fonts: dict[int, bool] = {}
    out = []
    for index in indices:
        obj = text_object(handle, index)
        font = text_font(obj) if obj else None
        if not font:  # no text object (a generated space): PDFium's font of the character
            out.append(_bold(textpage, index, None))
            continue
        if font not in fonts:
            fonts[font] = _bold(textpage, index, ctypes.cast(font, raw.FPDF_FONT))
        out.append(fonts[font])
    return out


@functools.cache
def _font_calls() -> tuple[Callable[[int | None, int], int | None], Callable[[int], int | None]]:
    """FPDFText_GetTextObject and FPDFTextObj_GetFont, returning plain addresses."""
    text_object = _OBJECT(ctypes.cast(raw.FPDFText_GetTextObject, ctypes.c_void_p).value or 0)
    text_font = _FONT(ctypes.cast(raw.FPDFTextObj_GetFont, ctypes.c_void_p).value or 0)
    return text_object, text_font


def _bold(textpage: pdfium.PdfTextPage, index: int, font: Any) -> bool:
    name = ctypes.create_string_buffer(128)
    if font:
        weight = raw.FPDFFont_GetWeight(font)
        raw.FPDFFont_GetBaseFontName(font, name, 128)
    else:
        weight = raw.FPDFText_GetFontWeight(textpage.raw, index)
        raw.FPDFText_GetFontInfo(textpage.raw, index, name, 128, None)
    lowered = name.value.decode("latin-1").casefold()
    return weight >= 600 or any(word in lowered for word in _BOLD)


def _images(page: pdfium.PdfPage, area: float) -> list[tuple[float, tuple[float, float, float, float]]]:
    """The page's images, largest first: (area, box) in points, each box cut to the page."""
    width, height = page.get_size()
    out = []
    for obj in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=3):
        x0, y0, x1, y1 = obj.get_bounds()
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)
        if x1 > x0 and y1 > y0:
            out.append(((x1 - x0) * (y1 - y0), (x0, y0, x1, y1)))
    return sorted(out, key=lambda item: -item[0])


def render(page: pdfium.PdfPage, box: tuple[float, float, float, float] | None = None) -> bytes:
    """The page (or the part of it in `box`, in points) in grey at SCAN_DPI, as a PGM image Tesseract reads."""
    width, height = page.get_size()
    x0, y0, x1, y1 = box or (0.0, 0.0, width, height)
    scale = SCAN_DPI / 72
    if (x1 - x0) * (y1 - y0) * scale * scale > MAX_PIXELS:
        scale = (MAX_PIXELS / ((x1 - x0) * (y1 - y0))) ** 0.5
    bitmap = page.render(scale=scale, grayscale=True, crop=(x0, y0, width - x1, height - y1))
    w, h, stride = bitmap.width, bitmap.height, bitmap.stride
    data = bytes(bitmap.buffer)
    bitmap.close()
    if stride != w:
        data = b"".join(data[r * stride : r * stride + w] for r in range(h))
    return b"P5\n%d %d\n255\n" % (w, h) + data
