"""Upload jobs in PostgreSQL (migration 009): made by the server, claimed by a worker under a lease, their
files marked one by one. Each call is one short transaction; nothing holds a row lock while files are read
or embedded, and a worker whose lease ran out (another took the job over) can no longer write to it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from ragvps.db.sql import queries, scalar
from ragvps.db.store import end_implicit_transaction
from ragvps.errors import DatabaseError

TERMINAL = ("done", "failed", "cancelled")


def _q(name: str) -> str:
    return queries("jobs.sql")[name]


@dataclass(frozen=True)
class StagedFile:
    seq: int
    name: str  # its path under the uploads folder
    staged: str  # where it waits, relative to the knowledge base's folder
    size: int
    tries: int = 0  # workers that died (their lease ran out) while reading it


@dataclass(frozen=True)
class JobRow:
    state: str
    cancel: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    worker: str | None
    attempts: int
    embedded: int
    error: str | None
    seconds: float  # since it started (until it ended)


@dataclass(frozen=True)
class FileRow:
    seq: int
    name: str
    size: int
    state: str
    error: str | None
    documents: int
    chunks: int
    rows_done: int | None  # a file read in parts: its rows read so far, of rows_total
    rows_total: int | None


def create(conn: psycopg.Connection, job: str, files: Sequence[StagedFile], home: str) -> None:
    """The job and its files, in one transaction; `home`: the data directory they are staged in."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(_q("insert_job"), {"job": job, "id": job, "home": home})
        conn.cursor().executemany(
            _q("insert_file"),
            [{"job": job, "seq": f.seq, "name": f.name, "staged": f.staged, "size": f.size} for f in files],
        )
        conn.execute(_q("job_queued"))


def listen(conn: psycopg.Connection) -> None:
    """From now on `wait_for_job` on this connection wakes when a job is queued (in any process)."""
    end_implicit_transaction(conn)
    conn.execute(_q("listen"))
    conn.commit()


def unlisten(conn: psycopg.Connection) -> None:
    """Before the connection goes back to its pool (a broken one is thrown away by the pool, its LISTEN with it)."""
    try:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.execute(_q("unlisten"))
        conn.commit()
    except psycopg.Error:
        pass


WAKE_CHECK_S = 0.2  # how often a wait for a job also looks at `stop`


def wait_for_job(conn: psycopg.Connection, seconds: float, stop: threading.Event) -> None:
    """Until a job is queued (its NOTIFY, on a connection that `listen`s), `seconds` pass or `stop` is set: a job
    queued is claimed at once instead of at the next poll; the poll stays for jobs handed back by a lease."""
    end_implicit_transaction(conn)
    end = time.monotonic() + seconds
    while not stop.is_set() and (left := end - time.monotonic()) > 0:
        for _ in conn.notifies(timeout=min(left, WAKE_CHECK_S), stop_after=1):
            return


def claim(conn: psycopg.Connection, worker: str, lease: float, home: str) -> tuple[str, str] | None:
    """(job id, claim token) of the oldest job free to take whose files are in data directory `home`, or None."""
    token = str(uuid.uuid4())
    end_implicit_transaction(conn)
    with conn.transaction():
        job = scalar(conn, _q("claim_job"), {"worker": worker, "claim": token, "lease": lease, "home": home})
    return None if job is None else (str(job), token)


def open_jobs(conn: psycopg.Connection, home: str) -> int:
    """The open jobs a worker of data directory `home` may take."""
    n = int(scalar(conn, _q("open_jobs"), {"home": home}))
    conn.commit()
    return n


def renew(conn: psycopg.Connection, job: str, token: str) -> bool | None:
    """Start the lease again; whether the job was asked to stop (None: the claim is no longer ours)."""
    return _one(conn, "renew_job", {"job": job, "claim": token})


def add_embedded(conn: psycopg.Connection, job: str, token: str, n: int) -> bool | None:
    """Count chunks embedded (and renew the lease); whether the job was asked to stop, None if not ours."""
    return _one(conn, "add_embedded", {"job": job, "claim": token, "n": n})


def file_rows(conn: psycopg.Connection, job: str, token: str, name: str, done: int, total: int) -> None:
    """How far the reader of file `name` (read in parts) is."""
    _write(conn, "file_rows", {"job": job, "claim": token, "name": name, "done": done, "total": total})


def _write(conn: psycopg.Connection, name: str, params: dict[str, object]) -> None:
    """One statement of jobs.sql in a transaction of its own."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(_q(name), params)


def _one(conn: psycopg.Connection, name: str, params: dict[str, object]) -> bool | None:
    end_implicit_transaction(conn)
    with conn.transaction():
        row = conn.execute(_q(name), params).fetchone()
    return None if row is None else bool(row[0])


def pending(conn: psycopg.Connection, job: str) -> list[StagedFile]:
    rows = conn.execute(_q("pending_files"), {"job": job}).fetchall()
    conn.commit()
    return [StagedFile(*r) for r in rows]


def hold(conn: psycopg.Connection, job: str, token: str, seqs: Sequence[int]) -> None:
    """Mark the files about to be read as in our hand: if this worker dies now, the next holder counts a try."""
    _write(conn, "hold_files", {"job": job, "claim": token, "seqs": list(seqs)})


def count_deaths(conn: psycopg.Connection, job: str, token: str) -> None:
    """One more try for each pending file an earlier holder had in hand when it died (or lost its lease)."""
    _write(conn, "count_deaths", {"job": job, "claim": token})


def finish_file(
    conn: psycopg.Connection,
    job: str,
    token: str,
    seq: int,
    state: str,
    error: str | None = None,
    documents: int = 0,
    chunks: int = 0,
) -> bool:
    """Mark one file; False when the claim is no longer ours (nothing written)."""
    return finish_files(conn, job, token, [(seq, state, error, documents, chunks)]) == 1


Outcome = tuple[int, str, str | None, int, int]  # seq, state, error, documents, chunks


def finish_files(conn: psycopg.Connection, job: str, token: str, outcomes: Sequence[Outcome]) -> int:
    """Mark a batch's files in one transaction (one commit, not one a file); how many were ours to mark."""
    end_implicit_transaction(conn)
    with conn.transaction():
        cur = conn.cursor()
        cur.executemany(
            _q("finish_file"),
            [
                {
                    "job": job,
                    "claim": token,
                    "seq": seq,
                    "state": state,
                    "error": error,
                    "documents": documents,
                    "chunks": chunks,
                }
                for seq, state, error, documents, chunks in outcomes
            ],
            returning=True,
        )
        marked = 0
        while True:
            marked += len(cur.fetchall())
            if not cur.nextset():
                return marked


def file_outcomes(conn: psycopg.Connection, job: str) -> dict[str, tuple[int, str | None]]:
    """{file state: (how many, the first error among them)} of the job's files."""
    rows = conn.execute(_q("file_outcomes"), {"job": job}).fetchall()
    conn.commit()
    return {state: (int(n), error) for state, n, error in rows}


def end(conn: psycopg.Connection, job: str, token: str, state: str, error: str | None = None) -> None:
    """End the job under our claim; its pending files end failed (with `error`) when it failed, else cancelled."""
    _write(conn, "end_job", {"job": job, "claim": token, "state": state, "error": error})


def release(conn: psycopg.Connection, job: str, token: str, *, strike: bool = False) -> None:
    """Give the job back at once (a worker stopping): the next claim goes on where it stopped. With `strike`
    (what failed was reading the files in hand) the next holder counts them a try, as if this worker had died."""
    if conn.closed:
        raise DatabaseError(f"the connection is closed: job {job}'s lease runs out instead")
    try:
        conn.rollback()
        with conn.transaction():
            if not strike:
                conn.execute(_q("unhold_files"), {"job": job, "claim": token})
            conn.execute(_q("release_job"), {"job": job, "claim": token, "strike": strike})
    except psycopg.Error as exc:
        raise DatabaseError(f"giving job {job} back failed: {exc}") from exc


def cancel(conn: psycopg.Connection, job: str) -> str | None:
    """Ask the job to stop; its state afterwards ('cancelled' at once when nobody held it), None if it had
    ended already (or does not exist)."""
    end_implicit_transaction(conn)
    with conn.transaction():
        state = scalar(conn, _q("cancel_job"), {"job": job})
        conn.execute(_q("cancel_files"), {"job": job})
    return None if state is None else str(state)


def read(conn: psycopg.Connection, job: str) -> tuple[JobRow, list[FileRow]] | None:
    row = conn.execute(_q("job_row"), {"job": job}).fetchone()
    if row is None:
        conn.commit()
        return None
    files = [FileRow(*r) for r in conn.execute(_q("job_files"), {"job": job})]
    conn.commit()
    return JobRow(*row), files


# --- documents, as the API lists and deletes them ----------------------------------------------------------


@dataclass(frozen=True)
class DocumentRow:
    id: int
    root: str
    source: str
    doc_id: str
    title: str
    kind: str
    ingested_at: datetime
    chunks: int
    queued: int  # chunks still waiting for a worker's vector


def documents(conn: psycopg.Connection, after: int, limit: int) -> list[DocumentRow]:
    rows = conn.execute(_q("list_documents"), {"after": after, "limit": limit}).fetchall()
    conn.commit()
    return [DocumentRow(*r) for r in rows]


def document(conn: psycopg.Connection, doc: int) -> tuple[str, str, str, int] | None:
    """(root, source, doc_id, chunks) of one stored document."""
    row = conn.execute(_q("document_by_id"), {"id": doc}).fetchone()
    return None if row is None else (row[0], row[1], row[2], int(row[3]))


def documents_of_source(conn: psycopg.Connection, root: str, source: str) -> int:
    return int(scalar(conn, _q("documents_of_source"), {"root": root, "source": source}))
