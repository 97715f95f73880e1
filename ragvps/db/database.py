"""The database: connections, the SQL files, the migrations, and psycopg's errors translated at this boundary.
The embedded server itself is db/embedded.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector

from ragvps.config import Settings
from ragvps.db import catalog
from ragvps.db.embedded import database_url
from ragvps.db.priority import follow_client
from ragvps.errors import ActiveSetChangedError, ConfigError, DatabaseError, redact

log = logging.getLogger(__name__)

_LOST_STATES = ("08", "57P")  # connection exceptions; operator intervention (shutdown, crash)


def server_lost(exc: BaseException, settings: Settings) -> DatabaseError | None:
    """The one-line error for a database connection that died under a command, or None if `exc` is
    another kind of failure."""
    if isinstance(exc, psycopg.InterfaceError):
        if "closed" not in str(exc):
            return None
    elif isinstance(exc, psycopg.OperationalError):
        state = exc.sqlstate
        if state is not None and not state.startswith(_LOST_STATES):
            return None
    else:
        return None
    lines = redact(str(exc)).strip().splitlines()
    detail = lines[0].removeprefix("consuming input failed: ") if lines else type(exc).__name__
    if settings.database.url:
        return DatabaseError(
            f"the connection to PostgreSQL was lost ({detail}); check that the server runs, "
            "then run the same command again to resume"
        )
    return DatabaseError(
        f"the embedded PostgreSQL stopped ({detail}); run the same command again to resume (it starts again by itself)"
    )


@contextmanager
def driver_errors(settings: Settings) -> Iterator[None]:
    """The boundary where psycopg's errors become ragvps's: a connection that dies inside the block is
    `server_lost`'s error, a server that refuses or is too busy a DatabaseError, and a table dropped by a
    model switch under a query an ActiveSetChangedError (the caller reads the active set again)."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise ActiveSetChangedError(
            f"the embedding table changed under the query ({exc.diag.message_primary}); run it again"
        ) from exc
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        lost = server_lost(exc, settings)
        if lost is not None:
            raise lost from exc
        if isinstance(exc, psycopg.InterfaceError):
            raise
        raise DatabaseError(
            f"the database cannot be reached or is too busy ({redact(str(exc)).strip().splitlines()[0]}"
            "): retry, and check PostgreSQL"
        ) from exc


# Every query ragvps sends is short, but the planner's estimates over a young knowledge base's tables (never
# analyzed: 1,540 rows assumed for one) pass jit_above_cost, and a PostgreSQL built with LLVM (the compose
# image, most packaged servers; not the embedded one) then compiles the BM25 query on every search: 30 ms on
# a one-chunk knowledge base, 0.5-1 s on a small one, measured on PostgreSQL 17. deploy/postgres/ragvps.conf
# turns it off for the server; this turns it off for ragvps's sessions on any server a DSN names.
JIT_OFF = "set_config('jit', 'off', false)"


@contextmanager
def autocommit(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """An idle connection in autocommit for the block (read-only work: each statement its own transaction, without
    the BEGIN and COMMIT round trips); one already in autocommit or in a transaction is left as it is."""
    if conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        yield conn
        return
    conn.autocommit = True
    try:
        yield conn
    finally:
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            conn.autocommit = False


def prepare_session(conn: psycopg.Connection, language: str | None) -> None:
    """One round trip for the session's checks: the text search configuration exists, JIT is off (see
    JIT_OFF), and the server ends this session's statement soon after its client is killed (PostgreSQL 14+ on
    Linux), so a killed ingest's index build does not run on, holding the write lock, for minutes."""
    try:
        conn.execute(
            f"SELECT %s::regconfig, set_config('client_connection_check_interval', '1000', false), {JIT_OFF}",
            (language or "simple",),
        )
        conn.commit()
        return
    except psycopg.Error:
        conn.rollback()
    if language is not None:
        check_language(conn, language)
    with conn.transaction():
        conn.execute(f"SELECT {JIT_OFF}")
    try:  # the language is fine: an older server without the setting; the lock is freed when the build ends
        with conn.transaction():
            conn.execute("SELECT set_config('client_connection_check_interval', '1000', false)")
    except psycopg.Error:
        pass


def check_language(conn: psycopg.Connection, language: str) -> None:
    """Refuse a text search configuration PostgreSQL does not have, listing the ones it has."""
    try:
        with conn.transaction():
            conn.execute("SELECT %s::regconfig", (language,))
        return
    except (psycopg.ProgrammingError, psycopg.DataError, psycopg.NotSupportedError):
        pass
    names = [r[0] for r in conn.execute("SELECT cfgname FROM pg_ts_config ORDER BY cfgname")]
    conn.rollback()
    raise ConfigError(
        f"setting language={language!r}: PostgreSQL has no text search configuration of that "
        f"name; choose one of: {', '.join(names)}",
        settings=("language",),
    )


def pooled_session(conn: psycopg.Connection) -> None:
    """A pooled connection as the pool opens it, the primary's or a replica's: the client's priority, pgvector's
    types, JIT off. Never a migration: the primary's pool migrated on its first connection, and a standby is
    read-only."""
    follow_client(conn)
    register_vector(conn)
    conn.execute(f"SELECT {JIT_OFF}")
    conn.commit()


def connect(settings: Settings, *, migrate_schema: bool = True, **kwargs: Any) -> psycopg.Connection:
    """A connection with pgvector's types registered and the schema migrated."""
    url = database_url(settings)
    try:
        conn = psycopg.connect(url, connect_timeout=10, **kwargs)
    except psycopg.OperationalError as exc:
        where = "the embedded PostgreSQL" if not settings.database.url else redact(url)
        raise DatabaseError(
            f"cannot connect to {where}: {redact(str(exc)).strip().splitlines()[0]}; "
            "check RAGVPS_DATABASE_URL (host, port, user, password) and that the server is running"
        ) from exc
    try:
        follow_client(conn)
        if migrate_schema:  # the catalog, then the knowledge base the settings name, bound
            catalog.migrate_catalog(conn)
            catalog.open_kb(conn, settings.database.kb)
        prepare_session(conn, settings.search.language if migrate_schema else None)

        register_vector(conn)
    except psycopg.Error as exc:
        conn.close()
        raise server_lost(exc, settings) or DatabaseError(
            f"preparing the database failed: {redact(str(exc)).strip()}"
        ) from exc
    except ConfigError:
        conn.close()
        raise
    return conn


def migrate(conn: psycopg.Connection) -> list[str]:
    """The catalog (and the upgrade of a database made before knowledge bases), then the knowledge base
    `default`, created when missing; the connection is left bound to it."""
    catalog.migrate_catalog(conn)
    kb = catalog.get(conn, catalog.DEFAULT_KB) or catalog.register(conn, catalog.DEFAULT_KB, {})
    return catalog.migrate_kb(conn, kb)
