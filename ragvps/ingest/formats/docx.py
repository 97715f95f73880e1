"""Word .docx (and .docm, read as data: macros are never run) as Markdown.

Heading styles (Title, Heading 1-9, or a style's outline level) become `#` headings; tables become Markdown
tables, a merged cell's text repeated in each grid cell it spans and missing cells left empty; list
paragraphs become `- ` items indented by their level; hyperlink text is kept as text. Page headers and
footers are left out on purpose: they repeat page furniture (page numbers, the document's name) that would
only add noise to every section they were attached to.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from docx.enum.style import WD_STYLE_TYPE
from docx.opc.exceptions import PackageNotFoundError
from docx.opc.package import OpcPackage
from docx.table import Table
from docx.text.paragraph import Paragraph

from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.formats import md
from ragvps.ingest.formats.zipguard import has_macros, open_zip
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    with open_zip(source, "a Word document") as archive:
        if has_macros(archive):
            warn(f"{source.rel}: has macros; read as data only (ragvps never runs them)")
    try:
        part: Any = OpcPackage.open(str(source.path)).main_document_part
        document = part.document
    except (PackageNotFoundError, KeyError, ValueError, AttributeError) as exc:
        raise SkipFile("corrupt file", f"{source.rel}: not a readable Word document ({exc}); skipped") from exc
    if not hasattr(document, "paragraphs"):
        raise SkipFile(
            "not the format its name says",
            f"{source.rel}: its main part is not a Word document ({part.content_type}); skipped",
        )
    levels = _heading_levels(document)
    blocks: list[str] = []
    title = (document.core_properties.title or "").strip()
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            text = md.table(_rows(item))
        elif isinstance(item, Paragraph):
            text = _paragraph(item, levels)
            if not title and _is_title(item):
                title = md.clean(item.text)
                continue
        else:
            continue
        if text:
            blocks.append(text)
    if not blocks:
        raise SkipFile("no text", f"{source.rel}: an empty Word document, no text; skipped")
    return [Document(source.rel, source.rel, title or Path(source.rel).stem, "\n\n".join(blocks), "docx")]


def _is_title(p: Any) -> bool:
    ppr = p._p.pPr
    return bool(p.text.strip()) and ppr is not None and ppr.pStyle is not None and ppr.pStyle.val == "Title"


def _heading_levels(document: Any) -> dict[str, int]:
    """Paragraph style id -> heading level, from the style's name or outline level (inherited)."""
    levels: dict[str, int] = {}
    for style in document.styles:
        if style.type != WD_STYLE_TYPE.PARAGRAPH:
            continue
        s, level = style, None
        for _ in range(10):  # a style's base chain, bounded (a damaged file may loop)
            if s is None:
                break
            name = (s.name or "").lower()
            outline = s.element.find(f"{_W}pPr/{_W}outlineLvl")
            if name == "title":
                level = 1
            elif name.startswith("heading ") and name[8:].isdigit():
                level = int(name[8:])
            elif outline is not None and (outline.get(f"{_W}val") or "").isdigit():
                level = int(outline.get(f"{_W}val")) + 1
            if level is not None:
                break
            s = s.base_style
        if level is not None and level <= 9:
            levels[style.style_id] = level
    return levels


def _paragraph(p: Any, levels: dict[str, int]) -> str:
    text = p.text
    if not text.strip():
        return ""
    ppr = p._p.pPr
    style_id = ppr.pStyle.val if ppr is not None and ppr.pStyle is not None else None
    outline = ppr.find(f"{_W}outlineLvl") if ppr is not None else None
    level = levels.get(style_id or "")
    if outline is not None and (outline.get(f"{_W}val") or "").isdigit() and int(outline.get(f"{_W}val")) < 9:
        level = int(outline.get(f"{_W}val")) + 1
    if level is not None:
        return md.heading(level, text)
    num = ppr.numPr if ppr is not None else None
    if num is not None or (style_id or "").lower().startswith("list"):
        digits = (style_id or "")[len((style_id or "").rstrip("0123456789")) :]
        depth = num.ilvl.val if num is not None and num.ilvl is not None else max(int(digits or 1) - 1, 0)
        return "  " * min(depth, 8) + "- " + md.paragraph(text).replace("\n", " ")
    return md.paragraph(text)


def _rows(table: Any) -> list[list[str]]:
    """The table's rows as grid cells: a merged cell's text in each cell it spans, missing cells empty."""
    rows = []
    for row in table.rows:
        try:
            rows.append([c.text for c in row.cells])
        except (IndexError, ValueError, KeyError):  # a row whose grid the file gets wrong
            rows.append([tc.xpath("string(.)") for tc in row._tr.tc_lst])
    return rows
