"""The database: connections, the SQL files, the migrations, and psycopg's errors translated at this boundary.
The embedded server itself is db/embedded.py."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from ragvps.config import Settings
from ragvps.errors import ActiveSetChangedError, ConfigError, DatabaseError, redact

log = logging.getLogger(__name__)

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def queries(file: str = "queries.sql") -> dict[str, str]:
    """The named blocks of one SQL file in sql/ (queries.sql unless named)."""
    text = resources.files("ragvps.sql").joinpath(file).read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def q(name: str) -> str:
    return queries()[name]


def compose(name: str, **parts: sql.Composable) -> sql.Composed:
    """A named query whose {placeholders} are identifiers or literals, never values."""
    return sql.SQL(q(name)).format(**parts)


def migrations() -> list[tuple[int, str, str]]:
    folder = resources.files("ragvps.sql.migrations")
    found = []
    for entry in folder.iterdir():
        match = re.match(r"(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


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
        return DatabaseError(f"the connection to PostgreSQL was lost ({detail}); check that the server runs, "
                             "then run the same command again to resume")
    return DatabaseError(f"the embedded PostgreSQL stopped ({detail}); run the same command again to resume "
                         "(it starts again by itself)")


@contextmanager
def driver_errors(settings: Settings) -> Iterator[None]:
    """The boundary where psycopg's errors become ragvps's: a connection that dies inside the block is
    `server_lost`'s error, a server that refuses or is too busy a DatabaseError, and a table dropped by a
    model switch under a query an ActiveSetChangedError (the caller reads the active set again)."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise ActiveSetChangedError(f"the embedding table changed under the query ({exc.diag.message_primary}); "
                                    "run it again") from exc
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        lost = server_lost(exc, settings)
        if lost is not None:
            raise lost from exc
        if isinstance(exc, psycopg.InterfaceError):
            raise
        raise DatabaseError(f"the database cannot be reached or is too busy ({redact(str(exc)).strip().splitlines()[0]}"
                            "): retry, and check PostgreSQL") from exc


def scalar(conn: psycopg.Connection, query: str | sql.Composed | sql.SQL,
           params: Sequence[object] | Mapping[str, object] | None = None) -> Any:
    """The first column of the first row a query returns (None when it returns no row)."""
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def prepare_session(conn: psycopg.Connection, language: str | None) -> None:
    """One round trip for the session's checks: the text search configuration exists, and the server ends
    this session's statement soon after its client is killed (PostgreSQL 14+ on Linux), so a killed ingest's
    index build does not run on, holding the write lock, for minutes."""
    try:
        conn.execute("SELECT %s::regconfig, set_config('client_connection_check_interval', '1000', false)",
                     (language or "simple",))
        conn.commit()
        return
    except psycopg.Error:
        conn.rollback()
    if language is not None:
        check_language(conn, language)
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
    raise ConfigError(f"setting language={language!r}: PostgreSQL has no text search configuration of that "
                      f"name; choose one of: {', '.join(names)}", settings=("language",))


def connect(settings: Settings, *, migrate_schema: bool = True, **kwargs: Any) -> psycopg.Connection:
    """A connection with pgvector's types registered and the schema migrated."""
    from ragvps.db.embedded import database_url

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
        if migrate_schema:
            migrate(conn)
        prepare_session(conn, settings.search.language if migrate_schema else None)
        from pgvector.psycopg import register_vector

        register_vector(conn)
    except psycopg.Error as exc:
        conn.close()
        raise server_lost(exc, settings) or DatabaseError(
            f"preparing the database failed: {redact(str(exc)).strip()}") from exc
    except ConfigError:
        conn.close()
        raise
    return conn


def migrate(conn: psycopg.Connection) -> list[str]:
    """Apply the numbered migrations not yet recorded, in one transaction, under a lock."""
    applied_now = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('ragvps:migrate'))")
        conn.execute(q("create_migrations_table"))
        done = {row[0] for row in conn.execute(q("applied_migrations"))}
        for version, name, body in migrations():
            if version in done:
                continue
            log.info("applying migration %s", name)
            conn.execute(body)
            conn.execute(q("record_migration"), {"version": version, "name": name})
            applied_now.append(name)
    return applied_now
