"""What a server's /health reports: the database reachable, what is in it, and whether the connection pool is
stuck. It never waits on the pool: the check runs on the pool's side connection (`Connections.probe`), whose
connect and statement timeouts are a few seconds, and reads the pool's counters, so it says what is wrong
while it is wrong (a pool held by slow requests, a database that is down or restarting)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragvps.app.requests import Health
from ragvps.config import Settings
from ragvps.db import catalog, store
from ragvps.db.catalog import KbGauges
from ragvps.db.connections import Connections, PoolStats
from ragvps.db.database import driver_errors
from ragvps.db.replicas import ReplicaStatus, check_once
from ragvps.db.replicated import ReplicaReport as ReplicaReport  # re-exported: /metrics renders it
from ragvps.errors import RagvpsError

if TYPE_CHECKING:
    from ragvps.db.replicated import Reader
    from ragvps.db.store import EmbeddingSet

POOL_STALLED_S = 1.0  # requests waiting this long with no connection taken or given back: the pool is stuck


def pool_problem(pool: PoolStats | None) -> str | None:
    """What is wrong with the pool, or None: every connection held while requests wait and none comes free."""
    if pool is None or not pool.waiting or pool.stalled_s < POOL_STALLED_S:
        return None
    return (
        f"all {pool.size} database connections (setting pool_size) are busy and {pool.waiting} requests have "
        f"waited {pool.stalled_s:g} s with none coming free: slow requests hold them (a long query or a locked "
        "table, see pg_stat_activity); raise pool_size, or end what holds them"
    )


def health(settings: Settings, connections: Connections, schema: str | None) -> Health:
    """The health of the knowledge base in `schema` (None: the connection's own, a database of one); with replicas,
    `degraded` names what is skipped (the primary away: read from the replicas, writes refused)."""
    report = connections.replicas()
    if report is not None and report.primary_problem is not None:
        return _primary_away(settings, connections, schema, report)
    found = _health(settings, connections, schema)
    if report is None:
        return found
    skipped = [f"replica {r.name} is {r.state}: {r.problem}" for r in report.replicas if r.state != "ok"]
    return dataclasses.replace(found, degraded="; ".join(skipped) or None, replicas=report.replicas)


def _primary_away(settings: Settings, connections: Connections, schema: str | None, report: ReplicaReport) -> Health:
    skipped = [f"replica {r.name} is {r.state}: {r.problem}" for r in report.replicas if r.state != "ok"]

    def read(reader: Reader) -> tuple[EmbeddingSet | None, int]:
        return store.active_set(reader.conn), store.chunk_count(reader.conn)

    cause = (
        f"the primary database cannot be reached ({report.primary_problem}): searches and answers come from the "
        "replicas, writes are refused (503) until it is back"
    )
    try:
        with driver_errors(settings):
            eset, chunks = connections.read(read, schema)
    except RagvpsError as exc:
        return Health(False, False, error=f"{cause}; and no replica answers: {exc}", replicas=report.replicas)
    degraded = "; ".join([cause, *skipped])
    if eset is None:
        return Health(True, True, True, chunks=chunks, degraded=degraded, replicas=report.replicas)
    return Health(
        True, True, False, eset.model, eset.dims, eset.vector_type, chunks, degraded=degraded, replicas=report.replicas
    )


def _health(settings: Settings, connections: Connections, schema: str | None) -> Health:
    connected = False
    try:
        with driver_errors(settings), connections.probe() as conn:
            connected = True
            if schema is not None:
                catalog.bind(conn, schema)
            eset = store.active_set(conn)
            chunks = store.chunk_count(conn)
    except RagvpsError as exc:
        stuck = pool_problem(pool := connections.stats())
        if not connected:  # the database cannot be reached (down, restarting, refusing)
            return Health(False, False, error="; ".join(filter(None, [str(exc), stuck])), pool=pool)
        slow = (
            "the database answers, but reading the chunks did not finish within a few seconds (a lock or a "
            f"long query holds them): {exc}"
        )
        return Health(False, True, error="; ".join(filter(None, [stuck, slow])), pool=pool)
    stuck = pool_problem(pool := connections.stats())  # after the check: a stall has grown meanwhile
    if stuck:
        return Health(False, True, eset is None, chunks=chunks, error=stuck, pool=pool)
    if eset is None:
        return Health(True, True, empty=True, chunks=chunks, pool=pool)
    return Health(True, True, False, eset.model, eset.dims, eset.vector_type, chunks, pool=pool)


@dataclass(frozen=True)
class Scrape:
    """What /metrics reads of the database at a scrape: reachable or not, the pool's counters, and each
    knowledge base's index and queue beside shared_buffers."""

    database: bool
    pool: PoolStats | None
    kbs: tuple[KbGauges, ...] = ()
    shared_buffers: int = 0


def scrape(settings: Settings, connections: Connections) -> Scrape:
    """One round trip on the health check's side connection (short timeouts, never the pool's)."""
    try:
        with driver_errors(settings), connections.probe() as conn:
            kbs, shared_buffers = catalog.gauges(conn)
    except RagvpsError:
        return Scrape(False, connections.stats())
    return Scrape(True, connections.stats(), tuple(kbs), shared_buffers)


def replica_states(settings: Settings, connections: Connections) -> tuple[ReplicaStatus, ...]:
    """Each read replica's state and lag: as the server's watcher saw them last, or checked once now (a command)."""
    report = connections.replicas()
    if report is not None:
        return report.replicas
    return check_once(settings) if settings.database.replica_urls else ()
