"""Embed stage: the chunks without a cached vector, sorted by length, in batches over the embedder's lanes.

The whole work list is sorted by token count before it is cut into batches, so each batch (and each
sub-batch of the local model) holds inputs of nearly one length and padding stays near zero. Vectors
come back to this thread only, which is the vector cache's one writer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragvps import tokens
from ragvps.embed import Embedder, embed_documents
from ragvps.embed.hosts import Emit, Lanes
from ragvps.errors import InputTooLongError
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import SPECIAL_TOKENS, Chunk, ModelSpec

Progress = Callable[[str, int, int], None]


@dataclass
class EmbedOutcome:
    embedded: int = 0  # chunks whose vectors were added to the cache
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # per host (or local): chunks, rate, state


def embed_stage(
    cache: VectorCache,
    chunks: Sequence[Chunk],
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    batch_size: int,
    progress: Progress,
    outcome: EmbedOutcome | None = None,
) -> EmbedOutcome:
    """Embed the chunks whose vectors are not cached yet, appending each answered piece to the cache."""
    outcome = outcome if outcome is not None else EmbedOutcome()
    by_hash = {c.content_hash: c for c in chunks}
    todo = [by_hash[h] for h in cache.missing(by_hash)]
    if not todo:
        return outcome
    counts = token_counts(todo, spec)
    offenders = [(c, n) for c, n in zip(todo, counts, strict=True) if n > spec.max_tokens]
    if offenders:
        raise InputTooLongError(too_long_message(offenders, len(todo), spec, "lower the setting chunk_size"))
    order = sorted(range(len(todo)), key=counts.__getitem__)
    ordered = [todo[i] for i in order]
    batches = [ordered[lo : lo + batch_size] for lo in range(0, len(ordered), batch_size)]
    pool = lanes()
    try:
        for items, vectors in pool.run(batches, embed_pieces, longest=max(counts)):
            cache.add([c.content_hash for c in items], vectors)
            outcome.embedded += len(items)
            progress("embed", outcome.embedded, len(todo))
    finally:
        outcome.hosts = pool.report()
    return outcome


def token_counts(chunks: Sequence[Chunk], spec: ModelSpec) -> list[int]:
    """Each chunk's exact input length in model tokens: prefix and [CLS]/[SEP] included."""
    if not chunks:
        return []
    return [n + SPECIAL_TOKENS for n in tokens.count_many([spec.document_prefix + c.embed_text for c in chunks])]


def too_long(chunks: Sequence[Chunk], spec: ModelSpec) -> list[tuple[Chunk, int]]:
    """The chunks longer than the model takes, with their exact token count (prefix and [CLS]/[SEP] included)."""
    return [(c, n) for c, n in zip(chunks, token_counts(chunks, spec), strict=True) if n > spec.max_tokens]


def too_long_message(offenders: Sequence[tuple[Chunk, int]], total: int, spec: ModelSpec, remedy: str) -> str:
    examples = "; ".join(f"document {c.doc_id} chunk {c.seq}: {n} tokens" for c, n in offenders[:3])
    return (
        f"{len(offenders)} of {total} chunks are longer than model {spec.name} takes "
        f"({spec.max_tokens} tokens with its prefix): {examples}"
        + ("; ..." if len(offenders) > 3 else "")
        + f"; {remedy}"
    )


def embed_pieces(embedder: Embedder, batch: Sequence[Chunk], emit: Emit) -> None:
    """Embed one batch; when Ollama refuses an input as too long, halve the batch to name the chunk,
    emitting the vectors of every half that was answered, so they are kept."""
    try:
        emit(batch, embed_documents(embedder, [c.embed_text for c in batch]))
    except InputTooLongError as exc:
        if len(batch) > 1:
            mid = len(batch) // 2
            embed_pieces(embedder, batch[:mid], emit)
            embed_pieces(embedder, batch[mid:], emit)
            return
        c, spec = batch[0], embedder.spec
        n = tokens.count(spec.document_prefix + c.embed_text) + SPECIAL_TOKENS
        raise InputTooLongError(
            f"document {c.doc_id} chunk {c.seq} has {n} tokens, more than model {spec.name} takes on this server "
            f"(ragvps assumed {spec.max_tokens}; {exc}); check `ragvps doctor` for the model's context length "
            "and lower the setting chunk_size below it"
        ) from None


def embed_batch(embedder: Embedder, batch: Sequence[Chunk]) -> np.ndarray:
    """One batch's vectors in order (for callers without a cache: the worker, a model switch)."""
    pieces: list[tuple[Sequence[Chunk], np.ndarray]] = []
    embed_pieces(embedder, batch, lambda items, vectors: pieces.append((items, vectors)))
    rows = {id(c): v for items, vectors in pieces for c, v in zip(items, vectors, strict=True)}
    return np.stack([rows[id(c)] for c in batch]) if batch else np.zeros((0, embedder.spec.dims), np.float32)
