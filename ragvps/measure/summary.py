"""The chunk stage on its own: `ragvps chunk` (writes the chunk files, no database) and `ragvps plan --path`
(real token counts and the real chunker over a folder, nothing written)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragvps.config import Settings
from ragvps.ingest import sources
from ragvps.ingest.chunk import ChunkerConfig
from ragvps.ingest.chunking import (
    IngestReport,
    IngestRun,
    bounded,
    chunk_stage,
    chunker_config,
    load_file,
    nothing_readable,
)
from ragvps.ingest.ocr import OcrOptions
from ragvps.measure.planner import measure
from ragvps.measure.windows import check_input_limit
from ragvps.records import ModelSpec, input_room

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]


@dataclass
class ChunkSummary:
    files: int
    documents: int
    chunks: int
    rechunked_files: int
    mode: str
    chunk_size: int
    chunk_overlap: int
    model: str
    max_tokens: int
    limit: int  # model tokens a chunk may take (the input room)
    tokens: dict[str, Any] | None  # min, median, max, total, over_limit
    llm_tokens: int
    skipped: dict[str, int] = field(default_factory=dict)
    chunk_dir: str = ""


def _scan(path: Path, warn: Warn) -> sources.ScanReport:
    scan = sources.scan(path)
    for w in scan.warnings:
        warn(w)
    return scan


def chunk_summary(settings: Settings, spec: ModelSpec, path: Path, progress: Progress, warn: Warn) -> ChunkSummary:
    config = chunker_config(settings, spec)
    report = IngestReport()
    scan = _scan(path, warn)
    report.skipped.update(scan.skipped)
    files = chunk_stage(IngestRun(settings, spec, path.resolve(), config, report, progress, warn), scan)
    if not any(f.documents for f in files):
        raise nothing_readable(path, report)
    counts = sorted(c.tokens for f in files for c in f.chunks)
    limit = input_room(config.max_tokens, config.prefix)
    return ChunkSummary(
        files=len(files),
        documents=sum(len(f.documents) for f in files),
        chunks=len(counts),
        rechunked_files=report.rechunked_files,
        mode=config.mode,
        chunk_size=config.size,
        chunk_overlap=config.overlap,
        model=spec.name,
        max_tokens=config.max_tokens,
        limit=limit,
        tokens={
            "min": counts[0],
            "median": statistics.median(counts),
            "max": counts[-1],
            "total": sum(counts),
            "over_limit": sum(n > limit for n in counts),
        }
        if counts
        else None,
        llm_tokens=sum(c.llm_tokens for f in files for c in f.chunks),
        skipped=dict(report.skipped),
        chunk_dir=str(settings.database.kb_dir / "chunks"),
    )


@dataclass
class PlanMeasurement:
    measurement: Any  # measure.planner.Measurement
    config: ChunkerConfig
    spec: ModelSpec
    dims: int
    bytes_per_dim: int
    documents: int


def plan_measure(
    settings: Settings, spec: ModelSpec, path: Path, dims: int | None, bytes_per_dim: int, warn: Warn
) -> PlanMeasurement:
    """Every readable document of `path` through the real tokenizer and chunker; unreadable files are
    skipped with a warning, exactly as ingest skips them."""
    config = chunker_config(settings, spec)
    check_input_limit(config.size, spec.input_room, spec.name)
    scan = _scan(path, warn)
    report = IngestReport()
    ocr = OcrOptions(settings.chunk.ocr_languages, figures=settings.chunk.ocr_figures)
    docs = [doc for source in scan.files for doc in (load_file(bounded(source, settings), warn, report, ocr) or [])]
    report.skipped.update(scan.skipped)
    if not docs:
        raise nothing_readable(path, report)
    m = measure(docs, config)
    for warning in m.stream.warnings():
        warn(warning)
    return PlanMeasurement(m, config, spec, dims or spec.dims, bytes_per_dim, len(docs))
