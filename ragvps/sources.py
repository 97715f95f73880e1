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


KINDS = {".md": "markdown", ".markdown": "markdown", ".txt": "text", ".text": "text", ".jsonl": "jsonl"}


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
    text = read_text(source, warn)
    title = _title(text, source) if source.kind == "markdown" else Path(source.rel).stem
    return [Document(doc_id=source.rel, source=source.rel, title=title, text=text, kind=source.kind)]


def _title(text: str, source: SourceFile) -> str:
    for line in text.splitlines()[:50]:
        if line.startswith("# "):
            return line[2:].strip()
    return Path(source.rel).stem


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
