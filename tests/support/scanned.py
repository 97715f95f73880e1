"""Scanned pages for the OCR tests and bench/ocr_bench.py: text drawn by Pillow on a white page at 200 dpi (an
A4 page is 1654 x 2339 pixels), saved as an image file or as an image-only PDF (pages without a text layer)."""

from __future__ import annotations

import textwrap
from pathlib import Path

PAGE = (1654, 2339)  # A4 at 200 dpi


def page_image(text: str, size: int = 30) -> object:
    """One page of `text`, wrapped to the page's width, as a Pillow image (grayscale)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    image = Image.new("L", PAGE, 255)
    draw = ImageDraw.Draw(image)
    y = 150
    for paragraph in text.split("\n\n"):
        for line in textwrap.wrap(" ".join(paragraph.split()), width=80):
            draw.text((150, y), line, fill=0, font=font)
            y += int(size * 1.5)
            if y > PAGE[1] - 150:
                return image
        y += size
    return image


def scanned_pdf(pages: list[str], path: Path) -> Path:
    """An image-only PDF: each page one image of its text, no text layer."""
    images = [page_image(text) for text in pages]
    images[0].save(path, "PDF", resolution=200.0, save_all=True, append_images=images[1:])  # type: ignore[attr-defined]
    return path


def docs_paragraphs(path: Path, count: int = 4) -> str:
    """The first `count` prose paragraphs of a Markdown page of docs/ (no headings, code or tables)."""
    paragraphs = [
        p
        for p in path.read_text().split("\n\n")
        if p.strip() and not p.lstrip().startswith(("#", "```", "|", "<!--", "-"))
    ]
    return "\n\n".join(paragraphs[:count])
