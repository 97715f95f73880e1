"""Sources: walk a folder, read each supported file into documents, report what was skipped."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ragvps.errors import UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    doc_id: str  # what a person or a qrels file calls it: the relative path, or a JSONL line's _id
    source: str  # the file it came from, relative to the ingested folder (posix)
    title: str
    text: str
    kind: str
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.title}\x00{self.text}".encode()).hexdigest()


@dataclass(frozen=True)
class SourceFile:
    path: Path  # absolute
    rel: str  # relative to the root, posix
    kind: str

    def file_hash(self) -> str:
        digest = hashlib.sha256()
        with self.path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()


@dataclass
class ScanReport:
    files: list[SourceFile] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> count
    warnings: list[str] = field(default_factory=list)


KINDS = {
    ".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text", ".jsonl": "jsonl",
    ".html": "html", ".htm": "html", ".pdf": "pdf",
}


class SkipFile(Exception):
    """A supported file that has nothing to read (an encrypted or image-only PDF): skipped and counted."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def scan(root: Path) -> ScanReport:
    """List the supported files under `root` in a stable order; count and explain the rest."""
    if not root.exists():
        raise UsageError(f"{root} does not exist: give the folder (or file) of documents to ingest")
    report = ScanReport()
    root = root.resolve()
    if root.is_file():
        _add(report, root, root.name)
        return report
    for path in _walk(root, report):
        _add(report, path, path.relative_to(root).as_posix())
    return report


def _add(report: ScanReport, path: Path, rel: str) -> None:
    kind = KINDS.get(path.suffix.lower())
    if kind is None:
        report.skipped[f"unsupported type {path.suffix.lower() or '(no extension)'}"] += 1
    elif not os.access(path, os.R_OK):
        report.skipped["unreadable"] += 1
        report.warnings.append(f"{rel}: permission denied, skipped")
    elif path.stat().st_size == 0:
        report.skipped["empty"] += 1
    else:
        report.files.append(SourceFile(path, rel, kind))


def _walk(root: Path, report: ScanReport) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()

    def visit(folder: Path) -> Iterator[Path]:
        try:
            st = folder.stat()
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            report.skipped["unreadable"] += 1
            report.warnings.append(f"{folder}: {exc.strerror}, skipped")
            return
        if (st.st_dev, st.st_ino) in seen:
            report.warnings.append(f"{folder}: symlink loop, skipped")
            return
        seen.add((st.st_dev, st.st_ino))
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                if entry.is_dir():
                    yield from visit(path)
                elif entry.is_file():
                    yield path
                else:
                    report.skipped["not a regular file"] += 1
            except OSError as exc:
                report.skipped["unreadable"] += 1
                report.warnings.append(f"{path}: {exc.strerror}, skipped")

    yield from visit(root)


def read_text(source: SourceFile, warn: Callable[[str], None]) -> str:
    """The file as text: UTF-8, with undecodable bytes replaced (and a warning naming the file)."""
    raw = source.path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        warn(f"{source.rel}: not valid UTF-8 (byte {exc.start}); undecodable bytes replaced with U+FFFD")
        return raw.decode("utf-8", errors="replace")


def load(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    """The documents in one source file."""
    if source.kind == "jsonl":
        return load_jsonl(source, warn)
    if source.kind == "pdf":
        return [load_pdf(source)]
    text = read_text(source, warn)
    stem = Path(source.rel).stem
    if source.kind == "html":
        from ragvps.ingest.htmltext import extract

        page = extract(text)
        meta: dict[str, object] = {"headings": page.headings} if page.headings else {}
        return [Document(source.rel, source.rel, page.title or stem, page.text, "html", meta)]
    title = markdown_title(text) if source.kind == "markdown" else None
    return [Document(doc_id=source.rel, source=source.rel, title=title or stem, text=text, kind=source.kind)]


def markdown_title(text: str) -> str | None:
    """The first level-1 heading (ATX or setext) of a Markdown text, as CommonMark parses it."""
    from markdown_it import MarkdownIt

    head = text[:20000]  # the title is near the top; a huge file is not parsed twice
    tokens = MarkdownIt("commonmark").parse(head)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag == "h1" and tok.level == 0:
            return inline_text(tokens[i + 1]).strip() or None
    return None


def inline_text(token: object) -> str:
    """The plain text of a markdown-it inline token (emphasis and links dropped, code kept)."""
    children = getattr(token, "children", None) or []
    return "".join(c.content for c in children if c.type in ("text", "code_inline", "softbreak")) or str(
        getattr(token, "content", ""))


def load_pdf(source: SourceFile) -> Document:
    """A PDF's text layer, page by page; `metadata["pages"]` maps character offsets to page numbers."""
    import pypdf
    from pypdf.errors import PdfReadError

    try:
        reader = pypdf.PdfReader(source.path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise SkipFile("encrypted PDF", f"{source.rel}: encrypted PDF (needs a password), skipped")
        parts: list[str] = []
        pages: list[list[int]] = []
        offset = 0
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            if not text:
                continue
            pages.append([offset, number])
            parts.append(text)
            offset += len(text) + 2
        info = reader.metadata
        title = str(info.title).strip() if info is not None and info.title else ""
    except SkipFile:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:  # pypdf raises these on damaged files
        raise SkipFile("unreadable PDF", f"{source.rel}: not a readable PDF ({exc}), skipped") from exc
    if not parts:
        raise SkipFile("PDF without text", f"{source.rel}: no text layer (a scanned or image-only PDF?), skipped")
    return Document(source.rel, source.rel, title or Path(source.rel).stem, "\n\n".join(parts), "pdf",
                    {"pages": pages, "page_count": len(reader.pages)})


def load_jsonl(source: SourceFile, warn: Callable[[str], None]) -> list[Document]:
    """A BEIR-style corpus: one document per line with `_id`, `title` and `text`."""
    docs = []
    seen: set[str] = set()
    for n, line in enumerate(read_text(source, warn).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            doc_id, title, text = str(record["_id"]), str(record.get("title") or ""), str(record["text"])
        except (ValueError, KeyError, TypeError) as exc:
            warn(f"{source.rel}:{n}: not a JSON object with `_id` and `text` ({exc.__class__.__name__}), skipped")
            continue
        if doc_id in seen:
            warn(f"{source.rel}:{n}: duplicate _id {doc_id!r}, skipped")
            continue
        seen.add(doc_id)
        if text.strip() or title.strip():
            docs.append(Document(doc_id=doc_id, source=source.rel, title=title, text=text, kind="jsonl",
                                 metadata={"line": n}))
    return docs
