"""The chunk stage: each file read (ingest/sources.py) and cut into chunks (ingest/chunk.py), the chunk files written
beside the last run's (ingest/artifacts.py). `ragvps chunk` runs it alone, so it imports nothing of the database or
the embedder (ingest/pipeline.py runs it before the embed and store stages)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragvps import tokens
from ragvps.config import Settings
from ragvps.errors import NotFoundError
from ragvps.ingest import sources
from ragvps.ingest.artifacts import ChunkArtifacts, ChunkFile
from ragvps.ingest.bounds import OutputBound, SkipFile, too_many_chunks
from ragvps.ingest.chunk import ChunkerConfig, chunk_documents
from ragvps.ingest.ocr import OcrOptions
from ragvps.ingest.pdfproc import PdfLimits
from ragvps.records import Document, ModelSpec

if TYPE_CHECKING:
    from ragvps.embed.hosts import Lanes

Progress = Callable[[str, int, int], None]  # stage, done, total
Warn = Callable[[str], None]


@dataclass
class IngestReport:
    files: int = 0
    documents: int = 0
    chunks: int = 0
    rechunked_files: int = 0
    embedded: int = 0  # chunks sent to the embedder
    queued: int = 0  # chunks left in the queue for `ragvps worker` (defer_embedding)
    stored: int = 0  # documents written (new or changed)
    unchanged: int = 0
    deleted: int = 0
    index_built: bool = False
    answers_pruned: int = 0  # cached answers whose chunks changed or went (the app prunes them)
    skipped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # per embedding host: chunks, rate, state


@dataclass(frozen=True)
class IngestRun:
    """One ingest's context, handed from stage to stage: its settings, model, chunker and folder, and whom it tells
    (the report it fills, progress, warnings). The connection travels beside it: a resource, not context."""

    settings: Settings
    spec: ModelSpec
    root: Path
    config: ChunkerConfig
    report: IngestReport
    progress: Progress
    warn: Warn
    lanes: Callable[[], Lanes] | None = None  # the embedding hosts; None where nothing is embedded (`ragvps chunk`)

    def embedding_lanes(self) -> Callable[[], Lanes]:
        if self.lanes is None:
            raise ValueError("this ingest run was opened to chunk only; embedding needs its lanes")
        return self.lanes


def chunker_config(settings: Settings, spec: ModelSpec) -> ChunkerConfig:
    size = settings.chunk.size or spec.chunk_size
    overlap = settings.chunk.overlap if settings.chunk.overlap is not None else min(spec.chunk_overlap, size // 4)
    return ChunkerConfig(settings.chunk.mode, size, overlap, spec.max_tokens, spec.document_prefix)


def nothing_readable(path: Path, report: IngestReport) -> NotFoundError:
    """The one exit rule: a run that finds no readable document (and had none before) is an error; a run that
    stores anything succeeds and reports what it skipped."""
    skipped = ", ".join(f"{n} {why}" for why, n in sorted(report.skipped.items())) or "nothing"
    return NotFoundError(
        f"{path} has no documents ragvps can read (skipped: {skipped}); supported: {', '.join(sorted(sources.KINDS))}"
    )


def load_file(
    source: sources.SourceFile, warn: Warn, report: IngestReport, ocr: OcrOptions | None = None
) -> list[Document] | None:
    """One file's documents, or None (with one warning naming it, counted in the report) when it cannot be read."""
    try:
        return sources.load(source, warn, report.skipped, ocr)
    except OSError as exc:
        warn(f"{source.rel}: {exc.strerror or exc}, skipped")
        report.skipped["unreadable"] += 1
    except SkipFile as exc:
        warn(str(exc))
        report.skipped[exc.reason] += 1
    return None


def bounded(source: sources.SourceFile, settings: Settings) -> sources.SourceFile:
    """The file with the bounds the settings put on reading it (max_text_*, pdf_*)."""
    chunk = settings.chunk
    limits = PdfLimits(chunk.pdf_max_pages, chunk.pdf_page_seconds, chunk.pdf_file_seconds, chunk.pdf_max_memory_mb)
    return replace(source, bound=OutputBound(chunk.max_text_ratio, chunk.max_text_chars), limits=limits)


def chunk_stage(
    run: IngestRun,
    scan: sources.ScanReport,
    streamed: list[sources.SourceFile] | None = None,
    streams: Callable[[sources.SourceFile], bool] | None = None,
) -> list[ChunkFile]:
    """Chunk every file whose content or chunker settings changed; reuse the files on disk otherwise. Given
    `streamed`, a file that `streams` says is read in parts (ingest/parts.py) is put there instead, to be stored part
    by part."""
    settings, config, report, progress, warn = run.settings, run.config, run.report, run.progress, run.warn
    artifacts = ChunkArtifacts(settings.database.kb_dir, run.root)
    key = config.key()
    results = []
    ocr = OcrOptions(settings.chunk.ocr_languages, progress=progress, figures=settings.chunk.ocr_figures)
    # the chunker's tokenizers load (about 0.5 s) while the first file is read (a PDF in the reader's process); the
    # chunker waits for each where it needs it
    warming = threading.Thread(target=tokens.warm, name="tokenizers", daemon=True)
    for i, source in enumerate(scan.files):
        if streamed is not None and streams is not None and streams(source):
            streamed.append(source)
            progress("chunk", i + 1, len(scan.files))
            continue
        try:
            file_hash = source.file_hash()
        except OSError as exc:
            warn(f"{source.rel}: {exc.strerror or exc}, skipped")
            report.skipped["unreadable"] += 1
            continue
        result = artifacts.read(source.rel, file_hash, key)
        if result is None:
            if not warming.ident:
                warming.start()
            docs = load_file(bounded(source, settings), warn, report, ocr)
            if docs is None:
                continue
            chunks = [c for doc_chunks in chunk_documents(docs, config) for c in doc_chunks]
            if too_many_chunks(source.rel, sum(len(d.text) for d in docs), len(chunks), warn, report.skipped):
                continue
            result = ChunkFile(source.rel, file_hash, key, docs, chunks)
            artifacts.write(result)
            report.rechunked_files += 1
        results.append(result)
        progress("chunk", i + 1, len(scan.files))
    return results
