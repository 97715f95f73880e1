"""Connected sources (issue 46): a git repository, a web site or an S3 bucket recorded with the knowledge base
(migration 012) and kept in sync with it. A sync is a job on the upload jobs' lease queue (migration 013): the API
queues it for a worker (`queue_sync`), `ragvps sync` makes it and runs it in its own process (`sync_sources`);
either way one sync a source runs at a time, and `GET /jobs/{id}` shows it. What the CLI and the API render is
typed here.

    add_source(app, SourceSpec("git", "handbook", "https://git.example.com/handbook.git", {"branch": "main"}))
    queued = queue_sync(app, "handbook")                 # QueuedSync: the job a worker runs
    reports = sync_sources(app, [], progress, warn)      # every source, here; each report says what changed
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ragvps.app.bundles import backup_names
from ragvps.app.core import App
from ragvps.app.job_ids import new_job_id
from ragvps.db import jobs, sources, store, sync_jobs
from ragvps.db.connections import SingleConnection
from ragvps.embed.registry import make_lanes
from ragvps.errors import ConflictError, DatabaseError, NotFoundError, UsageError
from ragvps.generate import cache as answer_cache
from ragvps.ingest.remote import secret

if TYPE_CHECKING:
    import psycopg

    from ragvps.app.core import App
    from ragvps.config import Settings
    from ragvps.db.sources import SourceRow
    from ragvps.ingest.remote.sync import SyncReport as SyncReport  # re-exported: the CLI reports it

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
S3_KEYS = ("access_key_id", "secret_access_key", "session_token")  # an S3 source's own credential: kept sealed
# The options each kind takes (beyond max_items and max_item_bytes, which every kind takes).
OPTIONS = {
    "git": ("branch", "include", "exclude", "link"),
    "web": ("max_pages", "max_depth"),
    "s3": ("prefix", "endpoint", "region", "profile", *S3_KEYS),
}


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # git, web, s3
    name: str
    location: str  # a repository's URL or path; a start page's or a sitemap's URL; a bucket
    options: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceInfo:
    name: str
    kind: str
    location: str
    options: Mapping[str, object]
    items: int
    state: str  # new (never synced), ok, partial (some items skipped), failed
    synced_at: datetime | None
    seconds: float | None
    error: str | None
    cursor: str | None  # git: the commit last synced


@dataclass(frozen=True)
class QueuedSync:
    job: str
    source: str
    created: bool  # False: a sync of this source was open already, and this is that job


KEPT = "(kept encrypted, never shown)"  # what a listing shows of a source's credential
REMOVE_WAIT_S = 30.0  # how long removing a source waits for its cancelled sync to stop
POLL_S = 0.5  # how often `ragvps sync` looks whether another worker's sync of the source ended


@dataclass(frozen=True)
class RemovedSource:
    name: str
    documents: int


def check(spec: SourceSpec) -> dict[str, object]:
    """The spec's options as stored, or a UsageError saying what to change."""
    if spec.kind not in OPTIONS:
        raise UsageError(f"unknown source kind {spec.kind!r}: use one of {', '.join(OPTIONS)}")
    if not NAME.fullmatch(spec.name):
        raise UsageError(f"source name {spec.name!r}: use lower-case letters, digits, - and _ (at most 63)")
    location = spec.location.strip()
    if spec.kind == "web" and not re.match(r"https?://[^/\s]+", location):
        raise UsageError(
            f"web source {spec.name}: {location!r} is not an http(s) URL; give the start page or the sitemap's URL"
        )
    if spec.kind == "s3" and not BUCKET.fullmatch(location):
        raise UsageError(f"s3 source {spec.name}: {location!r} is not a bucket name (3-63 of a-z, 0-9, . and -)")
    if spec.kind == "git" and (not location or location.startswith(("-", "ext::"))):
        raise UsageError(f"git source {spec.name}: give the repository's URL (http, https, ssh, git) or its path")
    endpoint = str(spec.options.get("endpoint") or "")
    if endpoint and (secret.split(endpoint)[1] or "@" in urlsplit(endpoint).netloc):
        raise UsageError(
            f"s3 source {spec.name}: the endpoint {secret.redact(endpoint)!r} carries credentials, which every "
            "reader would see in its objects' links: give access_key_id and secret_access_key instead"
        )
    if endpoint:
        secret.check_query(endpoint, f"s3 source {spec.name}'s endpoint")
    template = spec.options.get("link")
    if template:
        try:
            str(template).format(commit="c", path="p")
        except (KeyError, IndexError, ValueError, AttributeError):
            raise UsageError(
                f"git source {spec.name}: link {template!r} may use only {{commit}} and {{path}} "
                "(write a literal brace as {{ or }})"
            ) from None
    allowed = {*OPTIONS[spec.kind], "max_items", "max_item_bytes"}
    unknown = sorted(k for k, v in spec.options.items() if v not in (None, [], ()) and k not in allowed)
    if unknown:
        raise UsageError(
            f"{spec.kind} source {spec.name}: {', '.join(unknown)} do not apply to a {spec.kind} "
            f"source (it takes {', '.join(sorted(allowed))})"
        )
    return {k: v for k, v in spec.options.items() if v not in (None, [], ())}


def add_source(app: App, spec: SourceSpec) -> SourceInfo:
    """Record a source with the knowledge base; `ragvps sync` reads it."""

    options = check(spec)
    location, credential = secret.split(spec.location.strip())
    if spec.kind in ("git", "web"):
        secret.check_query(location, f"{spec.kind} source {spec.name}")
    given = [str(options.pop(k, "") or "") for k in S3_KEYS]
    if any(given):
        if not (given[0] and given[1]):
            raise UsageError(f"s3 source {spec.name}: give access_key_id and secret_access_key together")
        credential = "\n".join(given)
    if credential:
        options["credential"] = secret.seal(app.settings.database.data_dir, credential)
    with app.connection() as conn:
        if not sources.add(conn, spec.name, spec.kind, location, options):
            raise ConflictError(
                f"a source named {spec.name} exists in knowledge base {app.kb_name}: choose another "
                f"name, or `ragvps source remove {spec.name}` first"
            )
    return next(s for s in list_sources(app) if s.name == spec.name)


def list_sources(app: App) -> list[SourceInfo]:

    with app.connection() as conn:
        rows = sources.listed(conn)
    return [
        SourceInfo(
            r.name,
            r.kind,
            secret.redact(r.location),
            {k: KEPT if k == "credential" else v for k, v in r.config.items()},
            r.items,
            r.state,
            r.synced_at,
            r.seconds,
            r.error,
            r.cursor,
        )
        for r in rows
    ]


def remove_source(app: App, name: str) -> RemovedSource:
    """Forget a source: its documents, its mirror and its record (and its sync jobs), unless a sync runs."""

    with app.connection() as conn:
        if name not in {r.name for r in sources.listed(conn)}:
            raise NotFoundError(f"no source named {name} in knowledge base {app.kb_name} (`ragvps source list`)")
        running = sync_jobs.running(conn, name)
        if running is not None:  # cancelled, and waited for: a cancel lands within seconds (READ_S)
            jobs.cancel(conn, running)
            deadline = time.monotonic() + REMOVE_WAIT_S
            while (running := sync_jobs.running(conn, name)) is not None and time.monotonic() < deadline:
                time.sleep(POLL_S / 5)
        if running is not None:
            raise ConflictError(
                f"source {name} is being synced (job {running}) and did not stop within {REMOVE_WAIT_S:.0f} s of "
                f"its cancel: wait for it to end (GET /jobs/{running}), then remove the source"
            )
        from ragvps.ingest.remote.sync import forget  # lazy: as run_sync's, below

        documents = forget(conn, app.settings, name)
        sources.remove(conn, name)
    return RemovedSource(name, documents)


def queue_sync(app: App, name: str) -> QueuedSync:
    """A sync of the source queued for a worker (or the source's sync that is open already)."""

    made = new_job_id(app)
    with app.connection() as conn:
        _rows(conn, app, [name])
        job, _ = sync_jobs.create(conn, made, name)
    return QueuedSync(job, name, job == made)


def _rows(conn: psycopg.Connection, app: App, names: Sequence[str]) -> list[SourceRow]:

    rows = sources.listed(conn)
    missing = sorted(set(names) - {r.name for r in rows})
    if missing:
        raise NotFoundError(
            f"no source named {', '.join(missing)} in knowledge base {app.kb_name} (`ragvps source list`)"
        )
    return [r for r in rows if not names or r.name in names]


def sync_sources(app: App, names: Sequence[str], progress: Progress, warn: Warn) -> list[SyncReport]:
    """Sync the named sources (all when none is named), one after another, each as a job run here (or, when
    a worker runs one already, that one waited for); each one's failure is in its report."""

    with app.connection() as conn:
        rows = _rows(conn, app, names)
        store.check_model(store.active_set(conn), app.spec, app.settings.index.vector_type, "sync")
    return [run_sync(app, row.name, progress, warn) for row in rows]


def run_sync(app: App, name: str, progress: Progress, warn: Warn) -> SyncReport:
    """Make the source's sync job and run it in this process, with a second connection for its lease; when
    another worker holds the source's open sync, wait for it (and take it over if its lease runs out)."""

    # lazy: the sync and ingest machinery loads for a sync or a removal; `ragvps stats` only lists sources
    from ragvps.ingest.remote.sync import SyncReport
    from ragvps.ingest.sync_job import SyncJob
    from ragvps.ingest.worker import default_name

    worker, lease = default_name(), float(app.settings.embed.worker_lease)
    lanes = lambda: make_lanes(app.settings, app.spec, lambda: app.embedder, progress, warn)  # noqa: E731
    with app.connection() as conn:
        job, token = sync_jobs.create(conn, new_job_id(app), name, worker)
        if token is None:
            warn(f"source {name}: a sync of it is queued or running already (job {job}); waiting for it")
        while token is None and (token := sync_jobs.claim(conn, job, worker, lease)) is None:
            if (ended := _ended(conn, job, name)) is not None:
                return ended
            time.sleep(POLL_S)
        second = SingleConnection(app.settings)
        try:
            report = SyncJob(second.connection, conn, app.settings, app.spec, lanes, job, token, name).run(
                threading.Event(), progress, warn, answer_cache.prune
            )
        except BaseException:  # Ctrl-C: the job is given back at once, not held until its lease runs out
            _give_back(conn, job, token)
            raise
        finally:
            second.close()
    if report is None:
        return SyncReport(
            name,
            "",
            app.kb_name,
            "failed",
            f"this process lost job {job}'s lease (it ran out) and "
            f"another worker took the sync over: GET /jobs/{job} shows how it ends",
            job=job,
        )
    report.job = job
    return report


def _ended(conn: psycopg.Connection, job: str, name: str) -> SyncReport | None:
    """The report of the source's sync that another worker ran, once it ended; None while it runs."""

    from ragvps.ingest.remote.sync import SyncReport  # lazy: as run_sync's, above
    from ragvps.ingest.sync_job import report_of

    row = sync_jobs.read(conn, job)
    if row is not None and row.state in ("queued", "running"):
        return None
    if row is not None and row.report is not None:
        return report_of(row.report)
    why = f"job {job} was {row.state} before it ran" if row else f"job {job} is gone (its source was removed)"
    return SyncReport(name, "", state="failed" if row is None else row.state, error=why, job=job)


def _give_back(conn: psycopg.Connection, job: str, token: str) -> None:

    with contextlib.suppress(DatabaseError):  # else its lease runs out instead
        jobs.release(conn, job, token)


def sync_every_kb(settings: Settings, progress: Progress, warn: Warn) -> list[SyncReport]:
    """Every knowledge base's sources synced (the nightly job's `ragvps sync --all`)."""

    reports: list[SyncReport] = []
    for name in backup_names(settings, None, True):
        with App.open(settings.replace(kb=name)) as app:
            reports += sync_sources(app, [], progress, warn)
    return reports
