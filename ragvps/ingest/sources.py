"""Sources: walk a folder, read each supported file into documents, report what was skipped."""

from __future__ import annotations

import codecs
import hashlib
import importlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from ragvps.errors import UsageError
from ragvps.ingest import pdf
from ragvps.ingest.bounds import Meter, OutputBound, SkipFile
from ragvps.ingest.formats import READERS, Reader
from ragvps.ingest.htmltext import extract
from ragvps.ingest.ocr import IMAGE_KINDS, OcrFailed, OcrOptions, read_image
from ragvps.ingest.pdfproc import PdfLimits
from ragvps.records import Document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceFile:
    path: Path  # absolute
    rel: str  # relative to the root, posix
    kind: str
    bound: OutputBound = OutputBound()  # what a reader may produce from it (settings max_text_*)
    limits: PdfLimits = PdfLimits()  # what reading it may take, if it is a PDF (settings pdf_*)

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


RECORDS = "JSON Lines records"  # the skipped reason counted for records a JSON Lines file could not use
KINDS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    **{ext: reader.kind for ext, reader in READERS.items()},
    **IMAGE_KINDS,
}


def scan(root: Path, follow_links: bool = False) -> ScanReport:
    """List the supported files under `root` in a stable order; count and explain the rest. A symbolic link
    whose target is outside `root` is not followed unless `follow_links` (setting follow_symlinks)."""
    if not root.exists():
        raise UsageError(f"{escaped(str(root))} does not exist: give the folder (or file) of documents to ingest")
    report = ScanReport()
    root = root.resolve()
    if escaped(str(root)) != str(root):
        raise UsageError(
            f"the folder name {escaped(str(root))} is not valid UTF-8: rename it (e.g. with "
            "`convmv -f latin1 -t utf8`), then ingest it again"
        )
    if root.is_file():
        _add(report, root, root.name)
        return report
    for path in _walk(root, report, follow_links):
        _add(report, path, path.relative_to(root).as_posix())
    return report


def source_file(root: Path, rel: str, follow_links: bool = False) -> tuple[SourceFile | None, str]:
    """One named file of the folder `root` as a source, or None and why it is not one (naming it)."""
    path = root / rel
    if path.is_symlink() and (broken := link_problem(path)):
        return None, f"{rel}: {broken}, skipped"
    if not follow_links and not path.resolve().is_relative_to(root.resolve()):
        return None, f"{rel}: {OUTSIDE}"
    kind = KINDS.get(path.suffix.lower())
    if kind is None:
        return None, (
            f"{rel}: unsupported type {path.suffix.lower() or '(no extension)'}; supported: {', '.join(sorted(KINDS))}"
        )
    try:
        size = path.stat().st_size
    except OSError as exc:
        return None, f"{rel}: {exc.strerror or exc}"
    if size == 0:
        return None, f"{rel}: empty file, nothing to read"
    return SourceFile(path, rel, kind), ""


def escaped(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (surrogate escapes) written as \\xNN."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def _add(report: ScanReport, path: Path, rel: str) -> None:
    kind = KINDS.get(path.suffix.lower())
    if kind is not None and escaped(rel) != rel:
        report.warnings.append(
            f"{escaped(rel)}: the file name is not valid UTF-8; stored under this escaped "
            "name (rename the file to UTF-8 to keep its real one)"
        )
        rel = escaped(rel)
    if kind is None:
        report.skipped[f"unsupported type {path.suffix.lower() or '(no extension)'}"] += 1
    elif not os.access(path, os.R_OK):
        report.skipped["unreadable"] += 1
        report.warnings.append(f"{rel}: permission denied, skipped")
    elif path.stat().st_size == 0:
        report.skipped["empty"] += 1
    else:
        report.files.append(SourceFile(path, rel, kind))


def link_problem(path: Path) -> str:
    """Why the symbolic link `path` leads to no file (it loops, or its target is gone), or empty when it does."""
    try:
        path.resolve(strict=True)
    except FileNotFoundError:
        return "a symbolic link to nothing (its target is gone)"
    except (RuntimeError, OSError):  # a loop: RuntimeError before Python 3.13, OSError (ELOOP) from it on
        return "a symbolic link that loops"
    return ""


OUTSIDE = "a symbolic link to a place outside the folder; not followed (setting follow_symlinks allows it)"


def _walk(root: Path, report: ScanReport, follow_links: bool) -> Iterator[Path]:
    seen: set[tuple[int, int]] = set()

    def visit(folder: Path) -> Iterator[Path]:
        try:
            st = folder.stat()
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            report.skipped["unreadable"] += 1
            report.warnings.append(f"{escaped(str(folder))}: {exc.strerror}, skipped")
            return
        if (st.st_dev, st.st_ino) in seen:
            report.warnings.append(f"{escaped(str(folder))}: symlink loop, skipped")
            return
        seen.add((st.st_dev, st.st_ino))
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                if entry.is_symlink() and (broken := link_problem(path)):
                    report.skipped["broken link"] += 1
                    report.warnings.append(f"{escaped(path.relative_to(root).as_posix())}: {broken}, skipped")
                elif not follow_links and entry.is_symlink() and not path.resolve().is_relative_to(root):
                    report.skipped["link out of the folder"] += 1
                    report.warnings.append(f"{escaped(path.relative_to(root).as_posix())}: {OUTSIDE}")
                elif entry.is_dir():
                    yield from visit(path)
                elif entry.is_file():
                    yield path
                else:
                    report.skipped["not a regular file"] += 1
            except OSError as exc:
                report.skipped["unreadable"] += 1
                report.warnings.append(f"{escaped(str(path))}: {exc.strerror}, skipped")

    yield from visit(root)


# Byte order marks, longest first (a UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SNIFF = 8000  # a NUL byte this near the start means binary content (git's rule)
_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"PK\x03\x04", "a zip archive"),
    (b"%PDF-", "a PDF"),
    (b"\x7fELF", "an executable"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
)


def read_text(source: SourceFile, warn: Callable[[str], None]) -> str:
    """The file as text: a byte order mark names the encoding (UTF-16, UTF-32, UTF-8), else UTF-8 with undecodable
    bytes replaced (and a warning naming the file). Binary content raises SkipFile; no NUL is ever returned."""
    raw = source.path.read_bytes()
    codec = next((name for bom, name in _BOMS if raw.startswith(bom)), None)
    if codec is None:
        what = next((name for magic, name in _MAGIC if raw.startswith(magic)), None)
        if what is None and _binary(raw[:_SNIFF]):
            what = f"binary content (a NUL byte at offset {raw.index(0)})"
        if what is not None:
            raise SkipFile("binary", f"{source.rel}: {what}, not text; skipped")
        codec = "utf-8"
    try:
        text = raw.decode(codec)
    except UnicodeDecodeError as exc:
        warn(
            f"{source.rel}: not valid {codec.upper().removesuffix('-SIG')} (byte {exc.start}); "
            "undecodable bytes replaced with U+FFFD"
        )
        text = raw.decode(codec, errors="replace")
    if "\x00" in text:
        warn(f"{source.rel}: {text.count(chr(0))} NUL characters removed")
        text = text.replace("\x00", "")
    return text


_CONTROLS = bytes(c for c in range(32) if c not in b"\t\n\r\f\b\x1b")


def _binary(head: bytes) -> bool:
    """Binary, not text with a stray NUL: a NUL, and many other control bytes or bytes that are not UTF-8."""
    if b"\x00" not in head:
        return False
    controls = len(head) - len(head.translate(None, _CONTROLS))
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the end of the window
            return True
    return controls > max(1, len(head) // 20)


def without_nul(value: object) -> object:
    """`value` (a string, or lists and dicts of them) without NUL characters: PostgreSQL stores none (text, JSON)."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {str(without_nul(k)): without_nul(v) for k, v in value.items()}
    return value


def load(
    source: SourceFile, warn: Callable[[str], None], skipped: Counter[str] | None = None, ocr: OcrOptions | None = None
) -> list[Document]:
    """The documents in one source file; SkipFile when it has nothing to read. Records skipped inside a file
    (JSON Lines) are counted in `skipped`; scanned pages and images are read by OCR (`ocr`'s languages)."""
    try:
        docs = _load(source, warn, skipped, ocr or OcrOptions())
    except OcrFailed as exc:
        raise SkipFile(exc.reason, str(exc)) from exc
    except (UnicodeError, ValueError, RecursionError) as exc:  # a parser's surprise never stops an ingest
        raise SkipFile(
            "unreadable",
            f"{source.rel}: could not be read ({exc.__class__.__name__}: {str(without_nul(str(exc)))[:200]}), skipped",
        ) from exc
    if not docs and source.kind == "jsonl":
        raise SkipFile("no documents", f"{source.rel}: no JSON Lines record with text, skipped")
    Meter.of(source).add(sum(len(d.text) for d in docs))  # every reader, whatever it counted as it went
    return docs


def _load(
    source: SourceFile, warn: Callable[[str], None], skipped: Counter[str] | None, ocr: OcrOptions
) -> list[Document]:
    reader = READERS.get(source.path.suffix.lower())
    if reader is not None:
        return _read_format(source, reader, warn)
    if source.kind == "jsonl":
        return load_jsonl(source, warn, skipped)
    if source.kind == "pdf":
        return [load_pdf(source, ocr, warn)]
    if source.kind == "image":
        return [read_image(source.path, source.rel, ocr)]
    text = read_text(source, warn)
    stem = Path(source.rel).stem
    if source.kind == "html":
        page = extract(text)
        if not page.text.strip():
            raise SkipFile("no text", f"{source.rel}: no text once markup, scripts and styles are removed, skipped")
        meta: dict[str, object] = {"headings": page.headings} if page.headings else {}
        return [Document(source.rel, source.rel, page.title or stem, page.text, "html", meta)]
    if not text.strip():
        raise SkipFile("no text", f"{source.rel}: only whitespace, no text; skipped")
    title = markdown_title(text) if source.kind == "markdown" else None
    return [Document(doc_id=source.rel, source=source.rel, title=title or stem, text=text, kind=source.kind)]


def _read_format(source: SourceFile, reader: Reader, warn: Callable[[str], None]) -> list[Document]:
    """A file of a format in ragvps.ingest.formats, read by its module. Any failure of the format's library
    on a damaged file is this file's failure: it is skipped with one warning, and the ingest goes on."""
    extra = reader.extra
    try:
        if reader.library:
            importlib.import_module(reader.library)
        read = importlib.import_module(f"ragvps.ingest.formats.{reader.module}").read
    except ImportError as exc:
        need = f"`pip install 'ragvps[{extra}]'`" if extra else "ragvps's dependencies (`pip install ragvps`)"
        raise SkipFile(
            f"needs ragvps[{extra or 'core'}]",
            f"{source.rel}: reading {source.path.suffix} files "
            f"needs {exc.name or 'a library'}: install {need}; "
            "skipped",
        ) from exc
    try:
        docs: list[Document] = read(source, warn)
    except (SkipFile, OSError):
        raise
    except Exception as exc:  # a library's surprise on a damaged file never stops an ingest
        raise SkipFile(
            "unreadable",
            f"{source.rel}: could not be read as {source.path.suffix} "
            f"({exc.__class__.__name__}: {str(without_nul(str(exc)))[:200]}); "
            "skipped",
        ) from exc
    return [d if "\x00" not in d.text else replace(d, text=d.text.replace("\x00", "")) for d in docs]


def markdown_title(text: str) -> str | None:
    """The first level-1 heading (ATX or setext) of a Markdown text, as CommonMark parses it."""
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
        getattr(token, "content", "")
    )


def load_pdf(source: SourceFile, ocr: OcrOptions | None = None, warn: Callable[[str], None] | None = None) -> Document:
    """A PDF's text, page by page, in reading order (ingest/pdf.py); a page without a text layer read by OCR."""
    return pdf.load_pdf(source.path, source.rel, source.limits, ocr, warn)


def load_jsonl(source: SourceFile, warn: Callable[[str], None], skipped: Counter[str] | None = None) -> list[Document]:
    """A BEIR-style corpus: one document per line with `_id`, `title` and `text`. Each record skipped is
    warned about (its line and why) and counted in `skipped` as "JSON Lines records"."""
    docs = []
    seen: set[str] = set()
    counts = skipped if skipped is not None else Counter()

    def skip(n: int, why: str) -> None:
        warn(f"{source.rel}:{n}: {why}, skipped")
        counts[RECORDS] += 1

    for n, line in enumerate(read_text(source, warn).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record: Any = without_nul(json.loads(line))
        except ValueError as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            column = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            skip(n, f"not valid JSON ({reason}{column})")
            continue
        if not isinstance(record, dict):
            kind = {list: "array", str: "string", type(None): "null", bool: "boolean"}.get(type(record), "number")
            skip(n, f"a JSON {kind}, not an object with `_id` and `text`")
            continue
        missing = [f"`{key}`" for key in ("_id", "text") if key not in record]
        if missing:
            skip(n, f"the record has no {' and no '.join(missing)} (each line needs `_id` and `text`)")
            continue
        doc_id, title, text = record["_id"], record.get("title") or "", record["text"]
        if not isinstance(text, str) or not isinstance(doc_id, str | int) or isinstance(doc_id, bool):
            what = "`text`" if not isinstance(text, str) else "`_id`"
            skip(n, f"{what} is {json.dumps(text if what == '`text`' else doc_id)[:40]}, not a string")
            continue
        doc_id, title = str(doc_id), title if isinstance(title, str) else str(title)
        if doc_id in seen:
            skip(n, f"duplicate _id {doc_id!r}")
            continue
        seen.add(doc_id)
        if not text.strip() and not title.strip():
            skip(n, f"_id {doc_id!r} has no text")
            continue
        docs.append(
            Document(doc_id=doc_id, source=source.rel, title=title, text=text, kind="jsonl", metadata={"line": n})
        )
    return docs
