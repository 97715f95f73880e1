"""Run upload jobs: claim one under a lease, move each staged file into the uploads folder, ingest the files a
batch at a time (each batch's documents stored in one transaction), mark each file with its outcome, and stop
after the batch in hand when the job is cancelled. A second connection keeps the lease alive, counts the
chunks embedded as they come and reads the cancel flag; a worker that dies stops renewing, and after its lease
another worker takes the job over from its first file not marked (a file stored but not marked is found
stored again: nothing is embedded or stored twice). The files a dead worker had in hand count one try each;
a file tried `worker_max_attempts` times fails with an error naming it, and the job goes on without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ragvps.config import Settings
from ragvps.db import jobs, store, sync_jobs
from ragvps.embed.hosts import Lanes
from ragvps.errors import DatabaseError, RagvpsError, UnavailableError
from ragvps.ingest import parts, uploads
from ragvps.ingest.cancel import Cancelled, stops_at
from ragvps.ingest.periodic import Periodic
from ragvps.ingest.pipeline import FileOutcome, ingest_files
from ragvps.ingest.sync_job import SyncJob
from ragvps.records import ModelSpec

log = logging.getLogger(__name__)

Connect = Callable[[], AbstractContextManager[psycopg.Connection]]
Warn = Callable[[str], None]
BATCH_BYTES = 16 << 20  # a batch's files at most (a larger file alone); their number: setting upload_batch_files
RETRY_S = 5.0  # after the embedder or the database failed: the job is given back and tried again
EAGER_BYTES = 256 << 10  # a first upload this small runs before the worker goes below the server (`lower`)


@dataclass
class JobsReport:
    worker: str
    jobs: int = 0  # jobs ended by this worker
    files: int = 0  # files it marked
    stopped: str = ""


def run_jobs(
    connect: Connect,
    settings: Settings,
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    worker: str,
    *,
    stop: threading.Event,
    exit_when_empty: bool = False,
    poll: float = 1.0,
    wake: threading.Event | None = None,
    linger: float = 0.0,
    settled: Callable[[psycopg.Connection], object] | None = None,
    lower: Callable[[psycopg.Connection], object] | None = None,
) -> JobsReport:
    """Take jobs (uploads, and syncs of connected sources) until `stop` is set (or none has been left for
    `linger` seconds, exit_when_empty); `wake` cuts a wait short; `settled` after a sync that changed documents.
    `lower` puts the worker below the server before its second job, or before its first unless that is an upload
    of at most EAGER_BYTES: the worker's start and a note run at once, all else yields to searches."""
    report, claimed = JobsReport(worker), 0
    lease, home = float(settings.embed.worker_lease), uploads.home_id(settings.database.data_dir)
    empty_since: float | None = None
    with connect() as conn:
        jobs.listen(conn)  # a job queued wakes this worker at once
        try:
            while not stop.is_set():
                got = jobs.claim(conn, worker, lease, home)
                if got is None:
                    if exit_when_empty and jobs.open_jobs(conn, home) == 0:
                        empty_since = empty_since or time.monotonic()
                        if time.monotonic() - empty_since >= linger:
                            report.stopped = "empty"
                            return report
                    else:
                        empty_since = None
                    _wait(conn, stop, wake, poll)
                    continue
                empty_since = None
                job, token = got
                lower, claimed = _lower(conn, job, lower, claimed), claimed + 1
                try:
                    ended = _run(connect, conn, settings, spec, lanes, job, token, stop, report, settled)
                except UnavailableError as exc:  # the embedder or the database: give the job back, try later
                    log.warning("job %s: %s; retrying in %.0f s", job, exc, RETRY_S)
                    _give_back(conn, job, token)
                    stop.wait(RETRY_S)
                    continue
                except (RagvpsError, OSError) as exc:  # it cannot run here (a setting, the file system): it fails whole
                    ended = _fail(conn, settings, job, token, exc)
                except BaseException as exc:  # a defect, or MemoryError, reading the files in hand counts as a try
                    _give_back(conn, job, token, strike=isinstance(exc, Exception))
                    raise
                report.jobs += ended
            report.stopped = "stop"
        finally:
            jobs.unlisten(conn)
    return report


def _run(
    connect: Connect,
    conn: psycopg.Connection,
    settings: Settings,
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    job: str,
    token: str,
    stop: threading.Event,
    report: JobsReport,
    settled: Callable[[psycopg.Connection], object] | None,
) -> int:
    """Run one claimed job, an upload's or a sync's; 1 if it ended here."""

    source = sync_jobs.source_of(conn, job)
    if source is None:
        return Job(connect, conn, settings, spec, lanes, job, token).run(stop, report)

    def warn(message: str) -> None:
        log.info("job %s: %s", job, message)

    done = SyncJob(connect, conn, settings, spec, lanes, job, token, source).run(stop, lambda *_: None, warn, settled)
    return int(done is not None)


def _lower(
    conn: psycopg.Connection, job: str, lower: Callable[[psycopg.Connection], object] | None, claimed: int
) -> Callable[[psycopg.Connection], object] | None:
    """Go below the server before a second job, or a first one that is not small; the hook, until it ran."""
    if lower is not None and (claimed or not _small(conn, job)):
        lower(conn)
        return None
    return lower


def _small(conn: psycopg.Connection, job: str) -> bool:
    """An upload of at most EAGER_BYTES (a sync's size is not known before it runs)."""
    files = jobs.pending(conn, job)
    return sync_jobs.source_of(conn, job) is None and sum(f.size for f in files) <= EAGER_BYTES


def _wait(conn: psycopg.Connection, stop: threading.Event, wake: threading.Event | None, poll: float) -> None:
    if wake is None:
        jobs.wait_for_job(conn, poll, stop)
        return
    wake.wait(poll)
    wake.clear()


def _fail(conn: psycopg.Connection, settings: Settings, job: str, token: str, exc: Exception) -> int:
    """End a job that cannot run: failed, with why; its files not stored fail with it."""
    log.warning("job %s could not run: %s", job, exc)
    conn.rollback()
    jobs.end(conn, job, token, "failed", f"the job could not run: {_without_paths(exc, settings.database.kb_dir)}")
    uploads.discard(settings.database.kb_dir, job)
    return 1


def _without_paths(exc: Exception, kb_dir: Path) -> str:
    """An error as a client may read it: a file system error names its file relative to the knowledge base's
    folder, never by the server's path."""
    if not isinstance(exc, OSError) or not exc.strerror:
        return str(exc)
    where = Path(str(exc.filename or ""))
    shown = where.relative_to(kb_dir) if where.is_relative_to(kb_dir) else None
    return f"{exc.strerror} ({shown} in the knowledge base's folder)" if shown else exc.strerror


def _give_back(conn: psycopg.Connection, job: str, token: str, strike: bool = False) -> None:
    try:
        jobs.release(conn, job, token, strike=strike)
    except DatabaseError as exc:
        log.info("could not give job %s back (%s); its lease runs out instead", job, exc)


class Job:
    """One claimed job, run to its end (or to a stop: then given back)."""

    def __init__(
        self,
        connect: Connect,
        conn: psycopg.Connection,
        settings: Settings,
        spec: ModelSpec,
        lanes: Callable[[], Lanes],
        job: str,
        token: str,
    ):
        self.connect, self.conn, self.settings, self.spec, self.lanes = connect, conn, settings, spec, lanes
        self.job, self.token = job, token
        self.kb_dir = settings.database.kb_dir
        self.cancelled = threading.Event()
        self.lost = threading.Event()  # the claim is no longer ours (the lease ran out, another took it)
        self.embedded = 0  # chunks embedded and not yet counted in the job's row
        self.reading: tuple[str, int, int] | None = None  # a file read in parts: (name, rows done, rows)

    def run(self, stop: threading.Event, report: JobsReport) -> int:
        """Ingest the job's pending files; 1 if the job ended here, 0 if it was given back or taken over."""
        lease = float(self.settings.embed.worker_lease)
        with Heartbeat(self, max(0.2, min(1.0, lease / 3))):
            jobs.count_deaths(self.conn, self.job, self.token)
            pending = self.give_up(jobs.pending(self.conn, self.job), report)
            for batch in batches(pending, self.settings.embed.upload_batch_files):
                cancel = jobs.renew(self.conn, self.job, self.token)
                if cancel is None:
                    self.lost.set()
                elif cancel:
                    self.cancelled.set()
                if stop.is_set() or self.lost.is_set() or self.cancelled.is_set():
                    break
                jobs.hold(self.conn, self.job, self.token, [f.seq for f in batch])
                try:
                    outcomes = self.ingest(batch)
                except Cancelled:
                    break
                report.files += jobs.finish_files(
                    self.conn,
                    self.job,
                    self.token,
                    [(f.seq, o.state, o.error, o.documents, o.chunks) for f, o in zip(batch, outcomes, strict=True)],
                )
        if self.lost.is_set():
            return 0
        if self.cancelled.is_set():
            jobs.end(self.conn, self.job, self.token, "cancelled")
        elif stop.is_set() and jobs.pending(self.conn, self.job):
            jobs.release(self.conn, self.job, self.token)
            return 0
        else:
            jobs.end(self.conn, self.job, self.token, *ending(jobs.file_outcomes(self.conn, self.job)))
        uploads.discard(self.kb_dir, self.job)
        return 1

    def give_up(self, files: list[jobs.StagedFile], report: JobsReport) -> list[jobs.StagedFile]:
        """Fail the files that workers died reading `worker_max_attempts` times (a file too large for the
        machine's memory, or one that crashes a reader); the others, to read."""
        most = self.settings.embed.worker_max_attempts
        for f in files:
            if f.tries < most:
                continue
            error = (
                f"{f.name}: a worker died {f.tries} times while reading it (killed, or out of memory), so it "
                f"is not tried again; the file may be too large or malformed: split it, or raise "
                f"worker_max_attempts if the workers were stopped for another reason"
            )
            log.warning("job %s: %s", self.job, error)
            if jobs.finish_file(self.conn, self.job, self.token, f.seq, "failed", error):
                report.files += 1
            self.drop_unstored(uploads.uploads_dir(self.kb_dir), f.name)
            self.conn.commit()
        return [f for f in files if f.tries < most]

    def drop_unstored(self, folder: Path, rel: str) -> None:
        """A file that failed, or was cancelled, does not stay in the uploads folder for a reindex to store: its
        older version comes back, or it goes unless something was stored from it (by a worker that died)."""
        stored = bool(jobs.documents_of_source(self.conn, str(folder.resolve()), rel))
        try:
            uploads.unplace(uploads.inside(folder, rel), stored)
        except (OSError, RagvpsError) as exc:
            log.warning("job %s: %s could not be taken out of the uploads folder: %s", self.job, rel, exc)

    def ingest(self, batch: Sequence[jobs.StagedFile]) -> list[FileOutcome]:
        """Place the batch's files and ingest them together; when the batch fails as a whole (one file's
        chunk too long for the model), each file alone, so that the error names its file."""
        folder = uploads.uploads_dir(self.kb_dir)
        folder.mkdir(parents=True, exist_ok=True)  # a folder that cannot be made: the job cannot run
        refused: dict[str, FileOutcome] = {}
        for f in batch:
            staged = self.kb_dir / f.staged
            try:
                if staged.exists():  # else placed by a worker that died before marking it
                    uploads.place(staged, folder, f.name)
            except (OSError, RagvpsError) as exc:  # the name, on this file system: this file fails alone
                refused[f.name] = FileOutcome(f.name, "failed", uploads.unplaceable(f.name, exc))
        names = [f.name for f in batch if f.name not in refused]
        try:
            placed = {o.rel: o for o in self._ingest(folder, names)} if names else {}
        except Cancelled:
            for name in names:
                self.drop_unstored(folder, name)
            self.conn.commit()
            raise
        except UnavailableError:
            raise
        except RagvpsError as exc:
            if len(names) > 1:
                return [refused.get(f.name) or self.ingest([f])[0] for f in batch]
            placed = {names[0]: FileOutcome(names[0], "failed", f"{names[0]}: {exc}")}
        outcomes = [refused.get(f.name) or placed[f.name] for f in batch]
        for outcome in outcomes:
            if outcome.rel in refused:
                continue
            if outcome.state == "failed":
                self.drop_unstored(folder, outcome.rel)
            else:
                uploads.settle(folder, outcome.rel)
        self.conn.commit()
        return outcomes

    def _ingest(self, folder: Path, names: list[str]) -> list[FileOutcome]:
        start = self.embedded

        def progress(stage: str, done: int, total: int) -> None:
            if self.cancelled.is_set() and stops_at(stage):
                raise Cancelled
            if stage == "embed":
                self.embedded = start + done
            elif (rel := parts.rows_file(stage)) is not None:
                self.reading = (rel, done, total)

        def warn(message: str) -> None:
            log.info("job %s: %s", self.job, message)

        while True:
            try:
                _, outcomes = ingest_files(
                    self.conn, self.settings, folder, names, self.spec, self.lanes, progress, warn, lock_wait=5.0
                )
                return outcomes
            except DatabaseError as exc:
                if store.WRITE_LOCK_BUSY not in str(exc) or self.lost.is_set():
                    raise
                time.sleep(1.0)  # an ingest from the command line holds the write lock: wait for it


def ending(outcomes: dict[str, tuple[int, str | None]]) -> tuple[str, str | None]:
    """How a job that ran to its end ends: `failed` when every file failed (nothing of it was stored), else
    `done`, failures being the files'."""
    failed, first = outcomes.get("failed", (0, None))
    if failed and failed == sum(n for n, _ in outcomes.values()):
        return "failed", (
            f"every file failed ({failed} of {failed}), nothing was stored; the first: {first}; "
            "each file's error says what to do"
        )
    return "done", None


def batches(files: Sequence[jobs.StagedFile], most: int) -> list[list[jobs.StagedFile]]:
    """Files in upload order, grouped by `most` files and BATCH_BYTES (a large file alone). A file a worker died
    reading is read alone, and the file after it starts a new batch: its tries count against it only."""
    out: list[list[jobs.StagedFile]] = []
    size = 0
    for f in files:
        alone = f.tries > 0 or (out and out[-1] and out[-1][-1].tries > 0)
        if not out or alone or len(out[-1]) >= most or (out[-1] and size + f.size > BATCH_BYTES):
            out.append([])
            size = 0
        out[-1].append(f)
        size += f.size
    return out


class Heartbeat(Periodic):
    """On a connection of its own: renews the job's lease, adds the chunks embedded since last time, writes how
    far the reader of a file read in parts is, and reads whether the job was cancelled, every `every` seconds
    while the job runs (and once more at its end)."""

    def __init__(self, job: Job, every: float):
        super().__init__(every, f"lease {job.job}")
        self.job = job
        self.counted = 0
        self.read: tuple[str, int, int] | None = None

    def _run(self) -> None:
        job = self.job
        try:
            with job.connect() as conn:
                while True:
                    last = self.done.wait(self.every)
                    seen = job.embedded
                    cancel = jobs.add_embedded(conn, job.job, job.token, seen - self.counted)
                    self.counted = seen
                    if (reading := job.reading) is not None and reading != self.read:
                        jobs.file_rows(conn, job.job, job.token, *reading)
                        self.read = reading
                    if cancel is None:
                        job.lost.set()
                        return
                    if cancel:
                        job.cancelled.set()
                    if last:
                        return
        except RagvpsError as exc:  # the lease then runs out, and another worker may take the job
            log.warning("job %s: could not renew its lease: %s", job.job, exc)
