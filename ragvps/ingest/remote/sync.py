"""One sync of a connected source: fetch what changed into its mirror, record its items, ingest the mirror (only
when something changed, or the last sync did not end well), and keep the sync's outcome with the source."""

from __future__ import annotations

import importlib
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from ragvps.config import Settings
from ragvps.db import sources, store
from ragvps.embed.hosts import Lanes
from ragvps.errors import NotFoundError, RagvpsError
from ragvps.ingest import links
from ragvps.ingest.cancel import Cancelled
from ragvps.ingest.chunking import IngestReport
from ragvps.ingest.pipeline import ingest
from ragvps.ingest.remote import Fetch, Fetched, Progress, Warn, secret, sigv4
from ragvps.reach import Reach
from ragvps.records import ModelSpec

log = logging.getLogger(__name__)
CONNECTORS = {"git": "git", "web": "web", "s3": "s3"}  # kind -> module of ragvps.ingest.remote with fetch()


@dataclass
class SyncReport:
    name: str
    kind: str
    kb: str = ""  # the knowledge base (the app layer names it)
    state: str = "ok"  # ok, partial (some items skipped), failed, cancelled (stopped between items)
    error: str | None = None
    read: int = 0
    unchanged: int = 0
    deleted: int = 0
    items: int = 0
    seconds: float = 0.0
    ingested: bool = False  # False: nothing changed, the mirror was not ingested again
    documents_stored: int = 0
    documents_deleted: int = 0
    chunks_embedded: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (item's URL or path, why): the job's failures
    job: str = ""  # the job it ran as


def mirror_dir(settings: Settings, name: str) -> Path:
    return settings.database.kb_dir / "sources" / name


def sync(
    conn: psycopg.Connection,
    settings: Settings,
    row: sources.SourceRow,
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    progress: Progress,
    warn: Warn,
) -> SyncReport:
    """Bring the knowledge base in line with one source; a failure is the source's, kept with it, not raised.
    A `progress` that raises Cancelled (between items, or between the ingest's batches) ends it `cancelled`:
    the items of the last complete sync are kept, and the next sync ingests the mirror again whatever it reads
    (so it ends where an uninterrupted sync would: nothing stored twice, nothing left of what is gone)."""

    started = time.monotonic()
    report = SyncReport(row.name, row.kind)
    mirror = mirror_dir(settings, row.name)
    fetched: Fetched | None = None
    try:
        fetched = _fetch(conn, settings, row, mirror, progress, warn)
        links.write_links(mirror, {item.rel: item.url for item in fetched.items.values()})
        report.read, report.unchanged, report.deleted = fetched.read, fetched.unchanged, fetched.deleted
        report.items, report.skipped, report.problems = len(fetched.items), fetched.skipped, fetched.problems
        report.failures = list(fetched.failures)
        if fetched.read or fetched.deleted or row.state in ("new", "failed", "cancelled"):
            report.ingested = True
            _ingest(conn, settings, mirror, spec, lanes, progress, warn, report)
        report.state = "partial" if fetched.problems else "ok"
        report.error = "; ".join(fetched.problems[:3]) or None
    except (RagvpsError, OSError) as exc:  # the source's failure (or the mirror's disk): kept with the source
        report.state, report.error = "failed", str(exc)
        warn(str(exc) if f"source {row.name}:" in str(exc) else f"source {row.name}: {exc}")  # the name once
    except Cancelled:
        conn.rollback()
        report.state, report.error = "cancelled", "cancelled before its end; the next sync completes it"
    except Exception as exc:  # a defect met on something the source served: this sync fails, the worker goes on
        conn.rollback()
        report.state = "failed"
        report.error = f"source {row.name}: the sync stopped on an error ({type(exc).__name__}: {str(exc)[:200]})"
        warn(report.error)
        log.exception("source %s: the sync stopped on an error", row.name)
    report.seconds = time.monotonic() - started
    _scrub(report, mirror, settings.database.data_dir)
    keep = fetched.items if fetched is not None and report.state not in ("failed", "cancelled") else None
    cursor = fetched.cursor if keep is not None and fetched is not None else row.cursor
    sources.finish(conn, row.name, keep, cursor, report.state, report.error, report.seconds)
    return report


def _scrub(report: SyncReport, *paths: Path) -> None:
    """No server path in what read keys see of the sync (its error, problems and failed items)."""
    report.error = secret.scrub(report.error, *paths) if report.error else report.error
    report.problems = [secret.scrub(p, *paths) for p in report.problems]
    report.failures = [(secret.scrub(i, *paths), secret.scrub(m, *paths)) for i, m in report.failures]


def _secret(settings: Settings, row: sources.SourceRow, given: str) -> str:
    """The credential a source uses: its own (given with it, kept encrypted), or for S3 the server's named
    profile the source names (when the table lets this knowledge base use it), or the server's ambient AWS
    credentials (only where source_ambient_credentials names the source); else none (unsigned requests)."""
    if given or row.kind != "s3":
        return given
    kb = settings.database.kb
    profile = str(row.config.get("profile") or "")
    if profile:
        return sigv4.encoded(sigv4.profile(settings.source.credentials_file, profile, kb))
    return sigv4.encoded(sigv4.credentials()) if _ambient(settings, row) else ""


def _ambient(settings: Settings, row: sources.SourceRow) -> bool:
    """Whether source_ambient_credentials lets this source use the server's own credentials."""
    kb = settings.database.kb
    return bool({f"{kb}/{row.name}", f"{kb}/*", "*"} & set(settings.source.ambient_credentials))


def _fetch(
    conn: psycopg.Connection, settings: Settings, row: sources.SourceRow, mirror: Path, progress: Progress, warn: Warn
) -> Fetched:
    module = importlib.import_module(f"ragvps.ingest.remote.{CONNECTORS[row.kind]}")
    mirror.mkdir(parents=True, exist_ok=True)
    config = row.config
    location, inline = secret.split(row.location)  # a record from before credentials were kept apart
    sealed = str(config.get("credential") or "")
    request = Fetch(
        row.name,
        location,
        config,
        mirror,
        sources.items(conn, row.name),
        row.cursor,
        progress,
        warn,
        max_items=int(str(config.get("max_items") or 10_000)),
        max_item_bytes=int(str(config.get("max_item_bytes") or 64 << 20)),
        reach=Reach.of(settings.source.allow_hosts),
        secret=_secret(settings, row, secret.unseal(settings.database.data_dir, sealed) if sealed else inline),
        ambient=_ambient(settings, row),
    )
    fetched: Fetched = module.fetch(request)
    return fetched


def _ingest(
    conn: psycopg.Connection,
    settings: Settings,
    mirror: Path,
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    progress: Progress,
    warn: Warn,
    report: SyncReport,
) -> None:
    try:
        done: IngestReport = ingest(conn, settings, mirror, spec, lanes, progress, warn)
    except NotFoundError:  # nothing readable in the source (yet): not an error of the sync
        return
    report.documents_stored, report.documents_deleted, report.chunks_embedded = done.stored, done.deleted, done.embedded
    report.skipped.update(done.skipped)
    urls = links.links(mirror.resolve())
    for message in done.warnings:  # a mirrored file that could not be read, named by its item's URL
        rel = message.split(": ", 1)[0]
        if rel in urls:
            report.failures.append((urls[rel], message))


def forget(conn: psycopg.Connection, settings: Settings, name: str) -> int:
    """Remove a source's documents, mirror and copy; the number of documents removed."""
    mirror = mirror_dir(settings, name)
    root = str(mirror.resolve())
    gone = list(store.stored_documents(conn, root))
    with store.write_lock(conn):
        store.delete_documents(conn, root, gone)
    shutil.rmtree(mirror, ignore_errors=True)
    shutil.rmtree(mirror.with_name(name + ".git"), ignore_errors=True)
    return len(gone)
