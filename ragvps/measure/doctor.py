"""`ragvps doctor`: ask the embedder about its model, embed one text, compare with the index."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragvps.config import Settings
from ragvps.db import store
from ragvps.embed import embed_documents
from ragvps.embed.models import dimension_message
from ragvps.embed.registry import make_embedder, resolve_spec
from ragvps.errors import RagvpsError
from ragvps.records import ModelSpec

if TYPE_CHECKING:
    from ragvps.db.store import EmbeddingSet
    from ragvps.embed.ollama import OllamaEmbedder


@dataclass
class Diagnosis:
    model: str
    embedder: str
    dims: int  # what ragvps expects
    max_tokens: int
    document_prefix: str
    query_prefix: str
    server_dims: int | None = None  # what Ollama's /api/show says
    server_context: int | None = None
    probe_dims: int | None = None  # what one real embedding returned
    probe_ms: float | None = None
    index_model: str | None = None
    index_dims: int | None = None
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    known: bool = True  # False: a model ragvps has no entry for, used with what the server reports


def diagnose(settings: Settings, active: Callable[[], EmbeddingSet | None]) -> Diagnosis:
    """Ask the embedder (and Ollama's /api/show) about the model, embed one text, compare with the index."""

    try:
        spec = resolve_spec(settings)
    except RagvpsError as exc:  # e.g. a model the server does not have: `ollama pull` it
        d = Diagnosis(settings.embed.model_name, settings.embed.kind, 0, 0, "", "", problems=[str(exc)])
        _check_index(settings, None, d, active)
        return d
    d = Diagnosis(spec.name, settings.embed.kind, spec.dims, spec.max_tokens, spec.document_prefix, spec.query_prefix)
    d.lines.append(
        f"embedder {settings.embed.kind}, model {spec.name}: ragvps expects {spec.dims} dimensions, "
        f"input up to {spec.max_tokens} tokens, prefixes {spec.document_prefix!r} / {spec.query_prefix!r}"
    )
    if not spec.known:
        d.known = False
        d.lines.append(
            f"model {spec.name} has no entry in ragvps's table: its dimension and input limit are what Ollama "
            f"reports, chunks default to {spec.chunk_size} tokens, and it gets "
            + (
                "no task prefixes (set document_prefix and query_prefix if its model card names them)"
                if not (spec.document_prefix or spec.query_prefix)
                else "the configured task prefixes"
            )
        )
    try:
        embedder = make_embedder(settings, spec, retries=0)
        show = getattr(embedder, "show", None)  # an embedder that runs on a server can say what it serves
        if show is not None:
            _check_server(embedder, spec, d)  # type: ignore[arg-type]
        else:
            d.lines.append(
                f"local model in process: {settings.embed.threads or os.cpu_count()} threads, "
                f"sub-batches of {settings.embed.sub_batch}"
            )
        start = time.perf_counter()
        d.probe_dims = int(embed_documents(embedder, ["ragvps doctor checks the embedder"]).shape[1])
        d.probe_ms = round((time.perf_counter() - start) * 1000, 1)
        d.lines.append(f"one embedding: {d.probe_dims} dimensions in {d.probe_ms} ms (the first call loads the model)")
    except RagvpsError as exc:
        d.problems.append(str(exc))
    _check_index(settings, spec, d, active)
    return d


def _check_server(embedder: OllamaEmbedder, spec: ModelSpec, d: Diagnosis) -> None:
    info = embedder.show()
    d.server_dims, d.server_context = info.dims, info.context_length
    d.lines.append(
        f"Ollama at {embedder.url}: {spec.name} ({info.architecture or 'unknown architecture'}), "
        f"{info.dims} dimensions, context length {info.context_length}"
    )
    if info.capabilities and "embedding" not in info.capabilities:
        d.problems.append(f"{spec.name} is not an embedding model (capabilities: {', '.join(info.capabilities)})")
    if info.dims is not None and info.dims != spec.dims:
        d.problems.append(dimension_message(spec.name, info.dims, spec.dims))
    if info.context_length is not None and info.context_length < spec.max_tokens:
        d.problems.append(
            f"Ollama gives {spec.name} a context of {info.context_length} tokens, but ragvps cuts chunks for "
            f"{spec.max_tokens}: set chunk_size below {info.context_length - 40} or Ollama refuses long chunks"
        )


def _check_index(
    settings: Settings, spec: ModelSpec | None, d: Diagnosis, active: Callable[[], EmbeddingSet | None]
) -> None:
    try:
        current = active()
    except RagvpsError as exc:
        d.problems.append(str(exc))
        return
    if current is None:
        d.lines.append("index: empty (the first `ragvps ingest` creates it for this model)")
        return
    d.index_model, d.index_dims = current.model, current.dims
    d.lines.append(f"index: {current.vector_type}({current.dims}) vectors from model {current.model}")
    if spec is None:
        return
    try:
        store.check_model(current, spec, settings.index.vector_type, "ingest")
    except RagvpsError as exc:
        d.problems.append(str(exc))
