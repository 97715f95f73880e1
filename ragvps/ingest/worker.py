"""`ragvps worker`: embed the chunks an ingest with `defer_embedding` queued, from any machine that
reaches the database, until stopped (or until the queue is empty).

Each batch: claim under a lease (one short transaction), embed with no transaction open (renewing the
lease meanwhile, one statement at a time), write the vectors and take the rows off the queue (one
transaction). A worker that dies loses nothing: its lease runs out and another worker claims the rows.
The worker that empties the queue builds the HNSW index when the table is large enough and has none
(later inserts keep an existing index current).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import psycopg

from ragvps.config import Settings
from ragvps.db import index, queue, store
from ragvps.embed import Embedder
from ragvps.errors import DatabaseError, ModelMismatchError
from ragvps.ingest.embedding import embed_batch
from ragvps.ingest.periodic import Periodic
from ragvps.records import ModelSpec

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]


@dataclass
class WorkReport:
    worker: str
    model: str = ""
    batches: int = 0
    embedded: int = 0  # chunks whose vectors this worker wrote
    lost: int = 0  # claimed chunks another worker finished first (this worker's lease had run out)
    index_built: bool = False
    stopped: str = ""  # "empty" (exit_when_empty) or "stop" (a signal)


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def check_worker_model(active: store.EmbeddingSet, spec: ModelSpec) -> None:
    """A worker embeds with the model, prefixes and dimension of the set the queue fills, or not at all."""
    if active.identity == spec.identity:
        return
    what = (
        f"model {spec.name} ({spec.dims} dimensions)"
        if (spec.name, spec.dims) != (active.model, active.dims)
        else f"model {spec.name} with other task prefixes ({spec.document_prefix!r} / {spec.query_prefix!r})"
    )
    raise ModelMismatchError(
        f"this worker embeds with {what}, but the queue fills vectors for model {active.model} "
        f"({active.dims} dimensions, the active embedding set): configure the same embedder, embed_model and "
        f"prefixes on this machine as the ingest uses",
        settings=("embedder", "embed_model"),
    )


def work(
    connection: Callable[[], AbstractContextManager[psycopg.Connection]],
    settings: Settings,
    spec: ModelSpec,
    embedder: Callable[[], Embedder],
    *,
    name: str | None = None,
    exit_when_empty: bool = False,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    warn: Warn | None = None,
    poll: float | None = None,
) -> WorkReport:
    """Claim, embed and finish batches until `stop` is set (or the queue is empty, with exit_when_empty)."""
    stop = stop or threading.Event()
    report = WorkReport(name or default_name())
    lease = float(settings.embed.worker_lease)
    poll = poll if poll is not None else min(2.0, max(0.1, lease / 4))
    show = progress or (lambda stage, done, total: None)
    say = warn or (lambda message: log.warning("%s", message))
    with connection() as conn:
        eset = _wait_for_set(conn, stop, exit_when_empty, poll)
        if eset is None:
            report.stopped = "empty" if exit_when_empty else "stop"
            return report
        check_worker_model(eset, spec)
        report.model = eset.model
        model = embedder()  # loaded before the first claim: loading is not embedding time under a lease
        while not stop.is_set():
            claimed = queue.claim(conn, eset, report.worker, settings.embed.batch_size, lease)
            if claimed is None:
                if exit_when_empty and queue.left(conn, eset) == 0:
                    report.stopped = "empty"
                    return report
                stop.wait(poll)  # rows claimed by others may come back when their lease runs out
                continue
            try:
                with _Heartbeat(conn, claimed, lease / 3):
                    vectors = embed_batch(model, [c for _, c in claimed.chunks])
                written = queue.finish(conn, eset, report.worker, claimed, vectors)
            except BaseException:
                _release(conn, claimed)
                raise
            report.batches += 1
            report.embedded += written
            report.lost += len(claimed.chunks) - written
            remaining = queue.left(conn, eset)
            show("embed", report.embedded, report.embedded + remaining)
            if remaining == 0:
                report.index_built = _build_index(conn, eset, settings, show, say) or report.index_built
        report.stopped = "stop"
    return report


class _Heartbeat(Periodic):
    """Renews a claim's lease every `every` seconds while its batch is embedded (the connection is idle then:
    no transaction is open across the embedding call, only these one-statement ones)."""

    def __init__(self, conn: psycopg.Connection, claimed: queue.Claim, every: float):
        super().__init__(every, "lease")
        self.conn, self.claimed = conn, claimed

    def _run(self) -> None:
        while not self.done.wait(self.every):
            try:
                queue.renew(self.conn, self.claimed)
            except DatabaseError as exc:  # the lease then runs out, and another worker may take the batch
                log.warning("could not renew the lease of claim %s: %s", self.claimed.token, exc)
                return


def _wait_for_set(
    conn: psycopg.Connection, stop: threading.Event, exit_when_empty: bool, poll: float
) -> store.EmbeddingSet | None:
    while True:
        eset = store.active_set(conn)
        conn.commit()
        if eset is not None or exit_when_empty or stop.wait(poll):
            return eset


def _release(conn: psycopg.Connection, claimed: queue.Claim) -> None:
    try:
        queue.release(conn, claimed)
    except DatabaseError as exc:
        log.info("could not release claim %s (%s); its lease runs out instead", claimed.token, exc)


def _build_index(
    conn: psycopg.Connection, eset: store.EmbeddingSet, settings: Settings, progress: Progress, warn: Warn
) -> bool:
    """The queue is empty: build the HNSW index if the table is large enough and has none."""
    if index.index_exists(conn, eset):
        conn.commit()
        return False
    try:
        with store.write_lock(conn):
            if index.index_exists(conn, eset):  # another worker emptied the queue too and built it meanwhile
                conn.commit()
                return False
            return index.ensure_index(conn, eset, settings, progress, warn)
    except DatabaseError as exc:
        warn(f"the queue is empty but the index was not built here ({exc}); `ragvps reindex` builds it")
        return False
