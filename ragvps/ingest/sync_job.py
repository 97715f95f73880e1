"""A sync of a connected source run as a job (migration 013), by whoever claimed it: `ragvps worker --jobs`, the
server's runner, or `ragvps sync` in its own process. As for an upload job, a second connection renews the lease,
writes the items read so far and reads the cancel flag. A cancel (or the worker stopping) is acted on between
items, and between the ingest's batches: the sync ends `cancelled` and keeps the items of the last complete sync,
so the next one ends where an uninterrupted sync would. A worker that stops gives the job back for the next."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager

import psycopg

from ragvps.config import Settings
from ragvps.db import jobs, sources, sync_jobs
from ragvps.embed.hosts import Lanes
from ragvps.errors import RagvpsError
from ragvps.ingest.cancel import Cancelled, stops_at
from ragvps.ingest.periodic import Periodic
from ragvps.ingest.remote import Progress, Warn
from ragvps.ingest.remote.sync import SyncReport, sync
from ragvps.records import ModelSpec

log = logging.getLogger(__name__)
Connect = Callable[[], AbstractContextManager[psycopg.Connection]]
Settled = Callable[[psycopg.Connection], object]  # after a sync that changed documents (the answer cache's prune)
MAX_DEATHS = 2  # workers a sync may stop before it is marked failed
JOB_STATE = {"ok": "done", "partial": "done", "failed": "failed", "cancelled": "cancelled"}


class SyncJob:
    """One claimed sync job, run to its end (or, the worker stopping, given back)."""

    def __init__(
        self,
        connect: Connect,
        conn: psycopg.Connection,
        settings: Settings,
        spec: ModelSpec,
        lanes: Callable[[], Lanes],
        job: str,
        token: str,
        source: str,
    ):
        self.connect, self.conn, self.settings, self.spec, self.lanes = connect, conn, settings, spec, lanes
        self.job, self.token, self.source = job, token, source
        self.cancelled = threading.Event()
        self.lost = threading.Event()  # the claim is no longer ours (the lease ran out, another took it)
        self.read: int = 0  # items read so far, of `total` found changed (the connector's progress)
        self.total: int | None = None

    def run(
        self, stop: threading.Event, progress: Progress, warn: Warn, settled: Settled | None = None
    ) -> SyncReport | None:
        """The sync's report, the job ended with it; None when the job was given back or taken over."""

        row = next((r for r in sources.listed(self.conn) if r.name == self.source), None)
        if row is None:  # removed since: its jobs went with it (cascade)
            return None
        lease = float(self.settings.embed.worker_lease)
        if (died := sync_jobs.deaths(self.conn, self.job)) >= MAX_DEATHS:
            return self._poisoned(row, died)
        with SyncBeat(self, max(0.2, min(1.0, lease / 3))):
            report = sync(self.conn, self.settings, row, self.spec, self.lanes, self._progress(stop, progress), warn)
        report.kb, report.job = self.settings.database.kb, self.job
        if self.lost.is_set():
            return None
        if report.state == "cancelled" and not self.cancelled.is_set():  # the worker stops: the next one reruns it
            jobs.release(self.conn, self.job, self.token)
            return None
        if settled is not None and (report.documents_stored or report.documents_deleted):
            settled(self.conn)
        state = JOB_STATE[report.state]
        sync_jobs.end(
            self.conn,
            self.job,
            self.token,
            state,
            report.error if state == "failed" else None,
            (report.read, report.chunks_embedded),
            jsonable(report),
            report.failures,
        )
        return report

    def _poisoned(self, row: sources.SourceRow, died: int) -> SyncReport:
        """End a sync that stopped its workers MAX_DEATHS times: failed, with why, so that the queue moves on."""
        error = (
            f"source {row.name}: the sync stopped the worker that ran it {died} times (killed, or out of memory) "
            "before it could end; it is marked failed so that the other jobs run. Look at what the source serves, "
            "then sync it again"
        )
        report = SyncReport(row.name, row.kind, self.settings.database.kb, "failed", error, job=self.job)
        sources.finish(self.conn, row.name, None, row.cursor, "failed", error, 0.0)
        sync_jobs.end(self.conn, self.job, self.token, "failed", error, (0, 0), jsonable(report), [])
        log.warning("job %s: %s", self.job, error)
        return report

    def _progress(self, stop: threading.Event, outer: Progress) -> Progress:
        def progress(stage: str, done: int, total: int) -> None:
            if (self.cancelled.is_set() or self.lost.is_set() or stop.is_set()) and stops_at(stage):
                raise Cancelled
            if stage == "tick":  # a response streaming: only a cancel's point
                return
            if stage == "fetch":
                self.read, self.total = done, total
            outer(stage, done, total)

        return progress


def jsonable(report: SyncReport) -> dict[str, object]:
    """The report as JSON values (not dataclasses.asdict, which rebuilds a Counter from its pairs)."""
    data = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    return data | {
        "skipped": dict(report.skipped),
        "problems": list(report.problems),
        "failures": [list(f) for f in report.failures],
    }


def report_of(data: dict[str, object]) -> SyncReport:
    """A report as the job kept it (JSON) as a SyncReport again."""

    names = {f.name for f in dataclasses.fields(SyncReport)}
    report = SyncReport(**{k: v for k, v in data.items() if k in names})  # type: ignore[arg-type]
    report.skipped = Counter(report.skipped)
    report.failures = [(str(a), str(b)) for a, b in report.failures]
    return report


class SyncBeat(Periodic):
    """On a connection of its own, every `every` seconds while the sync runs (and once at its end): the lease
    renewed with the items read so far, and whether the job was cancelled (or is no longer ours)."""

    def __init__(self, job: SyncJob, every: float):
        super().__init__(every, f"lease {job.job}")
        self.job = job

    def _run(self) -> None:
        job = self.job
        try:
            with job.connect() as conn:
                while True:
                    last = self.done.wait(self.every)
                    cancel = sync_jobs.progress(conn, job.job, job.token, job.read, job.total)
                    if cancel is None:
                        job.lost.set()
                        return
                    if cancel:
                        job.cancelled.set()
                    if last:
                        return
        except RagvpsError as exc:  # the lease then runs out, and another worker may take the job
            log.warning("job %s: could not renew its lease: %s", job.job, exc)
