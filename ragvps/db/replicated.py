"""A server's reads over its replicas (db/replicas.py watches them) and what it does while the primary is away.

`read(work, schema)` runs `work` on a replica that is ok and has replayed the schema's last write noted (waiting up to
`replica_wait` for it); a replica that fails under it is skipped and the work runs again on the next, and last on the
primary. `write_behind(writes, schema)` writes now when the primary answers, else keeps the writes in a bounded queue
written when it returns (the oldest dropped, and counted, past MAX_DEFERRED): the answer memo and cache a read makes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ragvps.config import Settings
from ragvps.db.catalog import bind, bound
from ragvps.db.database import driver_errors, pooled_session
from ragvps.db.replicas import REPLAY_POLL_S, Replica, ReplicaStatus, Watcher, lsn_int, problem_of
from ragvps.errors import DatabaseError, redact

log = logging.getLogger(__name__)
T = TypeVar("T")
Write = Callable[[psycopg.Connection], None]
MAX_DEFERRED = 10_000  # writes kept while the primary is away; the oldest go first past it
REPLICA_POOL_WAIT_S = 1.0  # a read waits this long for one of a replica's connections, then reads elsewhere


class Primary(Protocol):
    """The primary's pool (db/connections.py PooledConnections)."""

    def connection(self) -> AbstractContextManager[psycopg.Connection]: ...

    def spare(self) -> AbstractContextManager[psycopg.Connection | None]: ...


@dataclass(frozen=True)
class Reader:
    """A connection a read runs on, where a second one for the same server comes from (a search's keyword leg), and
    which replica it is (None: the primary)."""

    conn: psycopg.Connection
    spare: Callable[[], AbstractContextManager[psycopg.Connection | None]]
    replica: str | None = None


@dataclass(frozen=True)
class ReplicaReport:
    """The replicas and the primary as a server sees them: each replica's state and lag, the primary's problem (None:
    it answers), reads by where they ran, and the writes kept for the primary, written and dropped."""

    replicas: tuple[ReplicaStatus, ...]
    primary_problem: str | None
    reads: dict[str, int]
    deferred: int
    deferred_written: int
    deferred_dropped: int


def read_only(problem: str) -> DatabaseError:
    return DatabaseError(
        f"the database is read-only for now: the primary cannot be reached ({problem}); searches and answers "
        "still work from the replicas (setting database_replica_urls); retry the write once the primary is back"
    )


class ReplicaReads:
    def __init__(self, settings: Settings, primary: Primary, check: Callable[[psycopg.Connection], None]):
        self.settings, self.primary = settings, primary
        self.watcher = Watcher(settings, self._flush)
        self.pools = {
            r.name: ConnectionPool(
                r.url,
                min_size=1,
                max_size=settings.database.pool_size,
                open=False,
                configure=pooled_session,
                check=check,
                kwargs={"connect_timeout": 3},
                name=f"ragvps-replica-{n}",
                reconnect_timeout=86_400,  # a replica away is tried again (the watcher says when it is back)
            )
            for n, r in enumerate(self.watcher.replicas, 1)
        }
        self.written: dict[str | None, int] = {}  # schema (None: any) -> the WAL position after its last write
        self.reads: Counter[str] = Counter()
        self._deferred: deque[tuple[str | None, Write]] = deque()
        self.deferred_written = self.deferred_dropped = 0
        self._lock = threading.Lock()
        self._turn = 0
        for pool in self.pools.values():
            pool.open(wait=False)
        self.watcher.start()

    def close(self) -> None:
        self.watcher.stop()
        for pool in self.pools.values():
            pool.close()

    @property
    def primary_problem(self) -> str | None:
        return self.watcher.primary_problem

    def report(self) -> ReplicaReport:
        with self._lock:
            return ReplicaReport(
                tuple(r.status() for r in self.watcher.replicas),
                self.watcher.primary_problem,
                dict(self.reads),
                len(self._deferred),
                self.deferred_written,
                self.deferred_dropped,
            )

    # --- read your own writes ------------------------------------------------------------------------------

    def note(self, conn: psycopg.Connection) -> None:
        """After a primary checkout: the WAL position past its commit (the insert position: an asynchronous commit may
        not be written out yet), for the schema it was bound to and for any."""
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return
        try:
            row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
            conn.rollback()
        except psycopg.Error:  # the primary went away after the write: nothing to wait for on a replica
            return
        lsn, schema = lsn_int(row[0] if row else None), bound(conn)
        with self._lock:
            for key in {schema, None}:
                if lsn > self.written.get(key, 0):
                    self.written[key] = lsn

    def _replayed(self, conn: psycopg.Connection, replica: Replica, need: int) -> bool:
        """Has `replica` replayed WAL position `need`? Asked again every REPLAY_POLL_S for up to replica_wait."""
        if replica.replayed >= need:
            return True
        end = time.monotonic() + self.settings.database.replica_wait
        while True:
            row = conn.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
            conn.rollback()
            replayed = lsn_int(row[0] if row else None)
            replica.replayed = max(replica.replayed, replayed)
            if replayed >= need:
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(REPLAY_POLL_S)

    # --- reads ---------------------------------------------------------------------------------------------

    def _next(self, tried: set[str]) -> Replica | None:
        ready = [r for r in self.watcher.ready() if r.name not in tried]
        if not ready:
            return None
        with self._lock:
            self._turn += 1
            return ready[self._turn % len(ready)]

    def read(self, work: Callable[[Reader], T], schema: str | None) -> T:
        with self._lock:  # with the primary away a replica is all there is: its writes wait for its return
            need = self.written.get(schema, 0) if self.watcher.primary_problem is None else 0
        tried: set[str] = set()
        while (replica := self._next(tried)) is not None:
            tried.add(replica.name)
            pool = self.pools[replica.name]
            try:
                with pool.connection(timeout=REPLICA_POOL_WAIT_S) as conn:
                    if not self._replayed(conn, replica, need):
                        continue  # behind this client's own write: another replica, or the primary
                    if schema is not None:
                        bind(conn, schema)
                    with self._lock:
                        self.reads[replica.name] += 1
                    return work(Reader(conn, lambda p=pool: _spare(p), replica.name))  # type: ignore[misc]
            except PoolTimeout:  # all its connections busy (it stays in), or none can be made: checked now
                self.watcher.check(replica)
            except (DatabaseError, psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self.watcher.failed(replica, problem_of(exc))  # read again elsewhere; its watcher brings it back
        problem = self.watcher.primary_problem
        if problem is not None:
            raise DatabaseError(
                f"no database server can answer: the primary cannot be reached ({problem}) and no replica is ready"
                f" ({'; '.join(f'{r.name}: {r.problem}' for r in self.watcher.replicas)}); check PostgreSQL"
            )
        with self.primary.connection() as conn:
            if schema is not None:
                bind(conn, schema)
            with self._lock:
                self.reads["primary"] += 1
            return work(Reader(conn, self.primary.spare))

    # --- writes while the primary is away ------------------------------------------------------------------

    def write_behind(self, writes: list[Write], schema: str | None) -> None:
        if self.watcher.primary_problem is None:
            try:
                _write(self.primary, writes, schema, self.settings)
                return
            except DatabaseError as exc:
                log.info("keeping %d writes for the primary: %s", len(writes), redact(str(exc)))
        with self._lock:
            self._deferred.extend((schema, w) for w in writes)
            dropped = 0
            while len(self._deferred) > MAX_DEFERRED:
                self._deferred.popleft()
                dropped += 1
            self.deferred_dropped += dropped
        if dropped:
            log.warning(
                "dropped %d answer-memo writes kept for the primary (at most %d are kept): it is away",
                dropped,
                MAX_DEFERRED,
            )

    def _flush(self) -> None:
        """The primary is back: the writes kept for it, in order (those it refuses are dropped, counted)."""
        while True:
            with self._lock:
                if not self._deferred:
                    return
                schema, write = self._deferred.popleft()
            try:
                _write(self.primary, [write], schema, self.settings)
                with self._lock:
                    self.deferred_written += 1
            except DatabaseError as exc:
                with self._lock:
                    self.deferred_dropped += 1
                log.warning("dropped a write kept for the primary: %s", redact(str(exc)))
                if self.watcher.primary_problem is not None:
                    return


def _write(primary: Primary, writes: list[Write], schema: str | None, settings: Settings) -> None:
    with driver_errors(settings), primary.connection() as conn:
        if schema is not None:
            bind(conn, schema)
        for write in writes:
            write(conn)


@contextmanager
def _spare(pool: ConnectionPool) -> Iterator[psycopg.Connection | None]:
    """A replica's second connection for a search's keyword leg, only when one is idle at once."""
    try:
        conn = pool.getconn(timeout=0.002)
    except PoolTimeout:
        yield None
        return
    try:
        yield conn
    finally:
        if not conn.closed:
            conn.rollback()
        pool.putconn(conn)
