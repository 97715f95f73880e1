"""Import: a checked bundle loaded into a scratch schema, indexed, then swapped in as a knowledge base in one
transaction. Nothing is embedded.

The scratch schema is named by the bundle's id (`kb_import_<sha>`). Its data is loaded in one transaction that
ends by marking the schema loaded, so a killed import leaves either nothing of the load or all of it; a rerun
drops an unmarked scratch schema and starts over, or takes a marked one on to the index build and the swap. The
swap (catalog row, schema renamed) is one transaction: the knowledge base is there whole or not at all.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ragvps.config import Settings
from ragvps.db import catalog, index, store
from ragvps.db.bundle_export import CACHE_TABLE, TABLES, bq, bundle_sql
from ragvps.db.bundle_file import Bundle, lines
from ragvps.db.bundle_manifest import VectorSetEntry
from ragvps.db.sql import compose, scalar
from ragvps.errors import BadBundleError, ConflictError, DatabaseError

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
VECTOR_BATCH = 5000
LOCK_WAIT_S = 5.0
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8
_COPY_TRAILER = b"\xff\xff"


@dataclass(frozen=True)
class ImportReport:
    name: str
    documents: int
    chunks: int
    vectors: int
    vector_sets: int
    index_built: bool
    resumed: bool = False  # a killed import's loaded scratch schema was taken on
    already: bool = False  # this bundle had been imported under this name: nothing to do


def checkpoint(point: str) -> None:
    """Where the import tests kill the process (RAGVPS_TEST_KILL_AT names one point): a real SIGKILL."""
    if os.environ.get("RAGVPS_TEST_KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def check_bundle(bundle: Bundle) -> None:
    """What the manifest promises that the checksums cannot show: known tables, sane vector sets whose members
    hold exactly `count` ids and vectors. Before anything is written."""
    manifest, where = bundle.manifest, bundle.path
    tables = manifest.tables
    known = set(TABLES) | {CACHE_TABLE}
    if not set(tables) <= known or not all(bundle.has(m) for m in tables.values()):
        raise BadBundleError(
            f"{where}: the manifest names tables this ragvps does not load ({sorted(tables)}); nothing was written"
        )
    _check_counts(bundle, tables)
    for s in manifest.vector_sets:  # their shape was checked as the manifest was read
        if not (bundle.has(s.ids) and bundle.has(s.vectors)):
            raise BadBundleError(
                f"{where}: a vector set in the manifest is incomplete ({s!r:.200}); nothing was written"
            )
        sizes = (bundle.size(s.ids), bundle.size(s.vectors))
        if sizes != (8 * s.count, 4 * s.dims * s.count):
            raise BadBundleError(
                f"{where}: vector set {s.id} should hold {s.count} vectors of {s.dims} "
                f"dimensions, its members hold {sizes[0]} and {sizes[1]} bytes; nothing was written"
            )


def _check_counts(bundle: Bundle, tables: dict[str, str]) -> None:
    """The manifest's counts are the rows its members hold (a forger who re-checksums the members cannot make
    a bundle import more than it says)."""
    for table, want in (("documents", bundle.manifest.documents), ("chunks", bundle.manifest.chunks)):
        have = bundle.rows.get(tables[table], 0) if table in tables else 0
        if want != have:
            raise BadBundleError(
                f"{bundle.path}: the manifest counts {want} {table}, but the bundle holds {have}: "
                "its manifest disagrees with its content (altered?); nothing was written"
            )


def scratch_schema(bundle: Bundle) -> str:
    return f"kb_import_{bundle.id[:16]}"


def _done_marker(bundle: Bundle) -> str:
    return f"ragvps import {bundle.id}"


def _loaded_marker(bundle: Bundle) -> str:
    return f"ragvps import {bundle.id}: loaded"


def _comment(conn: psycopg.Connection, schema: str) -> str | None:
    value = scalar(conn, bundle_sql("schema_comment"), {"schema": schema})
    return None if value is None else str(value)


def check_target(conn: psycopg.Connection, bundle: Bundle, name: str, replace: bool) -> bool:
    """Refuse a name that holds documents without `replace` (an empty knowledge base, such as a fresh `default`,
    is no conflict: the import takes its place); True when this bundle was imported under it already."""
    catalog.check_name(name)
    existing = catalog.get(conn, name)
    conn.commit()
    if existing is None:
        return False
    if not replace and _comment(conn, existing.schema) == _done_marker(bundle):
        return True
    if not replace and _has_documents(conn, existing.schema):
        raise ConflictError(
            f"a knowledge base named {name!r} exists already: import under another name with "
            f"--kb NEW, or replace it with --replace; nothing was written",
            settings=("kb",),
        )
    return False


def _has_documents(conn: psycopg.Connection, schema: str) -> bool:
    found = bool(scalar(conn, bundle_sql("kb_has_documents"), {"table": f'"{schema}".documents'})) and bool(
        scalar(conn, bq("any_document", documents=sql.Identifier(schema, "documents")))
    )
    conn.commit()
    return found


def import_bundle(
    conn: psycopg.Connection,
    bundle: Bundle,
    name: str,
    settings: Settings,
    kb_settings: dict[str, object],
    *,
    replace: bool,
    progress: Progress,
    warn: Warn,
) -> ImportReport:
    """Load a checked bundle as knowledge base `name`, which keeps `kb_settings` (`settings`: the target's with
    them over, for the index build)."""
    lock = {"key": f"ragvps:import:{bundle.id}"}
    deadline = time.monotonic() + LOCK_WAIT_S  # a killed import's session lets go once its server notices
    while not scalar(conn, bundle_sql("import_lock"), lock):
        conn.commit()
        if time.monotonic() > deadline:
            raise DatabaseError(
                f"another import of {bundle.path} into this database is running: wait for it to "
                "end, then run this again"
            )
        time.sleep(0.2)
    conn.commit()
    try:
        return _import(conn, bundle, name, settings, kb_settings, replace, progress, warn)
    finally:
        if not conn.closed:
            conn.rollback()
            catalog.unbind(conn)
            conn.execute(bundle_sql("import_unlock"), lock)
            conn.commit()


def _import(
    conn: psycopg.Connection,
    bundle: Bundle,
    name: str,
    settings: Settings,
    kb_settings: dict[str, object],
    replace: bool,
    progress: Progress,
    warn: Warn,
) -> ImportReport:
    manifest = bundle.manifest
    sets = manifest.vector_sets
    if check_target(conn, bundle, name, replace):
        return ImportReport(
            name, manifest.documents, manifest.chunks, sum(s.count for s in sets), len(sets), False, already=True
        )
    scratch = scratch_schema(bundle)
    resumed = _comment(conn, scratch) == _loaded_marker(bundle)
    conn.commit()
    if not resumed:
        store.end_implicit_transaction(conn)
        with conn.transaction():
            conn.execute(bq("drop_schema", schema=sql.Identifier(scratch)))
        checkpoint("dropped")
        catalog.migrate_kb(conn, catalog.KnowledgeBase(0, name, scratch))
        checkpoint("migrated")
        try:
            _load(conn, bundle, scratch, progress)
        except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError, UnicodeDecodeError) as exc:
            conn.rollback()
            with conn.transaction():
                conn.execute(bq("drop_schema", schema=sql.Identifier(scratch)))
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BadBundleError(
                f"{bundle.path}: its rows are refused by PostgreSQL ({detail}); nothing was imported"
            ) from None
    catalog.bind(conn, scratch)
    eset = store.active_set(conn)
    conn.commit()
    built = index.ensure_index(conn, eset, settings, progress, warn) if eset is not None else False
    checkpoint("indexed")
    _swap(conn, bundle, scratch, name, kb_settings)
    checkpoint("swapped")
    return ImportReport(
        name, manifest.documents, manifest.chunks, sum(s.count for s in sets), len(sets), built, resumed=resumed
    )


def _load(conn: psycopg.Connection, bundle: Bundle, scratch: str, progress: Progress) -> None:
    """Every row and vector of the bundle into the scratch schema, in one transaction that marks it loaded."""
    manifest = bundle.manifest
    totals = {"documents": manifest.documents, "chunks": manifest.chunks}
    store.end_implicit_transaction(conn)
    with conn.transaction():
        indexes = conn.execute(bundle_sql("chunk_secondary_indexes")).fetchall()
        for schema, name, _ in indexes:
            conn.execute(bq("drop_index", index=sql.Identifier(schema, name)))
        conn.execute(bundle_sql("pause_chunk_triggers"))
        for table in (*TABLES, CACHE_TABLE):
            member = manifest.tables.get(table)
            if member is None:
                continue
            done = 0
            for batch in lines(bundle.open(member)):
                rows = "[" + ",".join(line.decode() for line in batch) + "]"
                conn.execute(bundle_sql(f"import_{table}"), {"rows": rows}, prepare=False)
                done += len(batch)
                if table in totals:
                    progress(table, done, totals[table])
                checkpoint(f"{table}:{done}")
            checkpoint(table)
        conn.execute(bundle_sql("mark_foreign_roots"), {"foreign": store.FOREIGN_ROOT})
        conn.execute(bundle_sql("resume_chunk_triggers"))
        conn.execute(bundle_sql("rebuild_stats"))
        for *_, definition in indexes:
            conn.execute(definition)  # pg_get_indexdef's own statement, schema-qualified
        for s in manifest.vector_sets:
            _load_set(conn, bundle, s, progress)
            checkpoint(f"vectors:{s.id}")
            if s.active:
                conn.execute(bq("queue_missing", table=sql.Identifier(f"embeddings_{s.id}")), {"set_id": s.id})
        conn.execute(bundle_sql("restart_sequences"))
        conn.execute(bq("comment_schema", schema=sql.Identifier(scratch), comment=sql.Literal(_loaded_marker(bundle))))
    checkpoint("loaded")


def _load_set(conn: psycopg.Connection, bundle: Bundle, s: VectorSetEntry, progress: Progress) -> None:
    table_name = f"embeddings_{s.id}"
    conn.execute(
        bundle_sql("import_set"),
        {
            "id": s.id,
            "model": s.model,
            "identity": s.identity,
            "dims": s.dims,
            "vector_type": s.vector_type,
            "table_name": table_name,
            "active": s.active,
            "chunker": s.chunker,
        },
    )
    column = store.column_type(s.vector_type)
    table = sql.Identifier(table_name)
    conn.execute(compose("create_vector_table", table=table, vector_type=sql.SQL(column), dims=sql.Literal(s.dims)))
    dims, count = s.dims, s.count
    element = ">f2" if column == "halfvec" else ">f4"
    row = np.dtype(
        [
            ("fields", ">i2"),
            ("id_len", ">i4"),
            ("id", ">i8"),
            ("vec_len", ">i4"),
            ("dim", ">i2"),
            ("unused", ">i2"),
            ("v", element, (dims,)),
        ]
    )
    ids, vectors = bundle.open(s.ids), bundle.open(s.vectors)
    with conn.cursor().copy(bq("copy_vectors_binary", table=table)) as copy:
        copy.write(_COPY_HEADER)
        for lo in range(0, count, VECTOR_BATCH):
            n = min(VECTOR_BATCH, count - lo)
            out = np.empty(n, dtype=row)
            out["fields"], out["id_len"], out["dim"], out["unused"] = 2, 8, dims, 0
            out["vec_len"] = 4 + np.dtype(element).itemsize * dims
            out["id"] = np.frombuffer(_exactly(ids, 8 * n), dtype="<i8")
            out["v"] = np.frombuffer(_exactly(vectors, 4 * dims * n), dtype="<f4").reshape(n, dims)
            copy.write(out.tobytes())
            progress("vectors", lo + n, count)
        copy.write(_COPY_TRAILER)


def _exactly(handle: IO[bytes], n: int) -> bytes:
    data = handle.read(n)
    if len(data) != n:  # the sizes were checked against the manifest: only a file changed since then
        raise BadBundleError("a vector member ended early: the bundle changed while it was imported")
    return data


def _swap(conn: psycopg.Connection, bundle: Bundle, scratch: str, name: str, kb_settings: dict[str, object]) -> None:
    """The scratch schema becomes the knowledge base `name` (replacing one of that name), in one transaction."""
    catalog.unbind(conn)
    store.end_implicit_transaction(conn)
    settings = Jsonb(kb_settings)
    with conn.transaction():
        conn.execute(bundle_sql("catalog_lock"))
        existing = catalog.get(conn, name)
        if existing is not None:
            conn.execute(bq("drop_schema", schema=sql.Identifier(existing.schema)))
            conn.execute(bundle_sql("kb_set_settings"), {"id": existing.id, "settings": settings})
            target = existing.schema
        else:
            row = conn.execute(catalog.q_("kb_insert"), {"name": name, "settings": settings}).fetchone()
            assert row is not None
            target = str(row[2])
        checkpoint("swapping")
        conn.execute(bq("rename_schema", schema=sql.Identifier(scratch), new_name=sql.Identifier(target)))
        conn.execute(bq("comment_schema", schema=sql.Identifier(target), comment=sql.Literal(_done_marker(bundle))))
