"""The one registry of embedders: a kind (setting `embedder`) -> the factory that builds it."""

from __future__ import annotations

from collections.abc import Callable

from ragvps.config import Settings
from ragvps.embed import Embedder
from ragvps.embed.models import ModelSpec, spec_for


def _local(settings: Settings, spec: ModelSpec, retries: int | None) -> Embedder:
    from ragvps.embed.local import LocalEmbedder

    return LocalEmbedder(threads=settings.embed.threads, sub_batch=settings.embed.sub_batch, spec=spec)


def _ollama(settings: Settings, spec: ModelSpec, retries: int | None) -> Embedder:
    from ragvps.embed.ollama import OllamaEmbedder

    e = settings.embed
    return OllamaEmbedder(e.ollama_url, spec, e.keep_alive, timeout=e.timeout,
                          retries=e.retries if retries is None else retries)


EMBEDDERS: dict[str, Callable[[Settings, ModelSpec, int | None], Embedder]] = {"local": _local, "ollama": _ollama}


def make_embedder(settings: Settings, spec: ModelSpec | None = None, *, retries: int | None = None) -> Embedder:
    """The configured embedder; the local model loads here (about a second), Ollama is not contacted yet."""
    return EMBEDDERS[settings.embed.kind](settings, spec or spec_for(settings), retries)
