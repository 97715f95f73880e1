"""Export: one knowledge base, read in one REPEATABLE READ snapshot, streamed into a bundle (db/bundle_file.py).

Rows leave PostgreSQL as JSON text through server-side cursors (a few thousand at a time), vectors as float32
through a binary one: memory stays bounded whatever the size, and ingests and searches go on meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

from ragvps.db.bundle_file import FORMAT, VERSION, BundleWriter
from ragvps.db.catalog import KnowledgeBase
from ragvps.db.sql import queries, scalar
from ragvps.db.store import EmbeddingSet, as_param, end_implicit_transaction
from ragvps.version import package_version

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
ITERSIZE = 2000
# The tables a bundle holds as JSON Lines, in the order an import loads them; the cache only with_cache.
TABLES = ("chunker_settings", "documents", "chunks", "gold_questions", "eval_scores")
CACHE_TABLE = "answer_cache"


def bundle_sql(name: str) -> str:
    return queries("bundle.sql")[name]


def bq(name: str, **parts: sql.Composable) -> sql.Composed:
    return sql.SQL(bundle_sql(name)).format(**parts)


@dataclass(frozen=True)
class ExportReport:
    path: Path
    bytes: int
    documents: int
    chunks: int
    vector_sets: int
    vectors: int
    manifest: dict[str, object]


def export_kb(
    conn: psycopg.Connection,
    kb: KnowledgeBase,
    path: Path,
    *,
    with_cache: bool = False,
    extra: dict[str, object] | None = None,
    progress: Progress | None = None,
) -> ExportReport:
    """Write the knowledge base the connection is bound to into `path` (a tar: docs/bundle.md), from one snapshot.
    `extra` goes into the manifest as it is (a backup's probe)."""
    say = progress or (lambda *_: None)
    writer = BundleWriter(path)
    end_implicit_transaction(conn)
    try:
        with conn.transaction():
            conn.execute(bundle_sql("snapshot"))
            documents, chunks = conn.execute(bundle_sql("counts")).fetchone() or (0, 0)
            tables: dict[str, str] = {}
            for table in TABLES + ((CACHE_TABLE,) if with_cache else ()):
                total = {"documents": documents, "chunks": chunks}.get(table, 0)
                if _write_rows(conn, writer, table, total, say):
                    tables[table] = f"{table}.jsonl"
            sets = [_write_set(conn, writer, row, say) for row in conn.execute(bundle_sql("vector_sets")).fetchall()]
            postgres = scalar(conn, bundle_sql("server_version"))
        manifest: dict[str, object] = {
            "format": FORMAT,
            "version": VERSION,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ragvps": package_version(),
            "postgres": postgres,
            "kb": {"name": kb.name, "settings": kb.settings},
            "counts": {"documents": documents, "chunks": chunks},
            "tables": tables,
            "vector_sets": sets,
            **(extra or {}),
        }
        size = writer.finish(manifest)
    except BaseException:
        writer.abort()
        raise
    vectors = sum(int(str(s["count"])) for s in sets)
    return ExportReport(path, size, documents, chunks, len(sets), vectors, manifest)


def _write_rows(conn: psycopg.Connection, writer: BundleWriter, table: str, total: int, say: Progress) -> int:
    """One table as JSON Lines (left out when empty); the rows written."""
    n = 0
    with conn.cursor(name=f"bundle_{table}") as cur:
        cur.itersize = ITERSIZE
        cur.execute(bundle_sql(f"export_{table}"))
        first = cur.fetchmany(ITERSIZE)
        if not first:
            return 0
        with writer.member(f"{table}.jsonl") as sink:
            rows = first
            while rows:
                sink.write("".join(row[0] + "\n" for row in rows).encode())
                n += len(rows)
                if total:
                    say(table, n, total)
                rows = cur.fetchmany(ITERSIZE)
    return n


def _write_set(
    conn: psycopg.Connection, writer: BundleWriter, row: tuple[object, ...], say: Progress
) -> dict[str, object]:
    """One embedding set: its chunk ids (int64) and its vectors (float32, little-endian), both in chunk id order."""
    set_id, model, identity, dims, vector_type, table_name, active, chunker = row
    table = sql.Identifier(str(table_name))
    count, size = int(scalar(conn, bq("count_vectors", table=table))), int(str(dims))
    name = f"vectors/{set_id}"
    with writer.member(f"{name}.ids") as sink, conn.cursor(name=f"bundle_ids_{set_id}") as cur:
        cur.itersize = ITERSIZE * 10
        cur.execute(bq("export_vector_ids", table=table))
        while rows := cur.fetchmany(ITERSIZE * 10):
            sink.write(np.fromiter((r[0] for r in rows), dtype="<i8", count=len(rows)).tobytes())
    done = 0
    binary = np.dtype([("head", ">i4"), ("v", ">f4", (size,))])
    with writer.member(f"{name}.f32") as sink, conn.cursor(name=f"bundle_vectors_{set_id}", binary=True) as cur:
        cur.itersize = ITERSIZE
        cur.execute(bq("export_vectors", table=table))
        while rows := cur.fetchmany(ITERSIZE):
            raw = np.frombuffer(b"".join(r[0] for r in rows), dtype=binary)
            sink.write(raw["v"].astype("<f4").tobytes())
            done += len(rows)
            say("vectors", done, count)
    parts = str(identity).rsplit("|", 3)
    return {
        "id": set_id,
        "model": model,
        "identity": identity,
        "dims": dims,
        "vector_type": vector_type,
        "active": active,
        "chunker": chunker,
        "count": count,
        "document_prefix": parts[1] if len(parts) == 4 else "",
        "query_prefix": parts[2] if len(parts) == 4 else "",
        "ids": f"{name}.ids",
        "vectors": f"{name}.f32",
    }


def probe_chunks(conn: psycopg.Connection, sample: int) -> list[tuple[int, str]]:
    """About `sample` chunks spread evenly over the knowledge base, with their text."""
    return [(int(r[0]), str(r[1])) for r in conn.execute(bundle_sql("probe_chunks"), {"sample": sample})]


def exact_top(conn: psycopg.Connection, eset: EmbeddingSet, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The exact top-k chunks by cosine distance (no index: the answer depends on the stored vectors alone)."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off", prepare=False)
        rows = conn.execute(
            bq("probe_search", table=eset.table), {"embedding": as_param(eset, vector), "k": k}, prepare=False
        ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]
