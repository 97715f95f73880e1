"""The catalog of knowledge bases (schema `ragvps`), and the binding of a connection to one of them.

Isolation: each knowledge base is a PostgreSQL schema of its own (`kb_<id>`) holding every table the stages
use (documents, chunks, vectors, BM25 statistics, the answer cache and memo, the queue), created by the same
numbered migrations. A connection is bound to one schema by its search_path (`kb_<id>, public`; public holds
only the pgvector extension), so no query names a knowledge base and none can reach another's rows. Dropping
one is `DROP SCHEMA ... CASCADE`. The schema is named by the id, so a rename touches the catalog only.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ragvps.config import ALIASES
from ragvps.db.sql import migrations, q, queries, scalar
from ragvps.errors import ConflictError, NotFoundError, UsageError
from ragvps.records import KB_NAME, kb_name_problem

log = logging.getLogger(__name__)
DEFAULT_KB = "default"
_bound: weakref.WeakKeyDictionary[psycopg.Connection, str] = weakref.WeakKeyDictionary()


def _q(name: str) -> str:
    return queries("catalog.sql")[name]


q_ = _q  # the catalog's named queries, for db/keys.py


@dataclass(frozen=True)
class KnowledgeBase:
    id: int
    name: str
    schema: str
    settings: dict[str, object] = field(default_factory=dict)  # flat setting name -> value, over the globals
    created_at: datetime | None = None


def _kb(row: tuple[object, ...]) -> KnowledgeBase:
    kb_id, name, schema, settings, created = row
    assert isinstance(kb_id, int) and isinstance(settings, dict) and isinstance(created, datetime)
    current = {ALIASES.get(str(k), str(k)): v for k, v in settings.items()}  # kept under an old name: today's
    return KnowledgeBase(kb_id, str(name), str(schema), current, created)


def check_name(name: str) -> str:
    if not KB_NAME.fullmatch(name):
        raise UsageError(kb_name_problem(name), settings=("kb",))
    return name


# --- migrations ---------------------------------------------------------------------------------------


def migrate_catalog(conn: psycopg.Connection) -> None:
    """The catalog's own migrations, then the upgrade of a database made before knowledge bases (its tables in
    public) into the knowledge base `default`, in place: nothing is copied, nothing re-embedded."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('ragvps:catalog'))")
        conn.execute(_q("create_catalog"))
        done = {row[0] for row in conn.execute(_q("catalog_migrations"))}
        for version, name, body in migrations("ragvps.sql.catalog"):
            if version not in done:
                log.info("applying catalog migration %s", name)
                conn.execute(body)
                conn.execute(_q("record_catalog_migration"), {"version": version, "name": name})
        if scalar(conn, "SELECT to_regclass('public.ragvps_migrations') IS NOT NULL"):
            _upgrade_public(conn)


def _upgrade_public(conn: psycopg.Connection) -> None:
    if scalar(conn, _q("kb_get"), {"name": DEFAULT_KB}) is not None:
        raise ConflictError(
            "this database has ragvps tables in schema public and a knowledge base 'default' "
            "already: move or drop the tables in public by hand"
        )
    kb = _kb(conn.execute(_q("kb_insert"), {"name": DEFAULT_KB, "settings": Jsonb({})}).fetchone() or ())
    schema = psycopg.sql.Identifier(kb.schema)
    conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(schema))
    tables = [row[0] for row in conn.execute(_q("legacy_tables"))]
    for table in tables:
        conn.execute(
            psycopg.sql.SQL("ALTER TABLE public.{} SET SCHEMA {}").format(psycopg.sql.Identifier(table), schema)
        )
    for function in [row[0] for row in conn.execute(_q("legacy_functions"))]:
        conn.execute(
            psycopg.sql.SQL("ALTER FUNCTION public.{} SET SCHEMA {}").format(psycopg.sql.SQL(function), schema)
        )
    log.warning(
        "upgraded: the knowledge base in schema public is now 'default' (%d tables moved, nothing re-embedded)",
        len(tables),
    )


def migrate_kb(conn: psycopg.Connection, kb: KnowledgeBase) -> list[str]:
    """The stages' numbered migrations in the knowledge base's schema (created when missing)."""
    with conn.transaction():
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psycopg.sql.Identifier(kb.schema)))
    bind(conn, kb.schema)
    return migrate_stages(conn, lock=f"ragvps:migrate:{kb.schema}")


def open_kb(conn: psycopg.Connection, name: str, migrated: set[str] | None = None) -> KnowledgeBase:
    """The knowledge base `name`, its schema migrated and the connection bound to it; `default` is made
    when missing, any other name must exist. A schema in `migrated` is not migrated again (and is added)."""
    kb = get(conn, check_name(name))
    if kb is None and name == DEFAULT_KB:
        kb = create(conn, name, {})
    elif kb is None:
        raise not_found(name, names(conn))
    elif migrated is None or kb.schema not in migrated:
        migrate_kb(conn, kb)
    if migrated is not None:
        migrated.add(kb.schema)
    return kb


def bind(conn: psycopg.Connection, schema: str) -> None:
    """Point the connection at one knowledge base's schema (public only for pgvector's types)."""
    if _bound.get(conn) == schema:
        return
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    conn.execute("SELECT set_config('search_path', %s, false)", (f'"{schema}", public',))
    if idle:
        conn.commit()  # a session setting made inside a transaction is undone by its rollback
    _bound[conn] = schema


def bound(conn: psycopg.Connection) -> str | None:
    """The schema the connection is bound to, or None."""
    return _bound.get(conn)


def unbind(conn: psycopg.Connection) -> None:
    """Point the connection at no knowledge base: a query of the stages' tables then fails, never guesses."""
    conn.execute("SELECT set_config('search_path', 'ragvps_unbound, public', false)")
    _bound.pop(conn, None)


# --- knowledge bases ----------------------------------------------------------------------------------


def get(conn: psycopg.Connection, name: str) -> KnowledgeBase | None:
    row = conn.execute(_q("kb_get"), {"name": name}).fetchone()
    return None if row is None else _kb(row)


def all_kbs(conn: psycopg.Connection) -> list[KnowledgeBase]:
    return [_kb(row) for row in conn.execute(_q("kb_list"))]


def names(conn: psycopg.Connection) -> list[str]:
    return [kb.name for kb in all_kbs(conn)]


def create(conn: psycopg.Connection, name: str, settings: dict[str, object]) -> KnowledgeBase:
    kb = register(conn, name, settings)
    migrate_kb(conn, kb)
    return kb


def register(conn: psycopg.Connection, name: str, settings: dict[str, object]) -> KnowledgeBase:
    """The catalog's row for a new knowledge base (its schema is made by migrate_kb)."""
    check_name(name)
    with conn.transaction():
        if get(conn, name) is not None:
            raise ConflictError(
                f"a knowledge base named {name!r} exists already: choose another name, or `ragvps kb drop {name}` first"
            )
        row = conn.execute(_q("kb_insert"), {"name": name, "settings": Jsonb(settings)}).fetchone()
    return _kb(row or ())


def require(conn: psycopg.Connection, name: str) -> KnowledgeBase:
    kb = get(conn, name)
    if kb is None:
        raise not_found(name, names(conn))
    return kb


def not_found(name: str, allowed: list[str]) -> NotFoundError:
    """The error for a knowledge base that does not exist, or that the caller may not use (the same words)."""
    listed = ", ".join(allowed) if allowed else "none"
    return NotFoundError(f"no knowledge base named {name!r}; the ones you may use: {listed}", settings=("kb",))


def drop(conn: psycopg.Connection, name: str) -> KnowledgeBase:
    with conn.transaction():
        kb = require(conn, name)
        conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(kb.schema)))
        conn.execute(_q("kb_delete"), {"name": name})
    for c in [c for c, schema in _bound.items() if schema == kb.schema]:
        _bound.pop(c, None)
    return kb


def rename(conn: psycopg.Connection, old: str, new: str) -> None:
    check_name(new)
    with conn.transaction():
        require(conn, old)
        if get(conn, new) is not None:
            raise ConflictError(f"a knowledge base named {new!r} exists already: choose another name")
        conn.execute(_q("kb_rename"), {"old": old, "new": new})


def update_settings(conn: psycopg.Connection, name: str, settings: dict[str, object]) -> None:
    with conn.transaction():
        if conn.execute(_q("kb_settings"), {"name": name, "settings": Jsonb(settings)}).fetchone() is None:
            raise not_found(name, names(conn))


def migrate_stages(conn: psycopg.Connection, lock: str) -> list[str]:
    """Apply the numbered migrations not yet recorded in the bound schema, in one transaction, under a lock."""
    applied_now = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
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


@dataclass(frozen=True)
class KbGauges:
    """One knowledge base's size and work in a scrape: its vector indexes' bytes, the chunks its embedding queue
    holds, its upload jobs open, the chunks they embedded, the files they failed."""

    name: str
    index_bytes: int
    queued: int = 0
    open_jobs: int = 0
    job_chunks: int = 0
    failed_files: int = 0


def gauges(conn: psycopg.Connection) -> tuple[list[KbGauges], int]:
    """Every knowledge base's KbGauges, and the server's shared_buffers in bytes (0 with no knowledge base):
    two round trips whatever their number."""
    rows = conn.execute(_q("kb_gauges")).fetchall()
    branches = [
        sql.SQL(_q("queue_depth")).format(
            name=sql.Literal(r[0]),
            queue=sql.Identifier(r[1], "embed_queue"),
            jobs=sql.Identifier(r[1], "ingest_jobs"),
            files=sql.Identifier(r[1], "ingest_job_files"),
        )
        for r in rows
        if r[3]
    ]
    work = {
        str(w[0]): [int(x) for x in w[1:]]
        for w in (conn.execute(sql.SQL(" UNION ALL ").join(branches)).fetchall() if branches else [])
    }
    return (
        [KbGauges(str(r[0]), int(r[2]), *work.get(str(r[0]), [0, 0, 0, 0])) for r in rows],
        int(rows[0][4]) if rows else 0,
    )
