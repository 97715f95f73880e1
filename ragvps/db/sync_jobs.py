"""Syncs of connected sources as jobs (migration 013): on the upload jobs' table and lease (db/jobs.py), one
open sync a source, its items read counted as it goes, its failed items as rows named by URL or path, and its
report kept when it ends. Each call is one short transaction, written only under the caller's claim."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg

from ragvps.db.sql import queries, scalar
from ragvps.db.store import end_implicit_transaction


def _q(name: str) -> str:
    return queries("jobs.sql")[name]


@dataclass(frozen=True)
class SyncJobRow:
    kind: str  # upload or sync
    source: str | None
    state: str
    items_read: int
    items_total: int | None
    report: dict[str, object] | None  # the sync's report, once it ended


def create(conn: psycopg.Connection, job: str, source: str, worker: str | None = None) -> tuple[str, str | None]:
    """(job id, claim token) of a sync of `source`: a new job (in `worker`'s hand when one is named, else
    queued), or the source's open one (then no token: someone else may hold it)."""
    token = str(uuid.uuid4()) if worker else None
    end_implicit_transaction(conn)
    with conn.transaction():
        made = scalar(conn, _q("insert_sync_job"), {"id": job, "source": source, "claim": token, "worker": worker})
        if made is not None:
            if token is None:  # queued: a waiting worker takes it now
                conn.execute(_q("job_queued"))
            return str(made), token
        found = scalar(conn, _q("open_sync_job"), {"source": source})
    if found is None:  # it ended between the two statements: make ours again
        return create(conn, job, source, worker)
    return str(found), None


def claim(conn: psycopg.Connection, job: str, worker: str, lease: float) -> str | None:
    """A claim token on this job if nobody holds it (or its holder's lease ran out), else None."""
    token = str(uuid.uuid4())
    end_implicit_transaction(conn)
    with conn.transaction():
        got = scalar(conn, _q("claim_this_job"), {"job": job, "worker": worker, "claim": token, "lease": lease})
    return None if got is None else token


def deaths(conn: psycopg.Connection, job: str) -> int:
    """How many holders of the job ended without ending it or giving it back (killed, out of memory)."""
    found = scalar(conn, _q("job_attempts"), {"job": job})
    conn.commit()
    return max(0, int(found or 0) - 1)


def source_of(conn: psycopg.Connection, job: str) -> str | None:
    """The source a sync job syncs; None for an upload job."""
    row = conn.execute(_q("job_kind"), {"job": job}).fetchone()
    conn.commit()
    return None if row is None else row[1]


def progress(conn: psycopg.Connection, job: str, token: str, read: int, total: int | None) -> bool | None:
    """Items read so far (and the lease renewed); whether the job was asked to stop, None if not ours."""
    end_implicit_transaction(conn)
    with conn.transaction():
        row = conn.execute(_q("sync_progress"), {"job": job, "claim": token, "read": read, "total": total}).fetchone()
    return None if row is None else bool(row[0])


def end(
    conn: psycopg.Connection,
    job: str,
    token: str,
    state: str,
    error: str | None,
    counts: tuple[int, int],
    report: Mapping[str, object],
    failures: Sequence[tuple[str, str]],
) -> bool:
    """End the job under our claim with its counts (items read, chunks embedded), failed items (name, error) and
    report; False if it was not ours."""
    end_implicit_transaction(conn)
    with conn.transaction():
        for name, message in failures:
            conn.execute(_q("insert_failed_item"), {"job": job, "claim": token, "name": name, "error": message})
        done = conn.execute(
            _q("end_sync_job"),
            {
                "job": job,
                "claim": token,
                "state": state,
                "error": error,
                "read": counts[0],
                "embedded": counts[1],
                "report": json.dumps(dict(report)),
            },
        ).fetchone()
    return done is not None


def read(conn: psycopg.Connection, job: str) -> SyncJobRow | None:
    row = conn.execute(_q("sync_job_row"), {"job": job}).fetchone()
    conn.commit()
    return None if row is None else SyncJobRow(*row)


def running(conn: psycopg.Connection, source: str) -> str | None:
    """The source's sync job a worker holds now, if any."""
    found = scalar(conn, _q("open_sync_job"), {"source": source})
    row = read(conn, str(found)) if found is not None else None
    return str(found) if row is not None and row.state == "running" else None
