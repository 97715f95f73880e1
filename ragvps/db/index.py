"""HNSW index building: created once the table is large enough, rebuilt beside the old one and swapped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from ragvps.config import Settings
from ragvps.db.sql import compose, q, scalar
from ragvps.db.store import EmbeddingSet, bump_generation, chunk_count
from ragvps.errors import ConfigError

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]

_MEMORY_NOTICE = "hnsw graph no longer fits into maintenance_work_mem"


def ensure_index(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    settings: Settings,
    progress: Progress | None = None,
    warn: Warn | None = None,
) -> bool:
    """Build the HNSW index once the table is large enough for it to pay off; True if one exists."""
    if index_exists(conn, eset):
        return True
    if chunk_count(conn) < settings.index.min_rows:
        return False
    conn.commit()
    build_index(conn, eset, eset.index_name, settings, progress, warn)
    bump_generation(conn)  # searches go through the (approximate) index from now on
    return True


def rebuild_index(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    settings: Settings,
    progress: Progress | None = None,
    warn: Warn | None = None,
) -> bool:
    """Build a fresh index beside the old one and swap them, so queries keep answering; False if none is due."""
    new, old = sql.Identifier(eset.index_name + "_new"), sql.Identifier(eset.index_name)
    with _autocommit(conn):
        if not index_exists(conn, eset):
            if _exists(conn, eset.index_name + "_new"):  # killed between the drop and the rename
                conn.execute(compose("rename_index", index=new, new_name=old))
            return ensure_index(conn, eset, settings, progress, warn)
        # A build killed before its swap leaves an invalid or unswapped index behind: start over.
        conn.execute(compose("drop_index_concurrently", index=new))
        build_index(conn, eset, eset.index_name + "_new", settings, progress, warn, concurrently=True)
        conn.execute(compose("drop_index_concurrently", index=old))
        conn.execute(compose("rename_index", index=new, new_name=old))
    bump_generation(conn)  # the new graph may rank a little differently
    return True


def build_index(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    name: str,
    settings: Settings,
    progress: Progress | None = None,
    warn: Warn | None = None,
    *,
    concurrently: bool = False,
) -> None:
    """CREATE INDEX with this session's own build memory and workers, a progress feed and memory advice."""
    create = _create_statement(eset, name, settings, concurrently=concurrently)
    notices: list[str] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and _MEMORY_NOTICE in diag.message_primary:
            notices.append(diag.message_primary)

    workers = settings.index.workers if settings.index.workers == 0 or _parallel_build_safe(conn, warn) else 0
    conn.add_notice_handler(on_notice)
    watcher = _ProgressWatcher(conn, progress) if progress else None
    try:
        with _autocommit(conn):
            _set_build_resources(conn, settings, workers)
            if watcher:
                watcher.start()
            log.info("building index %s", name)
            conn.execute(create)
    finally:
        if watcher:
            watcher.stop()
        conn.remove_notice_handler(on_notice)
        if not conn.closed:
            with _autocommit(conn):
                conn.execute("RESET maintenance_work_mem; RESET max_parallel_maintenance_workers")
    if notices and warn:
        warn(
            f"{notices[0]}: the index build took much longer than it needs to; raise setting index_memory "
            f"(now {settings.index.memory}; e.g. RAGVPS_INDEX_MEMORY=1GB, if the machine has that much free) "
            "and run `ragvps reindex`"
        )


def _create_statement(eset: EmbeddingSet, name: str, settings: Settings, *, concurrently: bool) -> sql.Composed:
    """The CREATE INDEX of the set's HNSW index `name`, with the settings' m and ef_construction."""
    opclass = "halfvec_cosine_ops" if eset.vector_type == "halfvec" else "vector_cosine_ops"
    return compose(
        "create_hnsw_bit_index" if eset.vector_type == "bit" else "create_hnsw_index",
        index=sql.Identifier(name),
        table=eset.table,
        concurrently=sql.SQL("CONCURRENTLY" if concurrently else ""),
        opclass=sql.SQL(opclass),
        dims=sql.Literal(eset.dims),
        m=sql.Literal(settings.index.hnsw_m),
        ef_construction=sql.Literal(settings.index.hnsw_ef_construction),
    )


def _set_build_resources(conn: psycopg.Connection, settings: Settings, workers: int) -> None:
    """This session's build memory (setting index_memory) and parallel workers; a value PostgreSQL refuses is a
    ConfigError that names the setting."""
    for setting, param, value in (
        ("index_memory", "maintenance_work_mem", settings.index.memory),
        ("index_workers", "max_parallel_maintenance_workers", str(workers)),
    ):
        try:
            conn.execute("SELECT set_config(%s, %s, false)", (param, value))
        except (psycopg.errors.InvalidParameterValue, psycopg.errors.InvalidTextRepresentation) as exc:
            detail = "; ".join(m.strip() for m in (exc.diag.message_primary, exc.diag.message_detail) if m)
            raise ConfigError(
                f"setting {setting}={value!r} is refused by PostgreSQL ({detail}); "
                + (
                    "use a size like 256MB or 1GB, below the machine's free memory"
                    if setting == "index_memory"
                    else "use a smaller number"
                ),
                settings=(setting,),
            ) from None


class _ProgressWatcher:
    """Polls pg_stat_progress_create_index for the build's backend on a second connection, in a thread."""

    def __init__(self, conn: psycopg.Connection, progress: Progress, interval: float = 0.5):
        self.conn, self.progress, self.interval = conn, progress, interval
        self.pid = conn.info.backend_pid
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="index-progress", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        if self.thread.is_alive():  # never started when the build failed before it
            self.thread.join()

    def _run(self) -> None:
        try:
            with psycopg.connect(
                self.conn.info.dsn, password=self.conn.info.password or None, autocommit=True
            ) as watch:
                while not self.done.wait(self.interval):
                    row = watch.execute(q("index_progress"), {"pid": self.pid}).fetchone()
                    if row and row[1]:
                        self.progress("index", min(row[0], row[1]), row[1])
        except psycopg.Error as exc:  # the bar is a nicety; the build goes on without it
            log.info("index progress unavailable: %s", exc)


@contextmanager
def _autocommit(conn: psycopg.Connection) -> Iterator[None]:
    previous = conn.autocommit
    if not previous:
        conn.commit()
        conn.autocommit = True
    try:
        yield
    finally:
        if not previous and not conn.closed:
            conn.autocommit = False


def _parallel_build_safe(conn: psycopg.Connection, warn: Warn | None) -> bool:
    """False, with a warning, on a pgvector whose parallel HNSW builds can overrun memory (CVE-2026-3172, fixed in
    0.8.2; Debian trixie ships 0.8.0): the index is then built by one process."""
    version = scalar(conn, q("vector_version"))
    if version is None or tuple(int(p) for p in str(version).split(".")[:3]) >= (0, 8, 2):
        return True
    message = (
        f"pgvector {version} builds HNSW indexes in parallel unsafely (CVE-2026-3172, fixed in 0.8.2), "
        "so this index is built by one process: install pgvector 0.8.2 or later and run "
        "`ALTER EXTENSION vector UPDATE` in the database"
    )
    log.warning(message)
    if warn:
        warn(message)
    return False


def index_exists(conn: psycopg.Connection, eset: EmbeddingSet) -> bool:
    return _exists(conn, eset.index_name)


def _exists(conn: psycopg.Connection, name: str) -> bool:
    return bool(scalar(conn, "SELECT to_regclass(%s) IS NOT NULL", (name,)))
