"""PowerPoint .pptx (and .pptm, read as data: macros are never run) as Markdown: one `##` section per slide
titled by the slide's title, its text frames as paragraphs and bullet items, its tables as Markdown tables,
its speaker notes last under "Notes"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pptx import Presentation
from pptx.exc import PackageNotFoundError

from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.formats import md
from ragvps.ingest.formats.zipguard import has_macros, open_zip
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document

_DEFAULT_TITLES = frozenset({"powerpoint presentation", "presentation", "slide 1"})  # what PowerPoint fills in


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    with open_zip(source, "a PowerPoint presentation") as archive:
        if has_macros(archive):
            warn(f"{source.rel}: has macros; read as data only (ragvps never runs them)")
    try:
        deck = Presentation(str(source.path))
        sections = [_slide(n, slide) for n, slide in enumerate(deck.slides, start=1)]
        title = (deck.core_properties.title or "").strip()
        title = "" if title.casefold() in _DEFAULT_TITLES else title
    except (PackageNotFoundError, KeyError, ValueError, AttributeError, TypeError, IndexError) as exc:
        raise SkipFile(
            "corrupt file",
            f"{source.rel}: a malformed PowerPoint file ({exc.__class__.__name__}: "
            f"{str(exc)[:200]}); skipped (open and save it again in PowerPoint)",
        ) from exc
    sections = [s for s in sections if s]
    if not sections:
        raise SkipFile("no text", f"{source.rel}: a presentation without text; skipped")
    return [
        Document(
            source.rel,
            source.rel,
            title or Path(source.rel).stem,
            "\n\n".join(sections),
            "pptx",
            {"slides": len(deck.slides)},
        )
    ]


def _slide(number: int, slide: Any) -> str:
    title_shape = slide.shapes.title
    title = md.clean(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
    title_id = title_shape.shape_id if title_shape is not None else None
    body = [text for shape in slide.shapes if shape.shape_id != title_id for text in _shape(shape)]
    notes = ""
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        notes = md.paragraph(slide.notes_slide.notes_text_frame.text)
    if not (title or body or notes):
        return ""
    parts = [md.heading(2, f"Slide {number}: {title}" if title else f"Slide {number}"), *body]
    if notes:
        parts.append(f"Notes: {notes}")
    return "\n\n".join(p for p in parts if p)


def _shape(shape: Any) -> Iterator[str]:
    """The Markdown of one shape: a group's shapes in order, a table, or a text frame's paragraphs."""
    if shape.shape_type is not None and int(shape.shape_type) == 6:  # MSO_SHAPE_TYPE.GROUP
        for inner in shape.shapes:
            yield from _shape(inner)
    elif getattr(shape, "has_table", False) and shape.has_table:
        yield md.table([[cell.text for cell in row.cells] for row in shape.table.rows])
    elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        lines = []
        for p in shape.text_frame.paragraphs:
            text = md.clean(p.text)
            if text:
                lines.append("  " * min(p.level, 8) + "- " + text if p.level else md.paragraph(text))
        if lines:
            yield "\n".join(lines)
