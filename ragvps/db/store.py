"""Store stage: documents, chunks and vectors in PostgreSQL with pgvector; incremental sync; indexes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from pgvector import HalfVector
from psycopg import sql
from psycopg.types.json import Jsonb

from ragvps import langs
from ragvps.db.sql import compose, q, scalar
from ragvps.errors import DatabaseError, ModelMismatchError
from ragvps.records import Chunk, ModelSpec

if TYPE_CHECKING:  # the chunker and the readers load only when something is ingested
    from ragvps.records import Document

log = logging.getLogger(__name__)

WRITE_LOCK = "ragvps:write"
WRITE_LOCK_WAIT = 3.0  # seconds


@dataclass(frozen=True)
class EmbeddingSet:
    id: int
    model: str
    identity: str
    dims: int
    vector_type: str
    table_name: str
    active: bool
    indexed: bool = False  # read with the active set only: does its HNSW index exist

    @property
    def column_type(self) -> str:
        return column_type(self.vector_type)

    @property
    def table(self) -> sql.Identifier:
        return sql.Identifier(self.table_name)

    @property
    def index_name(self) -> str:
        return f"{self.table_name}_hnsw"


def column_type(vector_type: str) -> str:
    """The stored column of a vector type: a bit set keeps halfvec vectors for the exact re-rank."""
    return "halfvec" if vector_type == "bit" else vector_type


Vectors = np.ndarray | Sequence[np.ndarray | None]  # one row per chunk; None: no vector yet


@dataclass(frozen=True)
class StoredDocument:
    id: int
    source: str
    content_hash: str
    chunker: str


WRITE_LOCK_BUSY = "is writing to this knowledge base"  # in the error when another holds the lock


@contextmanager
def write_lock(conn: psycopg.Connection, wait: float | None = None) -> Iterator[None]:
    """Only one ingest, reindex, upload or sync writes to a knowledge base at a time (its schema's lock: other
    knowledge bases write beside it); a second one stops with a clear message.

    It waits a few seconds first: the session of a writer killed a moment ago holds the lock until its
    server process notices the client is gone (within client_connection_check_interval, see connect).
    """
    deadline = time.monotonic() + (WRITE_LOCK_WAIT if wait is None else wait)
    found = conn.execute("SELECT current_schema()").fetchone()
    key = f"{WRITE_LOCK}:{found[0] if found else ''}"  # one knowledge base's: others write beside it
    while True:
        got = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()
        conn.commit()
        if (got and got[0]) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if not got or not got[0]:
        raise DatabaseError(
            f"another `ragvps ingest`, `ragvps reindex`, upload or sync {WRITE_LOCK_BUSY}; "
            "wait for it to finish, then run this again"
        )
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
        conn.commit()


def active_set(conn: psycopg.Connection) -> EmbeddingSet | None:
    row = conn.execute(q("active_set")).fetchone()
    return EmbeddingSet(*row) if row else None


def check_model(active: EmbeddingSet | None, spec: ModelSpec, vector_type: str, action: str) -> None:
    """Refuse to mix vectors of two models in one index."""
    if active is not None and (active.identity != spec.identity or active.vector_type != vector_type):
        raise ModelMismatchError(
            f"the index holds {active.vector_type}({active.dims}) vectors from model {active.model}, "
            f"but the configured embedder is {spec.name} ({vector_type}({spec.dims})); "
            + (
                "run `ragvps reindex` to switch models"
                if action == "ingest"
                else f"configure model {active.model} to {action}, or run `ragvps reindex` to switch"
            )
        )


def ensure_set(conn: psycopg.Connection, spec: ModelSpec, vector_type: str, *, activate: bool) -> EmbeddingSet:
    """The embedding set for this model and vector type, creating its vector table if needed."""
    row = conn.execute(q("set_by_identity"), {"identity": spec.identity, "vector_type": vector_type}).fetchone()
    if row:
        return EmbeddingSet(*row)
    with conn.transaction():
        set_id = scalar(
            conn,
            q("insert_set"),
            {
                "model": spec.name,
                "identity": spec.identity,
                "dims": spec.dims,
                "vector_type": vector_type,
                "table_name": "pending",
                "active": activate,
            },
        )
        table_name = f"embeddings_{set_id}"
        conn.execute("UPDATE embedding_sets SET table_name = %s WHERE id = %s", (table_name, set_id))
        conn.execute(
            compose(
                "create_vector_table",
                table=sql.Identifier(table_name),
                vector_type=sql.SQL(column_type(vector_type)),
                dims=sql.Literal(spec.dims),
            )
        )
    return EmbeddingSet(set_id, spec.name, spec.identity, spec.dims, vector_type, table_name, activate)


def stored_documents(conn: psycopg.Connection, root: str) -> dict[str, StoredDocument]:
    rows = conn.execute(q("stored_documents"), {"root": root}).fetchall()
    return {row[0]: StoredDocument(*row[1:]) for row in rows}


def source_chunks(conn: psycopg.Connection, root: str, source: str) -> int:
    """Chunks of the documents of one source file."""
    return int(scalar(conn, q("source_chunks"), {"root": root, "source": source}))


# The types of copy_chunks' columns, in its order.
CHUNK_COLUMNS = [
    "bigint",
    "bigint",
    "integer",
    "text",
    "text",
    "text",
    "integer",
    "integer",
    "integer",
    "integer",
    "jsonb",
    "oid",
]


@dataclass(frozen=True)
class NewChunk:
    """A chunk to store: its document's key, the chunk, its vector (None: stored without one), and how the keyword
    leg reads its document (langs.Reading)."""

    doc_pk: int
    chunk: Chunk
    vector: np.ndarray | None
    reading: langs.Reading = langs.Reading("en", "english")


def replace_documents(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    root: str,
    chunker: str,
    language: str,
    batch: Sequence[tuple[Document, Sequence[Chunk], Vectors]],
    detect: bool = True,
) -> None:
    """Replace each document with its new chunks and vectors, the whole batch in one transaction; a chunk
    whose vector is None is stored without one (queued for a worker: defer_embedding). Each document's terms are
    indexed in its language (ragvps/langs.py; `language` when it is not sure, or for every document without
    `detect`)."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(q("delete_documents"), {"root": root, "doc_ids": [doc.doc_id for doc, _, _ in batch]})
        readings = [langs.of_document(doc.text, language, detect) for doc, _, _ in batch]
        rows = insert_documents(conn, root, chunker, batch, readings)
        if not rows:
            return
        ids = [r[0] for r in conn.execute(q("reserve_chunk_ids"), {"n": len(rows)})]
        copy_chunks(conn, ids, rows)
        have = [(i, r.vector) for i, r in zip(ids, rows, strict=True) if r.vector is not None]
        if have:
            write_vectors(conn, eset, [i for i, _ in have], np.stack([v for _, v in have]))


def insert_documents(
    conn: psycopg.Connection,
    root: str,
    chunker: str,
    batch: Sequence[tuple[Document, Sequence[Chunk], Vectors]],
    readings: Sequence[langs.Reading],
) -> list[NewChunk]:
    """Insert the batch's documents (in the caller's transaction); their chunks, each with its document's key and
    reading."""
    cur = conn.cursor()
    cur.executemany(  # pipelined: one round trip for the batch, not one per document
        q("insert_document"),
        [
            {
                "root": root,
                "doc_id": doc.doc_id,
                "source": doc.source,
                "title": doc.title,
                "kind": doc.kind,
                "content_hash": doc.content_hash,
                "chunker": chunker,
                "metadata": Jsonb(doc.metadata),
                "language": reading.code,
            }
            for (doc, _, _), reading in zip(batch, readings, strict=True)
        ],
        returning=True,
    )
    rows: list[NewChunk] = []
    for (_, chunks, vectors), reading in zip(batch, readings, strict=True):
        doc_pk = cur.fetchone()[0]  # type: ignore[index]
        cur.nextset()
        rows.extend(NewChunk(doc_pk, c, v, reading) for c, v in zip(chunks, vectors, strict=True))
    return rows


def copy_chunks(conn: psycopg.Connection, ids: Sequence[int], rows: Sequence[NewChunk]) -> None:
    """COPY the chunks in, each with its reserved id, its document's text search configuration and the terms
    ragvps prepared for it (None: PostgreSQL reads the chunk's own text)."""
    # regconfig's binary form is its oid, which psycopg can send.
    oids = {c: scalar(conn, "SELECT %s::regconfig::oid", (c,)) for c in {r.reading.config for r in rows}}
    with conn.cursor().copy(q("copy_chunks")) as copy:
        copy.set_types([*CHUNK_COLUMNS, "text"])
        for chunk_id, row in zip(ids, rows, strict=True):
            c, reading = row.chunk, row.reading
            terms = reading.terms(f"{c.heading_path} {c.text}") if reading.prepare else None
            copy.write_row((*chunk_row(chunk_id, row.doc_pk, c, oids[reading.config]), terms))


def chunk_row(chunk_id: int, doc_pk: int, c: Chunk, lang_oid: int) -> tuple[object, ...]:
    """One chunk as copy_chunks sends it, in CHUNK_COLUMNS' order (bench/store_bench.py copies its layouts so)."""
    return (
        chunk_id,
        doc_pk,
        c.seq,
        c.heading_path,
        c.text,
        c.content_hash,
        c.tokens,
        c.llm_tokens,
        c.start,
        c.end,
        Jsonb(c.metadata),
        lang_oid,
    )


def relabel_languages(conn: psycopg.Connection, language: str, detect: bool, batch: int = 200) -> int:
    """Documents stored before migration 014 get their language and their chunks' terms in it (the statement
    trigger re-indexes chunk_terms and the BM25 statistics; vectors are not touched); a batch a transaction.
    Returns how many documents were relabelled."""
    done = 0
    while True:
        with conn.transaction():
            rows = conn.execute(q("unlabelled_chunks"), {"documents": batch}).fetchall()
            docs: dict[int, list[tuple[int, str, str]]] = {}
            for doc_pk, chunk_id, heading, text in rows:
                docs.setdefault(doc_pk, []).append((chunk_id, heading, text))
            empty = [r[0] for r in conn.execute(q("unlabelled_left"), {"documents": batch}) if r[0] not in docs]
            if not docs and not empty:
                return done
            ids, configs, terms, codes = [], [], [], {}
            for doc_pk, chunks in docs.items():
                reading = langs.of_document(" ".join(t for _, _, t in chunks), language, detect)
                codes[doc_pk] = reading.code
                for chunk_id, heading, text in chunks:
                    ids.append(chunk_id)
                    configs.append(reading.config)
                    terms.append(reading.terms(f"{heading} {text}") if reading.prepare else None)
            conn.execute(q("relabel_chunks"), {"ids": ids, "configs": configs, "terms": terms})
            codes |= dict.fromkeys(empty, "")
            conn.execute(q("label_documents"), {"ids": list(codes), "codes": list(codes.values())})
            done += len(codes)


def as_param(eset: EmbeddingSet, vector: np.ndarray) -> object:
    """A vector as the set's column takes it: halfvec columns get a HalfVector, vector columns float32."""
    if eset.column_type == "halfvec":
        return HalfVector(vector)
    return np.asarray(vector, dtype=np.float32)


def write_vectors(conn: psycopg.Connection, eset: EmbeddingSet, ids: Sequence[int], vectors: np.ndarray) -> None:
    with conn.cursor().copy(compose("copy_vectors", table=eset.table)) as copy:
        copy.set_types(["bigint", eset.column_type])
        for chunk_id, vec in zip(ids, vectors, strict=True):
            copy.write_row((chunk_id, as_param(eset, vec)))


def delete_documents(conn: psycopg.Connection, root: str, doc_ids: Sequence[str]) -> None:
    """Delete documents with their chunks and vectors (cascade); the term statistics follow by trigger."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(q("delete_documents"), {"root": root, "doc_ids": list(doc_ids)})


def end_implicit_transaction(conn: psycopg.Connection) -> None:
    """Close the transaction a read opened, so the next transaction block is a real one, not a savepoint."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        conn.commit()


FOREIGN_ROOT = "bundle:"  # before the root of a document a bundle brought: a path this machine was never given


def ingested_roots(conn: psycopg.Connection) -> list[str]:
    """Every folder ingested into this database, as stored (absolute paths; FOREIGN_ROOT before imported ones)."""
    return [r[0] for r in conn.execute(q("ingested_roots"))]


def adopt_root(conn: psycopg.Connection, root: str) -> int:
    """The documents a bundle brought under `root` become this folder's (it is being ingested): their number."""
    return conn.execute(q("adopt_root"), {"root": root, "foreign": FOREIGN_ROOT}).rowcount


@dataclass(frozen=True)
class KbFacts:
    documents: int
    chunks: int
    model: str | None
    vector_type: str | None
    index_bytes: int
    last_ingest: datetime | None


def kb_facts(conn: psycopg.Connection) -> KbFacts:
    documents, chunks, model, vector_type, index_bytes, last = conn.execute(q("kb_facts")).fetchone() or ()
    return KbFacts(int(documents), int(chunks), model, vector_type, int(index_bytes), last)


def section_headings(conn: psycopg.Connection, path: str) -> list[str]:
    """The heading paths of a document's sections (its source path), in document order."""
    return [r[0] for r in conn.execute(q("section_headings"), {"path": path})]


def following_chunk(conn: psycopg.Connection, doc_id: str, seq: int) -> tuple[str, int] | None:
    """The text and start offset of a document's chunk `seq`, if it has one."""
    row = conn.execute(q("following_chunk"), {"doc_id": doc_id, "seq": seq}).fetchone()
    return None if row is None else (row[0], int(row[1]))


def top_headings(conn: psycopg.Connection, n: int) -> list[str]:
    """The n most common top-level headings of the knowledge base."""
    return [r[0] for r in conn.execute(q("top_headings"), {"n": n})]


def chunk_count(conn: psycopg.Connection) -> int:
    return int(scalar(conn, q("count_chunks")))


# Embedding-model switch (owned by the embed stage; see pipeline.reindex).


def chunks_with_ids(conn: psycopg.Connection) -> list[tuple[int, Chunk]]:
    """Every stored chunk with its id, in id order."""
    rows = conn.execute(q("chunks_for_reembed")).fetchall()

    return [(r[0], Chunk(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8])) for r in rows]


def record_chunker(conn: psycopg.Connection, key: str, config: dict[str, object]) -> None:
    conn.execute(q("record_chunker"), {"key": key, "config": Jsonb(config)})


def chunker_settings(conn: psycopg.Connection, key: str) -> dict[str, Any] | None:
    row = conn.execute(q("chunker_by_key"), {"key": key}).fetchone()
    return row[0] if row else None


def chunker_pin(conn: psycopg.Connection, eset: EmbeddingSet) -> str | None:
    row = conn.execute(q("chunker_pin"), {"id": eset.id}).fetchone()
    return row[0] if row else None


def set_chunker_pin(conn: psycopg.Connection, eset: EmbeddingSet, key: str | None) -> None:
    conn.execute(q("set_chunker_pin"), {"id": eset.id, "key": key})


def document_chunkers(conn: psycopg.Connection) -> list[tuple[str, int]]:
    """The chunker keys of the stored documents, most common first."""
    return [(r[0], r[1]) for r in conn.execute(q("document_chunkers"))]


def reset_vectors(conn: psycopg.Connection, eset: EmbeddingSet) -> None:
    conn.execute(compose("truncate_vector_table", table=eset.table))


def activate_set(conn: psycopg.Connection, eset: EmbeddingSet) -> None:
    """Make `eset` the one queries use, in the caller's transaction (two steps: one active set at a time)."""
    conn.execute(q("deactivate_sets"), {"id": eset.id})
    conn.execute(q("activate_set"), {"id": eset.id})
    conn.execute(q("bump_generation"))


def bump_generation(conn: psycopg.Connection) -> None:
    """Say that searches may find something else now (migration 007), in a transaction of its own: it holds
    the corpus_stats row only for that moment, so no writer waiting on this one's other locks can deadlock."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(q("bump_generation"))


def drop_other_sets(conn: psycopg.Connection, keep: EmbeddingSet) -> list[EmbeddingSet]:
    """Drop every embedding set but `keep`, with its vector table; in the caller's transaction."""
    dropped = [EmbeddingSet(*row) for row in conn.execute(q("other_sets"), {"id": keep.id}).fetchall()]
    for old in dropped:
        conn.execute(compose("drop_vector_table", table=old.table))
        conn.execute(q("delete_set"), {"id": old.id})
    return dropped
