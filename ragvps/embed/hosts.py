"""Lanes that run embedding batches: one embedder in the caller's thread, or several Ollama hosts.

Several hosts serving the same model each get a thread that pulls batches from one shared queue, so a
faster host takes more of them. Each host is checked first (/api/show: the model, its dimension, enough
context); one that disagrees is refused by name. A host that fails after its retries goes on cooldown
and the part of its batch not yet answered goes back to the queue. Results reach the caller's thread
only, through `run()`'s iterator, so the caller is the one writer of the vector cache.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ragvps.embed.models import dimension_message
from ragvps.errors import DimensionError, EmbedderError, HostDownError

if TYPE_CHECKING:
    import numpy as np

    from ragvps.embed import Embedder
    from ragvps.embed.ollama import OllamaEmbedder
    from ragvps.records import ModelSpec

log = logging.getLogger(__name__)

Piece = tuple[Sequence[Any], "np.ndarray"]  # items and their vectors, one row per item
Emit = Callable[[Sequence[Any], "np.ndarray"], None]
Work = Callable[["Embedder", Sequence[Any], Emit], None]  # embeds one batch, emitting what it gets back
Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]

COOLDOWN = 30.0  # seconds a failed host rests before it is tried again; doubled after each failure
COOLDOWN_CAP = 300.0


class Lanes(Protocol):
    def run(self, batches: Sequence[Sequence[Any]], work: Work, longest: int = 0) -> Iterator[Piece]:
        """Every batch through `work`; pieces as they come back (in the caller's thread)."""
        ...

    def report(self) -> dict[str, dict[str, Any]]:
        """Per host (or embedder): chunks, batches, seconds busy, rate, state."""
        ...


class OneLane:
    """One embedder, in the caller's thread (the local model, which uses every core already)."""

    def __init__(self, embedder: Embedder, label: str = "local"):
        self.embedder, self.label = embedder, label
        self.stats = HostStats(label)

    def run(self, batches: Sequence[Sequence[Any]], work: Work, longest: int = 0) -> Iterator[Piece]:
        for batch in batches:
            pieces: list[Piece] = []
            start = time.perf_counter()
            try:
                work(self.embedder, batch, partial(_keep, pieces))
            except BaseException:
                yield from pieces  # what was answered before the failure is kept
                raise
            self.stats.record(len(batch), time.perf_counter() - start)
            yield from pieces

    def report(self) -> dict[str, dict[str, Any]]:
        return {self.label: self.stats.as_dict()}


class ThreadLanes:
    """Several embedders in this process, a thread each, pulling batches from one queue: the local model at one
    onnxruntime thread a lane. One model call split over every core waits at each step for its slowest thread,
    so a core another process takes for a moment (a search, while an upload embeds at low priority) stalls
    the whole call; lanes of one thread each lose only that core's share (bench/RESULTS.md, upload_bench)."""

    def __init__(self, embedders: Sequence[Embedder], label: str = "local"):
        self.embedders, self.label = list(embedders), label
        self.stats = HostStats(label)
        self._lock = threading.Lock()

    def run(self, batches: Sequence[Sequence[Any]], work: Work, longest: int = 0) -> Iterator[Piece]:
        todo: queue.Queue[Sequence[Any]] = queue.Queue()
        for batch in batches:
            todo.put(batch)
        results: queue.Queue[tuple[BaseException | None, list[Piece]]] = queue.Queue()
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=self._lane, args=(e, todo, results, stop, work), daemon=True, name=f"embed {self.label} {i}"
            )
            for i, e in enumerate(self.embedders)
        ]
        for t in threads:
            t.start()
        failure: BaseException | None = None
        try:
            for _ in batches:
                failure, pieces = results.get()
                yield from pieces  # what was answered before a failure is kept
                if failure is not None:
                    break
        finally:
            stop.set()
            for t in threads:  # each ends after the batch in hand
                t.join()
        if failure is not None:
            raise failure

    def _lane(
        self,
        embedder: Embedder,
        todo: queue.Queue[Sequence[Any]],
        results: queue.Queue[tuple[BaseException | None, list[Piece]]],
        stop: threading.Event,
        work: Work,
    ) -> None:
        while not stop.is_set():
            try:
                batch = todo.get_nowait()
            except queue.Empty:
                return
            pieces: list[Piece] = []
            start = time.perf_counter()
            try:
                work(embedder, batch, partial(_keep, pieces))
            except BaseException as exc:  # a chunk too long, or anything unexpected: the run stops
                results.put((exc, pieces))
                return
            with self._lock:
                self.stats.record(len(batch), time.perf_counter() - start)
            results.put((None, pieces))

    def report(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {self.label: self.stats.as_dict()}


def _keep(pieces: list[Piece], items: Sequence[Any], vectors: np.ndarray) -> None:
    pieces.append((items, vectors))


@dataclass
class HostStats:
    url: str
    state: str = "checking"  # checking | ready | cooling | refused
    reason: str = ""
    chunks: int = 0
    batches: int = 0
    busy: float = 0.0  # seconds spent in successful batches
    failures: int = 0
    until: float = 0.0  # end of the cooldown (time.monotonic)
    checked: bool = False

    def record(self, chunks: int, seconds: float) -> None:
        self.chunks += chunks
        self.batches += 1
        self.busy += seconds

    def as_dict(self) -> dict[str, Any]:
        rate = round(self.chunks / self.busy, 2) if self.busy else None
        return {
            "state": self.state,
            "reason": self.reason,
            "chunks": self.chunks,
            "batches": self.batches,
            "seconds": round(self.busy, 3),
            "chunks_per_s": rate,
            "failures": self.failures,
        }


class HostPool:
    """Several Ollama hosts with one model, pulling batches from a shared queue (see the module docstring)."""

    def __init__(
        self,
        embedders: Sequence[OllamaEmbedder],
        spec: ModelSpec,
        *,
        cooldown: float = COOLDOWN,
        progress: Progress | None = None,
        warn: Warn | None = None,
    ):
        self.embedders = list(embedders)
        self.spec = spec
        self.cooldown = cooldown
        self.progress = progress
        self.warn = warn or (lambda message: log.warning("%s", message))
        self.hosts = [HostStats(e.url) for e in self.embedders]
        self._lock = threading.Lock()

    def report(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {h.url: h.as_dict() for h in self.hosts}

    def run(self, batches: Sequence[Sequence[Any]], work: Work, longest: int = 0) -> Iterator[Piece]:
        todo: queue.Queue[Sequence[Any]] = queue.Queue()
        for batch in batches:
            todo.put(batch)
        results: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
        stop = threading.Event()
        total = sum(len(b) for b in batches)
        threads = [
            threading.Thread(
                target=self._lane,
                args=(e, h, todo, results, stop, work, longest, total),
                name=f"embed {e.url}",
                daemon=True,
            )
            for e, h in zip(self.embedders, self.hosts, strict=True)
        ]
        for t in threads:
            t.start()
        outstanding = len(batches)
        failure: BaseException | None = None
        interrupted = True  # Ctrl-C, or the caller stopped reading: do not wait for requests in flight
        try:
            while outstanding and failure is None:
                kind, a, b = results.get()
                if kind == "piece":
                    yield a, b
                elif kind == "done":
                    outstanding -= 1
                elif kind == "fatal":
                    failure = a
                elif kind == "host" and not self._any_left():
                    failure = EmbedderError(self._none_left())
            interrupted = False
        finally:
            stop.set()
            for t in threads:  # a failing run waits for the other hosts' batches in flight, to keep them
                t.join(0.2 if interrupted else None)
        while not results.empty():  # batches that finished while the run was failing are kept
            kind, a, b = results.get()
            if kind == "piece":
                yield a, b
        if failure is not None:
            raise failure

    def _any_left(self) -> bool:
        with self._lock:
            return any(h.state in ("checking", "ready") for h in self.hosts)

    def _none_left(self) -> str:
        with self._lock:
            hosts = list(self.hosts)
        if len(hosts) == 1:
            return hosts[0].reason
        why = "; ".join(f"{h.url} {h.reason}" for h in hosts)
        return (
            f"no Ollama host is left to embed with model {self.spec.name}: {why}; "
            "start them or fix the setting ollama_url, then rerun (what was embedded is kept)"
        )

    def _lane(
        self,
        embedder: OllamaEmbedder,
        host: HostStats,
        todo: queue.Queue[Sequence[Any]],
        results: queue.Queue[tuple[str, Any, Any]],
        stop: threading.Event,
        work: Work,
        longest: int,
        total: int,
    ) -> None:
        """One host's thread: it checks the host, then embeds batches from `todo` until `stop`, resting while on
        cooldown; it ends when the host is refused or the run fails."""
        while not stop.is_set():
            with self._lock:
                state, until = host.state, host.until
            if state == "refused":
                return
            if state == "cooling":
                if stop.wait(max(0.0, until - time.monotonic())):
                    return
                with self._lock:
                    host.state = "ready" if host.checked else "checking"
                continue
            if not host.checked:
                try:
                    self._check(embedder, host, longest)
                except HostDownError as exc:
                    self._fail(host, exc.short, str(exc), results)
                except (EmbedderError, DimensionError) as exc:
                    self._refuse(host, str(exc), results)
                continue
            try:
                batch = todo.get(timeout=0.05)
            except queue.Empty:
                continue
            if not self._embed(embedder, host, batch, todo, results, work, total):
                return

    def _embed(
        self,
        embedder: OllamaEmbedder,
        host: HostStats,
        batch: Sequence[Any],
        todo: queue.Queue[Sequence[Any]],
        results: queue.Queue[tuple[str, Any, Any]],
        work: Work,
        total: int,
    ) -> bool:
        """One batch on this host, its pieces put on `results` as they come; when the host fails or disagrees, the
        part not answered goes back to `todo`. False: the run stops (a chunk too long, or anything unexpected)."""
        answered: set[int] = set()

        def emit(items: Sequence[Any], vectors: np.ndarray) -> None:
            answered.update(id(item) for item in items)
            results.put(("piece", items, vectors))

        start = time.perf_counter()
        try:
            work(embedder, batch, emit)
        except (EmbedderError, DimensionError) as exc:  # this host failed or disagrees (not: a chunk too long)
            rest = [item for item in batch if id(item) not in answered]
            if rest:
                todo.put(rest)
            else:
                results.put(("done", None, None))
            if isinstance(exc, HostDownError):
                self._fail(host, exc.short, str(exc), results)
            else:
                self._refuse(host, str(exc), results)
            return True
        except BaseException as exc:  # a chunk too long, or anything unexpected: the run stops
            results.put(("fatal", exc, None))
            return False
        with self._lock:
            host.record(len(batch), time.perf_counter() - start)
            done = host.chunks
        results.put(("done", None, None))
        if self.progress and len(self.hosts) > 1:
            self.progress(f"embed {host.url}", done, total)
        return True

    def _check(self, embedder: OllamaEmbedder, host: HostStats, longest: int) -> None:
        """The host serves this model with this dimension and enough context, or it is refused."""
        info = embedder.show()
        spec = self.spec
        problem = None
        if info.capabilities and "embedding" not in info.capabilities:
            problem = (
                f"serves {spec.name}, which is not an embedding model (capabilities: {', '.join(info.capabilities)})"
            )
        elif info.dims is not None and info.dims != spec.dims:
            problem = dimension_message(spec.name, info.dims, spec.dims)
        elif info.context_length is not None and info.context_length < longest:
            problem = (
                f"gives {spec.name} a context of {info.context_length} tokens, less than the longest "
                f"chunk's {longest}: lower the setting chunk_size, or drop this host from ollama_url"
            )
        if problem:
            raise EmbedderError(f"Ollama at {embedder.url}: {problem}")
        with self._lock:
            host.checked, host.state = True, "ready"

    def _fail(self, host: HostStats, short: str, message: str, results: queue.Queue[tuple[str, Any, Any]]) -> None:
        with self._lock:
            host.failures += 1
            rest = min(COOLDOWN_CAP, self.cooldown * 2 ** (host.failures - 1))
            host.state, host.until = "cooling", time.monotonic() + rest
            host.reason = message if len(self.hosts) == 1 else short
            others = sum(h.state in ("checking", "ready") for h in self.hosts)
        if others:
            self.warn(f"{message}; its batches go to the other hosts, and it is tried again in {rest:g} s")
        results.put(("host", host, None))

    def _refuse(self, host: HostStats, message: str, results: queue.Queue[tuple[str, Any, Any]]) -> None:
        with self._lock:
            host.state = "refused"
            host.reason = message if len(self.hosts) == 1 else "refused: " + message
            others = sum(h.state in ("checking", "ready") for h in self.hosts)
        if others:
            self.warn(f"{message}; this host is not used")
        results.put(("host", host, None))
