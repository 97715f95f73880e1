"""Plan: chunk, overlap, vector-size and token-budget arithmetic, decided before anything is embedded.

One module per concern, pure functions over frozen dataclasses: windows.py (the window arithmetic),
vectors.py (vector sizes), costs.py (the token budget), plan_text.py (rendering). This module measures real
documents with the real tokenizer and chunker, and gathers the others' names for `ragvps plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragvps import tokens
from ragvps.ingest.chunk import chunk_document
from ragvps.measure.costs import Budget
from ragvps.measure.plan_text import human_bytes, millions, strip, summary
from ragvps.measure.vectors import (
    BYTES_PER_DIM,
    COMMON_MODELS,
    MIB,
    PER_100K,
    RAW_SIZE_NOTE,
    VECTOR_TYPES,
    ModelSize,
    common_models,
    mib,
    pgvector_bytes,
    raw_vector_bytes,
)
from ragvps.measure.windows import COMPARE_OVERLAPS, WindowPlan, check_input_limit, compare_overlaps, parse_overlap

if TYPE_CHECKING:
    from ragvps.ingest.chunk import ChunkerConfig
    from ragvps.records import Document

__all__ = [
    "BYTES_PER_DIM",
    "COMMON_MODELS",
    "COMPARE_OVERLAPS",
    "MIB",
    "PER_100K",
    "RAW_SIZE_NOTE",
    "VECTOR_TYPES",
    "Budget",
    "DocumentMeasure",
    "Measurement",
    "ModelSize",
    "WindowPlan",
    "check_input_limit",
    "common_models",
    "compare_overlaps",
    "human_bytes",
    "measure",
    "mib",
    "millions",
    "parse_overlap",
    "pgvector_bytes",
    "raw_vector_bytes",
    "strip",
    "summary",
]


@dataclass(frozen=True)
class DocumentMeasure:
    doc_id: str
    windows: WindowPlan  # fixed-window arithmetic over this document alone
    chunks: int  # what the chunker produced
    chunk_tokens: int  # model tokens the chunker's output sends to the embedder (headings included)


@dataclass(frozen=True)
class Measurement:
    """The continuous-stream estimate next to per-document windows and the real chunker's output."""

    size: int
    overlap: int
    documents: tuple[DocumentMeasure, ...]

    @property
    def tokens(self) -> int:
        return sum(d.windows.tokens for d in self.documents)

    @property
    def stream(self) -> WindowPlan:
        return WindowPlan(self.tokens, self.size, self.overlap)

    @property
    def window_chunks(self) -> int:
        return sum(d.windows.chunks for d in self.documents)

    @property
    def window_processed(self) -> int:
        return sum(d.windows.processed_tokens for d in self.documents)

    @property
    def chunks(self) -> int:
        return sum(d.chunks for d in self.documents)

    @property
    def chunk_tokens(self) -> int:
        return sum(d.chunk_tokens for d in self.documents)

    def as_dict(self) -> dict[str, Any]:
        stream = self.stream
        return {
            "documents": len(self.documents),
            "tokens": self.tokens,
            "chunk_size": self.size,
            "overlap": self.overlap,
            "stream": {"chunks": stream.chunks, "processed_tokens": stream.processed_tokens},
            "per_document_windows": {"chunks": self.window_chunks, "processed_tokens": self.window_processed},
            "chunker": {"chunks": self.chunks, "chunk_tokens": self.chunk_tokens},
            "chunks_vs_stream": self.chunks - stream.chunks,
            "per_document": [
                {
                    "doc_id": d.doc_id,
                    "tokens": d.windows.tokens,
                    "windows": d.windows.chunks,
                    "chunks": d.chunks,
                    "chunk_tokens": d.chunk_tokens,
                }
                for d in self.documents
            ],
        }


def measure(docs: Sequence[Document], config: ChunkerConfig, count: Callable[[str], int] | None = None) -> Measurement:
    """Count each document's tokens and chunk it for real; boundaries make this differ from the stream."""
    count = count or tokens.count
    WindowPlan(0, config.size, config.overlap)  # the same errors as the arithmetic modes
    measured = []
    for doc in docs:
        chunks = chunk_document(doc, config)
        measured.append(
            DocumentMeasure(
                doc.doc_id,
                WindowPlan(count(doc.text), config.size, config.overlap),
                len(chunks),
                sum(c.tokens for c in chunks),
            )
        )
    return Measurement(config.size, config.overlap, tuple(measured))
