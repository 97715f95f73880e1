"""Where the app's connections come from: one connection for a CLI command, a pool for a server.

Both register pgvector's types on each connection and run the migrations once per process, on the first
connection, not on every one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from ragvps.config import Settings
from ragvps.errors import DatabaseError, redact

if TYPE_CHECKING:
    import psycopg


class Connections(Protocol):
    def connection(self) -> Any:
        """A context manager giving a connection; a clean exit commits what is left open."""
        ...

    def close(self) -> None: ...


class SingleConnection:
    """One connection, opened when first asked for, reused by every use case of the process."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        import psycopg

        from ragvps.db.database import connect

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

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PooledConnections:
    """A psycopg_pool pool for a long-running server: `pool_size` connections, checked on checkout."""

    def __init__(self, settings: Settings):
        from psycopg_pool import ConnectionPool

        from ragvps.db.database import connect, database_url

        self.settings = settings
        url = database_url(settings)
        with connect(settings) as first:  # the migrations, once
            first.commit()
        self.pool = ConnectionPool(url, min_size=1, max_size=settings.database.pool_size, open=False,
                                   configure=_configure, check=ConnectionPool.check_connection,
                                   kwargs={"connect_timeout": 10}, name="ragvps")
        try:
            self.pool.open(wait=True, timeout=30)
        except Exception as exc:  # psycopg_pool.PoolTimeout: the server went away after the first connect
            self.pool.close()
            raise DatabaseError(f"cannot open a pool of connections to the database: {redact(str(exc))}; "
                                "check that PostgreSQL is running and accepts connections") from exc

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        from psycopg_pool import PoolTimeout

        try:
            with self.pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseError(f"all {self.settings.database.pool_size} database connections are busy (setting "
                                "pool_size): retry, or raise pool_size") from exc

    def close(self) -> None:
        self.pool.close()


def _configure(conn: psycopg.Connection) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)
    conn.commit()

