"""Embed stage: the embedder protocol and the rules every embedder shares; backends live beside it
(`local`, `ollama`), and `registry` is the one place that maps an embedder kind to its backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ragvps.records import ModelSpec


class Embedder(Protocol):
    spec: ModelSpec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts that already carry their task prefix; one row per text, float32."""
        ...

    def embed_questions(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for questions (prefixed too): the same model, possibly run in cheaper arithmetic."""
        ...


def embed_documents(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    return embedder.embed([embedder.spec.document_prefix + t for t in texts])


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    return embedder.embed_questions([embedder.spec.query_prefix + t for t in texts])
