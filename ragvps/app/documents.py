"""Documents in through the API: an upload becomes a job on the knowledge base's work queue (migration 009),
which the server's runner, or `ragvps worker --jobs`, takes under a lease; its progress and the documents
stored are read back here as typed records. The HTTP layer streams the files to disk; nothing here reads a
request.

    job = submit(app, staged)          # the files already under KB_DIR/incoming/JOB
    status = job_status(app, job)      # JobStatus: files done of total, chunks embedded, rate, ETA, errors
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ragvps.app.job_ids import job_kb as job_kb  # re-exported: the documents door finds a job's base
from ragvps.app.job_ids import new_job_id as new_job_id  # re-exported: the documents door makes jobs
from ragvps.db import jobs, priority, store, sync_jobs
from ragvps.db.jobs import StagedFile
from ragvps.embed.registry import make_lanes
from ragvps.errors import ForbiddenError, NotFoundError, UsageError
from ragvps.generate import cache as answer_cache
from ragvps.ingest.artifacts import ChunkArtifacts
from ragvps.ingest.jobs import run_jobs as run
from ragvps.ingest.sync_job import report_of
from ragvps.ingest.uploads import discard, home_id, safe_name, staging_dir, unique, uploads_dir
from ragvps.ingest.worker import default_name

__all__ = ["StagedFile", "discard", "safe_name", "staging_dir", "unique"]  # what the HTTP layer stages uploads with

if TYPE_CHECKING:
    import psycopg

    from ragvps.app.core import App
    from ragvps.db.jobs import FileRow, JobRow
    from ragvps.db.sync_jobs import SyncJobRow
    from ragvps.embed.hosts import Lanes
    from ragvps.ingest.jobs import JobsReport
    from ragvps.ingest.remote.sync import SyncReport

log = logging.getLogger(__name__)
MAX_PAGE = 1000
# A delete behind an upload's batch: at a load of 16 a batch held the lock past the 3 s every writer waits, and the
# delete was refused with a 503 (schemathesis, issue 51)
DELETE_LOCK_WAIT_S = 30.0


def submit(app: App, job: str, files: list[StagedFile]) -> str:
    """Queue the job of files already staged (under KB_DIR/incoming/JOB); its id."""
    with app.connection() as conn:
        jobs.create(conn, job, files, home_id(app.settings.database.data_dir))
    return job


@dataclass(frozen=True)
class FileStatus:
    name: str
    size: int
    state: str  # pending, done, unchanged (stored already), failed, cancelled
    documents: int
    chunks: int
    error: str | None
    rows_done: int | None  # a large table read in parts: its rows read so far, of rows_total (else null)
    rows_total: int | None


@dataclass(frozen=True)
class JobStatus:
    id: str
    state: str  # queued, running, done, failed, cancelled
    cancel_requested: bool
    files_total: int
    files_done: int  # files with an outcome (done, unchanged, failed, cancelled)
    files_failed: int
    bytes_total: int
    bytes_done: int
    chunks_stored: int
    chunks_embedded: int
    seconds: float
    files_per_s: float
    chunks_per_s: float  # chunks embedded a second
    eta_s: float | None  # by the bytes left at the rate so far; None until something is done
    worker: str | None
    attempts: int  # claims: more than 1 when a worker's lease ran out and another took the job over
    created_at: str
    finished_at: str | None
    error: str | None
    errors: tuple[dict[str, str], ...]  # {file, error} for each file (or a sync's item, by URL or path) that failed
    files: tuple[FileStatus, ...]
    kind: str = "upload"  # upload, or sync (of a connected source: files_done counts the items read so far)
    source: str | None = None  # a sync's source
    sync: SyncReport | None = None  # a sync's report, once it ended
    waiting: str | None = None  # why a queued job has not started: the machine is busy (its workers run below it)

    @property
    def ended(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


def status_of(job: str, row: JobRow, files: list[FileRow], synced: SyncJobRow | None = None) -> JobStatus:
    """A job's status; a sync job's (`synced`) counts the items it read of those it found changed."""
    status = _upload_status(job, row, files)
    if synced is None or synced.kind != "sync":
        return status

    total = max(synced.items_total or 0, synced.items_read)
    return dataclasses.replace(
        status,
        kind="sync",
        source=synced.source,
        files_total=total,
        files_done=synced.items_read,
        files_per_s=round(synced.items_read / status.seconds, 3) if status.seconds > 0 else 0.0,
        eta_s=None if status.state == "running" else 0.0,
        sync=report_of(synced.report) if synced.report else None,
    )


WAIT_NOTE_S = 2.0  # a job queued this long on a busy machine says it waits for CPU


def cpu_wait(state: str, seconds: float) -> str | None:
    """Why a queued job waits, when it is that the cores are busy: its worker runs below everything at normal
    priority (serve/documents/runner.py), so it starts, but later."""
    if state != "queued" or seconds < WAIT_NOTE_S:
        return None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load < cores:
        return None
    return (
        f"waiting for CPU: this machine is busy (load {load:.1f} on {cores} cores), and upload workers run below "
        "searches and other programs; the job starts as CPU time comes free"
    )


def _upload_status(job: str, row: JobRow, files: list[FileRow]) -> JobStatus:
    done = [f for f in files if f.state != "pending"]
    total_bytes = sum(f.size for f in files)
    done_bytes = sum(f.size for f in done) + sum(
        f.size * f.rows_done // f.rows_total for f in files if f.state == "pending" and f.rows_done and f.rows_total
    )
    seconds = max(row.seconds, 0.0)
    rate = done_bytes / seconds if seconds > 0 else 0.0
    running = row.state in ("queued", "running")
    eta = (total_bytes - done_bytes) / rate if running and rate > 0 else (0.0 if not running else None)
    failed = [f for f in files if f.state == "failed"]
    return JobStatus(
        id=job,
        state=row.state,
        cancel_requested=row.cancel,
        files_total=len(files),
        files_done=len(done),
        files_failed=len(failed),
        bytes_total=total_bytes,
        bytes_done=done_bytes,
        chunks_stored=sum(f.chunks for f in files if f.state == "done"),
        chunks_embedded=row.embedded,
        seconds=round(seconds, 3),
        files_per_s=round(len(done) / seconds, 3) if seconds > 0 else 0.0,
        chunks_per_s=round(row.embedded / seconds, 3) if seconds > 0 else 0.0,
        eta_s=None if eta is None else round(eta, 1),
        worker=row.worker,
        attempts=row.attempts,
        created_at=row.created_at.isoformat(),
        finished_at=_iso(row.finished_at),
        error=row.error,
        waiting=cpu_wait(row.state, seconds),
        errors=tuple({"file": f.name, "error": f.error or "failed"} for f in failed),
        files=tuple(
            FileStatus(f.name, f.size, f.state, f.documents, f.chunks, f.error, f.rows_done, f.rows_total)
            for f in files
        ),
    )


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def job_status(app: App, job: str) -> JobStatus:
    """The job's progress; NotFoundError when this knowledge base has no such job."""
    with app.connection() as conn:
        found = jobs.read(conn, job)
        synced = sync_jobs.read(conn, job) if found else None
    if found is None:
        raise NotFoundError(
            f"no job {job!r}: jobs are listed by the upload or sync that made them (POST "
            "/kb/{name}/documents and POST /kb/{name}/sources/{source}/sync answer with the id)"
        )
    return status_of(job, *found, synced)


def cancel_job(app: App, job: str, admin: bool = True) -> JobStatus:
    """Stop the job: one nobody runs yet ends at once; a running one after the batch in hand (whose documents
    are stored whole, or not at all). Files stored stay stored; uploading the rest again resumes. Only a caller
    that may start the job may cancel it: a sync needs the admin role (`admin`), an upload the write role."""
    if job_status(app, job).kind == "sync" and not admin:  # NotFoundError first
        raise ForbiddenError(
            f"job {job} is a sync of a connected source: only the admin role, which starts syncs, may cancel it"
        )
    with app.connection() as conn:
        state = jobs.cancel(conn, job)
    if state == "cancelled":
        discard(app.settings.database.kb_dir, job)
    return job_status(app, job)


def run_jobs(
    app: App,
    worker: str | None,
    stop: threading.Event,
    *,
    exit_when_empty: bool = False,
    wake: threading.Event | None = None,
    poll: float = 1.0,
    linger: float = 0.0,
    below_server: bool = False,
) -> JobsReport:
    """Take this knowledge base's jobs (uploads, and syncs of its sources) until `stop` (or none has been left for
    `linger` seconds, exit_when_empty). The lease is renewed on a second connection: the App's connections must be
    pooled. `below_server`: go below the server on the CPU (db/priority.below_server) once started (ingest/jobs.py
    says when), and the database's backend of the jobs' connection with it."""

    def lower(conn: psycopg.Connection) -> None:
        log.info("worker below the server from now on (CPU: %s)", priority.below_server())
        priority.follow_client(conn)

    def lanes() -> Lanes:
        return make_lanes(app.settings, app.spec, lambda: app.embedder, lambda *_: None, lambda _: None)

    return run(
        app.connection,
        app.settings,
        app.spec,
        lanes,
        worker or default_name(),
        stop=stop,
        exit_when_empty=exit_when_empty,
        poll=poll,
        wake=wake,
        linger=linger,
        settled=answer_cache.prune,
        lower=lower if below_server else None,
    )


def open_job_count(app: App) -> int:
    """The open jobs of this App's knowledge base that a worker of this data directory may take."""
    home = home_id(app.settings.database.data_dir)
    with app.connection() as conn:
        return jobs.open_jobs(conn, home)


# --- the documents stored -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentInfo:
    id: int
    path: str  # the file, relative to the folder it was ingested from (the uploads folder for uploads)
    doc_id: str
    title: str
    format: str
    size: int | None  # bytes of its file now (None when the file is not on this machine)
    chunks: int
    ingested_at: str
    status: str  # "embedded", or "queued" while chunks wait for `ragvps worker`
    uploaded: bool  # sent through the API (its file is in the uploads folder); else from an ingested folder


@dataclass(frozen=True)
class DocumentPage:
    documents: tuple[DocumentInfo, ...]
    next_cursor: str | None  # pass as `cursor` for the next page; None on the last


def list_documents(app: App, limit: int = 100, cursor: str | None = None) -> DocumentPage:
    if not 1 <= limit <= MAX_PAGE:
        raise UsageError(f"limit {limit} is not between 1 and {MAX_PAGE}")
    if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 18):
        raise UsageError(f"cursor {cursor!r} is not one this API gave: pass `next_cursor` of the page before")
    with app.connection() as conn:
        rows = jobs.documents(conn, int(cursor or 0), limit + 1)
    uploads = str(uploads_dir(app.settings.database.kb_dir).resolve())
    out = []
    for r in rows[:limit]:
        file = Path(r.root) / r.source if Path(r.root).is_dir() else Path(r.root)
        size = file.stat().st_size if file.is_file() else None
        out.append(
            DocumentInfo(
                r.id,
                r.source,
                r.doc_id,
                r.title,
                r.kind,
                size,
                r.chunks,
                r.ingested_at.isoformat(),
                "queued" if r.queued else "embedded",
                r.root == uploads,
            )
        )
    return DocumentPage(tuple(out), str(rows[limit - 1].id) if len(rows) > limit else None)


@dataclass(frozen=True)
class DeletedDocument:
    id: int
    path: str
    chunks: int
    answers_pruned: int
    file_removed: bool  # the uploaded file (a document of a folder keeps its file: ingest would add it again)


def delete_document(app: App, doc: int) -> DeletedDocument:
    """Remove one document: its chunks and their vectors and queue rows (cascade), the cached answers that
    cited them, its chunk file, and its uploaded file (when no other document comes from it). It waits its turn
    behind a writer in hand (an upload's batch takes seconds on a busy machine) for up to DELETE_LOCK_WAIT_S, within
    request_timeout, before it is refused as busy."""
    kb_dir = app.settings.database.kb_dir
    uploads = uploads_dir(kb_dir).resolve()
    wait = min(DELETE_LOCK_WAIT_S, app.settings.serve.request_timeout / 2)
    with app.connection() as conn, store.write_lock(conn, wait):
        found = jobs.document(conn, doc)
        if found is None:
            raise NotFoundError(
                f"no document {doc} in knowledge base {app.settings.database.kb}: "
                "GET /kb/{name}/documents lists them with their ids"
            )
        root, source, doc_id, chunks = found
        store.delete_documents(conn, root, [doc_id])
        pruned = answer_cache.prune(conn)
        store.bump_generation(conn)
        rest = jobs.documents_of_source(conn, root, source)
        conn.commit()
    removed = False
    if rest == 0:
        ChunkArtifacts(kb_dir, Path(root)).path(source).unlink(missing_ok=True)
        if Path(root) == uploads:
            target = (uploads / source).resolve()
            if target.is_relative_to(uploads) and target.is_file():
                target.unlink()
                removed = True
    return DeletedDocument(doc, source, chunks, pruned, removed)
