"""Where the app's connections come from: one connection for a CLI command, a pool for a server.

Both register pgvector's types on each connection and run the migrations once per process, on the first
connection, not on every one.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ragvps.config import Settings
from ragvps.db.catalog import bind
from ragvps.db.database import connect, pooled_session
from ragvps.db.embedded import database_url
from ragvps.db.replicated import Reader, ReplicaReads, ReplicaReport, Write, read_only
from ragvps.errors import DatabaseError, redact

T = TypeVar("T")

PROBE_CONNECT_S = 3  # a health probe's connect timeout
SPARE_WAIT_S = 0.002  # a spare connection (a search's second leg) is taken only if the pool has one at once
PROBE_STATEMENT_MS = 2000  # ... and its statements' (a lock waited on for longer is reported, not waited out)


@dataclass(frozen=True)
class PoolStats:
    """A server's pool at one moment: connections it may hold, in use, requests waiting for one, and for how
    long no request has got or given back a connection while some waited (0 when none waits)."""

    size: int
    busy: int
    waiting: int
    stalled_s: float


class Connections(Protocol):
    migrated: set[str]  # the knowledge bases' schemas migrated through these connections (once a process)

    def connection(self) -> Any:
        """A context manager giving a connection; a clean exit commits what is left open."""
        ...

    def probe(self) -> Any:
        """A context manager giving a connection for a health check, without waiting on the pool."""
        ...

    def stats(self) -> PoolStats | None: ...

    def spare(self) -> Any:
        """A context manager giving a second connection for a request that holds one, or None when none is idle
        now (a search's legs then run one after the other on the request's own)."""
        ...

    def read(self, work: Callable[[Reader], T], schema: str | None = None) -> T:
        """`work` on a replica that has replayed the schema's last write, else on the primary (db/replicated.py)."""
        ...

    def write_behind(self, writes: list[Write], schema: str | None) -> None:
        """Writes a read makes (the answer memo): now, or kept until the primary is back when it is away."""
        ...

    def replicas(self) -> ReplicaReport | None:
        """The replicas' states and lags, the primary's problem; None without replicas."""
        ...

    def close(self) -> None: ...


def _write_now(connections: Connections, writes: list[Write], schema: str | None) -> None:
    with connections.connection() as conn:
        if schema is not None:
            bind(conn, schema)
        for write in writes:
            write(conn)


class SingleConnection:
    """One connection, opened when first asked for, reused by every use case of the process."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.migrated: set[str] = set()
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.settings)
            conn = self._conn
        try:
            yield conn
        except BaseException:
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()
            raise
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
            conn.commit()

    def probe(self) -> Any:
        return self.connection()

    def stats(self) -> PoolStats | None:
        return None

    @contextmanager
    def spare(self) -> Iterator[None]:
        yield None  # one connection: nothing to spare

    def read(self, work: Callable[[Reader], T], schema: str | None = None) -> T:
        with self.connection() as conn:
            if schema is not None:
                bind(conn, schema)
            return work(Reader(conn, self.spare))

    def write_behind(self, writes: list[Write], schema: str | None) -> None:
        _write_now(self, writes, schema)

    def replicas(self) -> ReplicaReport | None:
        return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PooledConnections:
    """A psycopg_pool pool for a long-running server: `pool_size` connections, checked on checkout."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.migrated: set[str] = set()
        self._lock, self._probe_lock = threading.Lock(), threading.Lock()
        self._waiting, self._busy, self._progress = 0, 0, time.monotonic()
        self._probe: psycopg.Connection | None = None
        url = self._url = database_url(settings)
        with connect(settings) as first:  # the migrations, once
            first.commit()
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=settings.database.pool_size,
            open=False,
            configure=pooled_session,
            check=_check,
            kwargs={"connect_timeout": 10},
            name="ragvps",
        )
        try:
            self.pool.open(wait=True, timeout=30)
        except Exception as exc:  # psycopg_pool.PoolTimeout: the server went away after the first connect
            self.pool.close()
            raise DatabaseError(
                f"cannot open a pool of connections to the database: {redact(str(exc))}; "
                "check that PostgreSQL is running and accepts connections"
            ) from exc
        self._replicas = ReplicaReads(settings, self, _check) if settings.database.replica_urls else None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        replicas = self._replicas
        if replicas is not None and replicas.primary_problem is not None:  # fail at once, not at the pool's timeout
            raise read_only(replicas.primary_problem)
        waiting = True
        self._count(waiting=1)
        try:
            with self.pool.connection() as conn:
                waiting = False
                self._count(waiting=-1, busy=1)
                try:
                    yield conn
                    if replicas is not None:
                        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                            conn.commit()
                        replicas.note(conn)
                finally:
                    self._count(busy=-1)
        except PoolTimeout as exc:
            raise DatabaseError(
                f"all {self.settings.database.pool_size} database connections are busy (setting "
                "pool_size): retry, or raise pool_size"
            ) from exc
        finally:
            if waiting:
                self._count(waiting=-1)

    def _count(self, waiting: int = 0, busy: int = 0) -> None:
        with self._lock:
            if busy or not self._waiting:  # a connection taken or given back, or the first request to wait
                self._progress = time.monotonic()
            self._waiting += waiting
            self._busy += busy

    def stats(self) -> PoolStats:
        with self._lock:
            waiting, busy, since = self._waiting, self._busy, self._progress
        return PoolStats(
            self.settings.database.pool_size, busy, waiting, round(time.monotonic() - since, 1) if waiting else 0.0
        )

    @contextmanager
    def spare(self) -> Iterator[psycopg.Connection | None]:
        """A pool connection only while the pool is mostly idle (no request waits, at most half of it busy) and one
        can be had at once: under load a second connection a request would make the next request wait for one."""
        with self._lock:
            free = not self._waiting and self._busy <= max(self.settings.database.pool_size // 2, 1)  # its own too
        conn = None
        if free:
            try:
                conn = self.pool.getconn(timeout=SPARE_WAIT_S)
            except PoolTimeout:
                conn = None
        if conn is None:
            yield None
            return
        self._count(busy=1)
        try:
            yield conn
        finally:
            self._count(busy=-1)
            if not conn.closed:
                conn.rollback()  # read-only work: nothing to keep; the pool takes it back idle
            self.pool.putconn(conn)

    @contextmanager
    def probe(self) -> Iterator[psycopg.Connection]:
        """The health check's own connection, beside the pool (so a pool held by slow requests does not hold up
        /health), with short timeouts; opened again when it was lost (a restarted server)."""
        with self._probe_lock:
            if self._probe is not None:
                try:  # one cheap round trip: a connection from before a restart is replaced now, not reported
                    self._probe.execute("SELECT 1")
                except psycopg.Error:
                    self._probe.close()
            if self._probe is None or self._probe.closed:
                self._probe = None
                try:
                    self._probe = psycopg.connect(
                        self._url,
                        connect_timeout=PROBE_CONNECT_S,
                        autocommit=True,
                        options=f"-c statement_timeout={PROBE_STATEMENT_MS} -c lock_timeout={PROBE_STATEMENT_MS // 2}",
                    )
                except psycopg.OperationalError as exc:
                    detail = redact(str(exc)).strip().splitlines()
                    raise DatabaseError(
                        f"the database cannot be reached ({detail[0] if detail else 'no answer'}):"
                        " check that PostgreSQL is running; the server reconnects by itself"
                    ) from exc
            try:
                yield self._probe
            except BaseException:
                self._probe.close()
                self._probe = None
                raise

    def read(self, work: Callable[[Reader], T], schema: str | None = None) -> T:
        if self._replicas is None:
            with self.connection() as conn:
                if schema is not None:
                    bind(conn, schema)
                return work(Reader(conn, self.spare))
        return self._replicas.read(work, schema)

    def write_behind(self, writes: list[Write], schema: str | None) -> None:
        if self._replicas is None:
            _write_now(self, writes, schema)
        else:
            self._replicas.write_behind(writes, schema)

    def replicas(self) -> ReplicaReport | None:
        return None if self._replicas is None else self._replicas.report()

    def close(self) -> None:
        if self._replicas is not None:
            self._replicas.close()
        with self._probe_lock:
            if self._probe is not None:
                self._probe.close()
        self.pool.close()


def _check(conn: psycopg.Connection) -> None:
    """The pool's check of a connection it hands out, without a round trip when nothing is amiss: an idle connection
    has nothing to read, so one whose socket is readable (PostgreSQL ended the session: a restart, a terminated
    backend, its FATAL message or the socket's end) or that is no longer OK gets psycopg_pool's check, which raises
    for a dead one and the pool replaces it. The round trip every checkout cost was one of a served search's few."""
    readable = True
    if not conn.closed and conn.pgconn.status == psycopg.pq.ConnStatus.OK:
        try:
            readable = bool(select.select([conn.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            readable = True
    if readable:
        ConnectionPool.check_connection(conn)
