"""The embedding queue in PostgreSQL: chunks waiting for a vector, claimed by workers under a lease.

Claim, finish and release are each one short transaction; nothing here holds a row lock while a batch
is being embedded. A batch is finished in the transaction that writes its vectors, and only the rows
still under the worker's own claim are finished (a lease that expired may have gone to another worker).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from ragvps.db import store
from ragvps.db.sql import queries, scalar
from ragvps.db.store import EmbeddingSet
from ragvps.errors import DatabaseError
from ragvps.records import Chunk


def _q(name: str) -> str:
    return queries("queue.sql")[name]


@dataclass(frozen=True)
class Claim:
    token: str  # uuid of this claim
    chunks: list[tuple[int, Chunk]]  # (chunk id, chunk), in id order


@dataclass
class QueueCounts:
    pending: int = 0  # waiting, or under a lease that expired
    claimed: int = 0  # under a live lease
    done: int = 0  # finished by workers (over the set's life)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)


def enqueue_missing(conn: psycopg.Connection, eset: EmbeddingSet) -> int:
    """Queue every chunk without a vector in `eset`; the number of rows queued now."""
    store.end_implicit_transaction(conn)
    with conn.transaction():
        cur = conn.execute(sql.SQL(_q("enqueue_missing")).format(table=eset.table), {"set_id": eset.id})
        return cur.rowcount


def left(conn: psycopg.Connection, eset: EmbeddingSet) -> int:
    """Rows in the queue, claimed or not."""
    n = scalar(conn, _q("queue_left"), {"set_id": eset.id})
    conn.commit()
    return int(n)


def claim(conn: psycopg.Connection, eset: EmbeddingSet, worker: str, n: int, lease: float) -> Claim | None:
    """Claim up to n chunks (skipping rows another worker has locked) and commit; None if none is free."""
    token = str(uuid.uuid4())
    store.end_implicit_transaction(conn)
    with conn.transaction():
        ids = [
            r[0]
            for r in conn.execute(
                _q("claim_batch"), {"set_id": eset.id, "worker": worker, "claim": token, "n": n, "lease": lease}
            )
        ]
    if not ids:
        return None
    rows = conn.execute(_q("claimed_chunks"), {"ids": ids}).fetchall()
    conn.commit()
    chunks = [(r[0], Chunk(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9] or {})) for r in rows]
    return Claim(token, chunks)


def finish(conn: psycopg.Connection, eset: EmbeddingSet, worker: str, claimed: Claim, vectors: np.ndarray) -> int:
    """Write the vectors of the rows still under this claim and take them off the queue, in one transaction;
    the number written."""
    ids = [i for i, _ in claimed.chunks]
    by_id = dict(zip(ids, vectors, strict=True))
    store.end_implicit_transaction(conn)
    with conn.transaction():
        mine = sorted(
            r[0] for r in conn.execute(_q("finish_batch"), {"set_id": eset.id, "claim": claimed.token, "ids": ids})
        )
        if mine:
            store.write_vectors(conn, eset, mine, np.stack([by_id[i] for i in mine]))
        conn.execute(_q("count_worker"), {"set_id": eset.id, "worker": worker, "done": len(mine)})
    if mine:  # after the commit, in a transaction of its own (see store.bump_generation)
        store.bump_generation(conn)
    return len(mine)


def renew(conn: psycopg.Connection, claimed: Claim) -> None:
    """Start the claim's lease again (the worker is alive and still embedding it); DatabaseError if it failed."""
    _claim_statement(conn, "renew_claim", claimed)


def release(conn: psycopg.Connection, claimed: Claim) -> None:
    """Give the claim's rows back to the queue at once (a worker stopping mid-batch); DatabaseError if it failed."""
    if conn.closed:
        raise DatabaseError(f"the connection is closed: claim {claimed.token}'s lease runs out instead")
    _claim_statement(conn, "release_batch", claimed, rollback=True)


def _claim_statement(conn: psycopg.Connection, name: str, claimed: Claim, rollback: bool = False) -> None:
    try:
        if rollback:
            conn.rollback()
        store.end_implicit_transaction(conn)
        with conn.transaction():
            conn.execute(_q(name), {"claim": claimed.token})
    except psycopg.Error as exc:
        raise DatabaseError(f"{name.replace('_', ' ')} of claim {claimed.token} failed: {exc}") from exc


def counts(conn: psycopg.Connection, eset: EmbeddingSet, lease: float) -> QueueCounts:
    pending, claimed = conn.execute(_q("queue_counts"), {"set_id": eset.id, "lease": lease}).fetchone()  # type: ignore[misc]
    out = QueueCounts(int(pending), int(claimed))
    for name, done, batches, holding, seen in conn.execute(_q("queue_workers"), {"set_id": eset.id, "lease": lease}):
        out.workers[name] = {
            "done": int(done),
            "batches": int(batches),
            "claimed": int(holding),
            "last_seen": seen.isoformat() if seen else None,
        }
        out.done += int(done)
    return out
