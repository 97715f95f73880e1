"""What a server's /health reports: the database reachable, what is in it, and whether the connection pool is
stuck. It never waits on the pool: the check runs on the pool's side connection (`Connections.probe`), whose
connect and statement timeouts are a few seconds, and reads the pool's counters, so it says what is wrong
while it is wrong (a pool held by slow requests, a database that is down or restarting)."""

from __future__ import annotations

from dataclasses import dataclass

from ragvps.app.requests import Health
from ragvps.config import Settings
from ragvps.db import catalog, store
from ragvps.db.catalog import KbGauges
from ragvps.db.connections import Connections, PoolStats
from ragvps.db.database import driver_errors
from ragvps.errors import RagvpsError

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
    """The health of the knowledge base in `schema` (None: the connection's own, a database of one)."""
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
