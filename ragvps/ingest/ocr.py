"""OCR: the text of scanned pages and images, by Tesseract (Debian's `tesseract-ocr`) run as a process.

Only what has no text layer is read this way: image files (png, jpg, tiff, webp) and the pages of a PDF whose
text layer is empty, rendered by PDFium at 300 dpi (ingest/pdfpages.py); with ocr_figures, the large images of a
PDF page that has text too. Tesseract reads the image bytes on stdin on one thread (OMP_THREAD_LIMIT=1): an ingest
is already parallel across its stages, and one page takes about a second (bench/ocr_bench.py, which also
measures rapidocr-onnxruntime, the engine not chosen). Nothing is downloaded: the languages are Debian's
`tesseract-ocr-<lang>` packages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragvps.records import Document

IMAGE_KINDS = {".png": "image", ".jpg": "image", ".jpeg": "image", ".tif": "image", ".tiff": "image", ".webp": "image"}
INSTALL = "install Tesseract (`apt-get install tesseract-ocr tesseract-ocr-eng`, `brew install tesseract`)"
MAX_PIXELS = 80_000_000  # a page image larger than this (a decompression bomb, a poster) is not read


@dataclass
class OcrStats:
    pages: int = 0
    seconds: float = 0.0
    begun: int = 0  # pages given to OCR in this run, over all its files: the progress bar's total
    done: int = 0


def _report(options: OcrOptions, finished: bool) -> None:
    """The run's OCR progress: the pages read of those begun, over all its files (not one file's count)."""
    stats = options.stats
    if finished:
        stats.done += 1
    else:
        stats.begun += 1
    if options.progress:
        options.progress("ocr", stats.done, stats.begun)


@dataclass(frozen=True)
class OcrOptions:
    """How scanned pages are read: Tesseract's languages (`eng`, `eng+deu`), a time limit per page, and
    where the pages read are reported (a progress stage `ocr`)."""

    languages: str = "eng"
    timeout: float = 120.0
    figures: bool = False  # setting ocr_figures: also read the large images of pages that have text
    progress: Callable[[str, int, int], None] | None = None
    stats: OcrStats = field(default_factory=OcrStats, compare=False)


class OcrFailed(Exception):
    """The page or image could not be read: `reason` is the skip reason counted, the message names the file."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def tesseract() -> str | None:
    return shutil.which("tesseract")


_MISSING = re.compile(r"Failed loading language '([^']+)'")


def image_text(data: bytes, rel: str, options: OcrOptions, page: int | None = None) -> str:
    """The text Tesseract reads in one encoded image (PNG, JPEG, TIFF, WebP...); its file (and page of it) are
    named in messages, which start with the file's name."""
    name = f"{rel}: page {page}" if page else rel
    exe = tesseract()
    if exe is None:
        raise OcrFailed(
            "needs tesseract",
            f"{name}: reading scanned pages and images needs Tesseract, which is not on PATH: {INSTALL}; skipped",
        )
    started = time.monotonic()
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    try:
        done = subprocess.run(
            [exe, "stdin", "stdout", "-l", options.languages, "--psm", "3"],
            input=data,
            capture_output=True,
            timeout=options.timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise OcrFailed("OCR timeout", f"{name}: OCR took longer than {options.timeout:g} s, skipped") from exc
    finally:
        options.stats.seconds += time.monotonic() - started
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    missing = [m[1] for line in said if (m := _MISSING.search(line))]
    if missing:  # `eng+deu` with only English installed reads English and exits 0: refused as `deu` alone is
        raise OcrFailed(
            "OCR language missing",
            f"{name}: Tesseract has no data for {', '.join(missing)} (ocr_languages={options.languages!r}): install "
            f"its packages (`apt-get install {' '.join('tesseract-ocr-' + m for m in missing)}`) or change "
            "ocr_languages; skipped",
        )
    if done.returncode != 0:
        raise OcrFailed(
            "unreadable image", f"{name}: Tesseract could not read it ({(said or ['?'])[-1][:200]}), skipped"
        )
    options.stats.pages += 1
    return done.stdout.decode("utf-8", "replace").replace("\x00", "").strip()


def read_image(path: Path, rel: str, options: OcrOptions) -> Document:
    """The image file `path` (`rel` in its folder) as a document of the text OCR reads in it (one page)."""
    _check_size(path, rel)
    _report(options, False)
    text = image_text(path.read_bytes(), rel, options)
    _report(options, True)
    if not text:
        raise OcrFailed("no text", f"{rel}: OCR found no text in the image, skipped")
    return Document(rel, rel, Path(rel).stem, text, "image", {"ocr": options.languages})


def _check_size(path: Path, rel: str) -> None:
    try:
        from PIL import Image  # lazy: Pillow comes with the ocr extra
    except ImportError:  # Tesseract checks the image itself; Pillow only adds the early size check
        return
    try:
        with Image.open(path) as im:
            width, height = im.size
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise OcrFailed("unreadable image", f"{rel}: not a readable image ({exc}), skipped") from exc
    if width * height > MAX_PIXELS:
        raise OcrFailed(
            "image too large", f"{rel}: {width}x{height} pixels, more than OCR reads ({MAX_PIXELS:,}), skipped"
        )


def pdf_page_text(image: bytes, rel: str, number: int, count: int, options: OcrOptions) -> str:
    """The text OCR reads in page `number` (of `count`) of a PDF, a page without a text layer that PDFium rendered
    (ingest/pdfpages.py), or one of its figures."""
    _report(options, False)
    text = image_text(image, rel, options, number)
    _report(options, True)
    return text
