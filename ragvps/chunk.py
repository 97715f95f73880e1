"""Chunk stage: cut documents into pieces that fit the embedder, counted in its own tokens."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ragvps import tokens
from ragvps.sources import Document

SPECIAL_TOKENS = 2  # [CLS] and [SEP]


@dataclass(frozen=True)
class ChunkerConfig:
    mode: str
    size: int
    overlap: int
    max_tokens: int  # the embedder's input limit
    prefix: str = ""  # the embedder's document prefix, which also takes room

    def key(self) -> str:
        """Changes whenever a setting that shapes the chunks changes."""
        raw = json.dumps(asdict(self) | {"version": 1}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Chunk:
    doc_id: str
    seq: int
    heading_path: str
    text: str
    start: int  # character offsets of `text` in the document
    end: int
    tokens: int  # model tokens of embed_text (without prefix and special tokens)
    llm_tokens: int  # cl100k_base tokens of text
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def embed_text(self) -> str:
        """What the embedder sees: the heading path, then the text."""
        return f"{self.heading_path}\n\n{self.text}" if self.heading_path else self.text

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.embed_text.encode()).hexdigest()


def fixed_windows(n_tokens: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Windows [start, end) over a stream of n tokens: step = size - overlap, the last possibly shorter."""
    if overlap >= size:
        raise ValueError(f"overlap {overlap} must be smaller than the chunk size {size}")
    step = size - overlap
    windows = []
    start = 0
    while True:
        end = min(start + size, n_tokens)
        windows.append((start, end))
        if end >= n_tokens:
            return windows if n_tokens else []
        start += step


def chunk_document(doc: Document, config: ChunkerConfig) -> list[Chunk]:
    """Token windows with overlap over the document, each prefixed by the document's title."""
    heading = doc.title
    budget = config.max_tokens - SPECIAL_TOKENS - tokens.count(config.prefix) - tokens.count(heading) - 2
    size = max(8, min(config.size, budget))
    overlap = min(config.overlap, size // 2)
    enc = tokens.encode(doc.text)
    offsets = enc.offsets
    pieces = []
    for start, end in fixed_windows(len(offsets), size, overlap):
        a, b = offsets[start][0], offsets[end - 1][1]
        pieces.append((a, b, doc.text[a:b]))
    texts = [f"{heading}\n\n{text}" if heading else text for _, _, text in pieces]
    counts = tokens.count_many(texts) if texts else []
    llm = tokens.count_llm_many([text for _, _, text in pieces]) if pieces else []
    return [
        Chunk(doc.doc_id, seq, heading, text, a, b, n, m)
        for seq, ((a, b, text), n, m) in enumerate(zip(pieces, counts, llm, strict=True))
    ]
