"""EPUB as one document whose chapters (the spine's XHTML files, in reading order) are sections: each
chapter's HTML headings become the heading path, and a chapter without one is headed by its table-of-contents
label or "Chapter N". Read with the stdlib zip reader and defusedxml; no EPUB library needed."""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

from ragvps.ingest.bounds import Meter, SkipFile
from ragvps.ingest.formats.zipguard import open_zip
from ragvps.ingest.htmltext import extract
from ragvps.ingest.sources import SourceFile
from ragvps.records import Document

if TYPE_CHECKING:
    from ragvps.ingest.htmltext import Page

_OPF = "{http://www.idpf.org/2007/opf}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_HTML = ("application/xhtml+xml", "text/html")


def read(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    with open_zip(source, "an EPUB book", doctypes=True) as archive:
        try:
            title, chapters = _chapters(archive, Meter.of(source, archive))
        except (KeyError, ParseError, DefusedXmlException, UnicodeDecodeError, zipfile.BadZipFile) as exc:
            raise SkipFile(
                "corrupt file",
                f"{source.rel}: not a readable EPUB ({exc.__class__.__name__}: {str(exc)[:200]}); skipped",
            ) from exc
    parts: list[str] = []
    headings: list[list[object]] = []
    offset = 0
    for n, (label, page) in enumerate(chapters, start=1):
        if not page.text.strip():
            continue
        shift = offset
        if not page.headings or int(str(page.headings[0][0])) > 0:  # the chapter's own heading, else a label
            head = label or page.title or f"Chapter {n}"
            parts.append(head)
            headings.append([offset, 1, head])
            shift += len(head) + 2
        headings += [[int(str(o)) + shift, level, text] for o, level, text in page.headings]
        parts.append(page.text)
        offset = shift + len(page.text) + 2
    if not parts:
        raise SkipFile("no text", f"{source.rel}: an EPUB without text; skipped")
    return [
        Document(
            source.rel, source.rel, title or Path(source.rel).stem, "\n\n".join(parts), "epub", {"headings": headings}
        )
    ]


def _chapters(archive: zipfile.ZipFile, meter: Meter) -> tuple[str, list[tuple[str, Page]]]:
    container = fromstring(archive.read("META-INF/container.xml"), forbid_dtd=False)
    rootfile = container.find(f".//{_CONTAINER}rootfile")
    opf_path = rootfile.get("full-path") if rootfile is not None else None
    if not opf_path:
        raise KeyError("META-INF/container.xml names no package document")
    opf = fromstring(archive.read(opf_path), forbid_dtd=False)
    base = posixpath.dirname(opf_path)
    title = " ".join((opf.findtext(f".//{_DC}title") or "").split())
    items = {i.get("id"): i for i in opf.iter(f"{_OPF}item")}
    labels = _toc_labels(archive, opf, items, base)
    chapters: list[tuple[str, Page]] = []
    pages: dict[str, Page] = {}  # a part the spine names again is parsed once, and its text counted each time
    for ref in opf.iter(f"{_OPF}itemref"):
        item = items.get(ref.get("idref"))
        if item is None or item.get("media-type") not in _HTML or not item.get("href"):
            continue
        path = posixpath.normpath(posixpath.join(base, item.get("href", "")))
        if path not in pages:
            try:
                pages[path] = extract(archive.read(path).decode("utf-8", errors="replace"))
            except KeyError:
                continue
        meter.read(path)
        meter.add(len(pages[path].text))
        chapters.append((labels.get(path, ""), pages[path]))
    return title, chapters


def _toc_labels(archive: zipfile.ZipFile, opf: Any, items: dict[str | None, Any], base: str) -> dict[str, str]:
    """Spine file -> its first label in the EPUB 2 table of contents (toc.ncx), when there is one."""
    ncx = next((i for i in items.values() if i.get("media-type") == "application/x-dtbncx+xml"), None)
    if ncx is None:
        return {}
    try:
        toc = fromstring(archive.read(posixpath.normpath(posixpath.join(base, ncx.get("href", "")))), forbid_dtd=False)
    except KeyError:
        return {}
    ns = "{http://www.daisy.org/z3986/2005/ncx/}"
    labels: dict[str, str] = {}
    for point in toc.iter(f"{ns}navPoint"):
        text = " ".join((point.findtext(f"{ns}navLabel/{ns}text") or "").split())
        content = point.find(f"{ns}content")
        if content is not None and text:
            path = posixpath.normpath(posixpath.join(base, content.get("src", "").split("#")[0]))
            labels.setdefault(path, text)
    return labels
