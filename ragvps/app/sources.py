"""Connected sources (issue 46): a git repository, a web site or an S3 bucket recorded with the knowledge base
(migration 012) and kept in sync with it by `ragvps sync`. What the CLI (and the HTTP API) render is typed here.

    add_source(app, SourceSpec("git", "handbook", "https://git.example.com/handbook.git", {"branch": "main"}))
    reports = sync_sources(app, [], progress, warn)      # every source; each report says what changed
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ragvps.errors import ConflictError, NotFoundError, UsageError

if TYPE_CHECKING:
    from ragvps.app.core import App
    from ragvps.config import Settings
    from ragvps.ingest.remote.sync import SyncReport

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# The options each kind takes (beyond max_items and max_item_bytes, which every kind takes).
OPTIONS = {"git": ("branch", "include", "exclude", "link"), "web": ("max_pages", "max_depth"),
           "s3": ("prefix", "endpoint", "region")}


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
        raise UsageError(f"web source {spec.name}: {location!r} is not an http(s) URL; give the start page or the "
                         "sitemap's URL")
    if spec.kind == "s3" and not BUCKET.fullmatch(location):
        raise UsageError(f"s3 source {spec.name}: {location!r} is not a bucket name (3-63 of a-z, 0-9, . and -)")
    if spec.kind == "git" and (not location or location.startswith(("-", "ext::"))):
        raise UsageError(f"git source {spec.name}: give the repository's URL (http, https, ssh, git) or its path")
    allowed = {*OPTIONS[spec.kind], "max_items", "max_item_bytes"}
    unknown = sorted(k for k, v in spec.options.items() if v not in (None, [], ()) and k not in allowed)
    if unknown:
        raise UsageError(f"{spec.kind} source {spec.name}: {', '.join(unknown)} do not apply to a {spec.kind} "
                         f"source (it takes {', '.join(sorted(allowed))})")
    return {k: v for k, v in spec.options.items() if v not in (None, [], ())}


def add_source(app: App, spec: SourceSpec) -> SourceInfo:
    """Record a source with the knowledge base; `ragvps sync` reads it."""
    from ragvps.db import sources

    options = check(spec)
    with app.connection() as conn:
        if not sources.add(conn, spec.name, spec.kind, spec.location.strip(), options):
            raise ConflictError(f"a source named {spec.name} exists in knowledge base {app.kb_name}: choose another "
                                f"name, or `ragvps source remove {spec.name}` first")
    return next(s for s in list_sources(app) if s.name == spec.name)


def list_sources(app: App) -> list[SourceInfo]:
    from ragvps.db import sources

    with app.connection() as conn:
        rows = sources.listed(conn)
    return [SourceInfo(r.name, r.kind, r.location, r.config, r.items, r.state, r.synced_at, r.seconds, r.error,
                       r.cursor) for r in rows]


def remove_source(app: App, name: str) -> RemovedSource:
    """Forget a source: its documents, its mirror and its record."""
    from ragvps.db import sources
    from ragvps.ingest.remote.sync import forget

    with app.connection() as conn:
        if name not in {r.name for r in sources.listed(conn)}:
            raise NotFoundError(f"no source named {name} in knowledge base {app.kb_name} (`ragvps source list`)")
        documents = forget(conn, app.settings, name)
        sources.remove(conn, name)
    return RemovedSource(name, documents)


def sync_sources(app: App, names: Sequence[str], progress: Progress, warn: Warn) -> list[SyncReport]:
    """Sync the named sources (all when none is named), one after another; each one's failure is in its report."""
    from ragvps.db import sources, store
    from ragvps.embed.registry import make_lanes
    from ragvps.generate import cache as answer_cache
    from ragvps.ingest.remote.sync import sync

    with app.connection() as conn:
        rows = sources.listed(conn)
        missing = sorted(set(names) - {r.name for r in rows})
        if missing:
            raise NotFoundError(f"no source named {', '.join(missing)} in knowledge base {app.kb_name} "
                                "(`ragvps source list`)")
        store.check_model(store.active_set(conn), app.spec, app.settings.index.vector_type, "sync")
        reports = []
        for row in rows:
            if names and row.name not in names:
                continue
            lanes = lambda: make_lanes(app.settings, app.spec, lambda: app.embedder, progress, warn)  # noqa: E731
            reports.append(sync(conn, app.settings, row, app.spec, lanes, progress, warn))
            reports[-1].kb = app.kb_name
        if any(r.documents_stored or r.documents_deleted for r in reports):
            answer_cache.prune(conn)
    return reports


def sync_every_kb(settings: Settings, progress: Progress, warn: Warn) -> list[SyncReport]:
    """Every knowledge base's sources synced (the nightly job's `ragvps sync --all`)."""
    from ragvps.app.bundles import backup_names
    from ragvps.app.core import App

    reports = []
    for name in backup_names(settings, None, True):
        with App.open(settings.replace(kb=name)) as app:
            reports += sync_sources(app, [], progress, warn)
    return reports
