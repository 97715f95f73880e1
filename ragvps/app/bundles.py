"""Export, import, backup and restore-check of knowledge bases as bundles (docs/bundle.md).

A bundle is made from one snapshot of a knowledge base while the server serves and ingests; an import checks the
whole file first, loads it without embedding anything and swaps it in at the end in one transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ragvps.app.core import App
from ragvps.app.kbs import kept_settings, pinned
from ragvps.app.probe import make_probe
from ragvps.config import Settings
from ragvps.db import catalog
from ragvps.db.bundle_export import bundle_sql, export_kb
from ragvps.db.bundle_file import open_bundle
from ragvps.db.bundle_import import check_bundle, import_bundle
from ragvps.db.connections import SingleConnection
from ragvps.db.database import driver_errors
from ragvps.errors import BadBundleError, ConflictError, RagvpsError, UsageError

if TYPE_CHECKING:
    import psycopg

    from ragvps.db.bundle_export import ExportReport
    from ragvps.db.bundle_file import Bundle
    from ragvps.db.bundle_import import ImportReport

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]
SUFFIX = ".ragvps"
SCRATCH_PREFIX = "restore-check-"  # the scratch knowledge bases of restore-check
_DATED = re.compile(r"^(?P<kb>[a-z0-9][a-z0-9-]*)-(?P<at>\d{8}T\d{6}Z)\.ragvps$")


def _quiet(*_: object) -> None:
    pass


@contextmanager
def _raw(settings: Settings) -> Iterator[psycopg.Connection]:
    """A connection of this process's own (catalog migrated), driver errors translated."""
    connections = SingleConnection(settings)
    try:
        with driver_errors(settings), connections.connection() as conn:
            yield conn
    finally:
        connections.close()


def export(
    app: App,
    path: Path,
    *,
    with_cache: bool = False,
    probe: bool = False,
    progress: Progress = _quiet,
    warn: Warn = _quiet,
) -> ExportReport:
    """The App's knowledge base into a new bundle at `path`, from one snapshot."""
    if path.exists():
        raise ConflictError(f"{path} exists already: name a new file, or delete that one first")
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent} is not a folder: create it first")
    assert app.kb is not None
    extra: dict[str, object] = {}
    if probe:
        made = make_probe(app, warn)
        if made is not None:
            extra["probe"] = made
    with app.connection() as conn:
        return export_kb(conn, app.kb, path, with_cache=with_cache, extra=extra, progress=progress)


@contextmanager
def opened(path: Path, progress: Progress = _quiet) -> Iterator[Bundle]:
    """A bundle checked whole (names, manifest, version, checksums, vector sizes) before anything is written."""
    bundle = open_bundle(path, progress)
    try:
        check_bundle(bundle)
        yield bundle
    finally:
        bundle.close()


def bundle_settings(settings: Settings, bundle: Bundle) -> tuple[Settings, dict[str, object]]:
    """What the imported knowledge base keeps: the bundle's own settings, and the model and vector type of its
    active vector set when they are not among them (so it searches with the model its vectors came from,
    whatever this machine's defaults); and the target's settings with them over. Checked before any write."""
    kept = dict(bundle.manifest.kb_settings)
    active = bundle.manifest.active_set
    if active is not None and "embedder" not in kept and "embed_model" not in kept:
        kept |= kept_settings(active.model, None if "vector_type" in kept else active.vector_type, None)
    try:
        kept = pinned(kept)
        return settings.replace(**kept), kept
    except RagvpsError as exc:
        raise BadBundleError(
            f"{bundle.path}: its knowledge-base settings are refused here ({exc}); nothing was written"
        ) from None


def import_(
    settings: Settings,
    path: Path,
    name: str | None = None,
    *,
    replace: bool = False,
    progress: Progress = _quiet,
    warn: Warn = _quiet,
) -> ImportReport:
    """Load a bundle as a knowledge base (its own name unless `name`); nothing is embedded. A name that cannot be
    one is refused before the bundle is read (a large bundle's checksums take minutes)."""
    if name is not None:
        catalog.check_name(name)
    with opened(path, progress) as bundle:
        name = name or bundle.manifest.kb_name
        target, kept = bundle_settings(settings, bundle)
        with _raw(settings) as conn:
            return import_bundle(conn, bundle, name, target, kept, replace=replace, progress=progress, warn=warn)


# --- backups ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackupReport:
    kb: str
    path: Path
    bytes: int
    chunks: int
    pruned: tuple[Path, ...]


def backup_names(settings: Settings, kb: str | None, every: bool) -> list[str]:
    if kb is not None and every:
        raise UsageError("give --kb NAME or --all, not both")
    if not every:
        return [kb or settings.database.kb]
    with _raw(settings) as conn:  # not the scratch copies of restore-checks running meanwhile
        return [name for name in catalog.names(conn) if not name.startswith(SCRATCH_PREFIX)]


def backup(
    settings: Settings,
    folder: Path,
    names: Sequence[str],
    keep: int | None,
    progress: Progress = _quiet,
    warn: Warn = _quiet,
) -> list[BackupReport]:
    """A dated bundle per knowledge base in `folder` (with a probe when it has no gold questions), then the oldest
    beyond the `keep` newest of each deleted."""
    if keep is not None and keep < 1:
        raise UsageError("--keep must be at least 1")
    folder.mkdir(parents=True, exist_ok=True)
    reports = []
    for name in names:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = (folder / f"{name}-{stamp}{SUFFIX}").resolve()
        with App.open(settings.replace(kb=name)) as app:
            made = export(app, path, probe=True, progress=progress, warn=warn)
            with app.connection() as conn:
                conn.execute(
                    bundle_sql("backup_insert"),
                    {"kb": name, "file": str(path), "bytes": made.bytes, "chunks": made.chunks},
                )
        reports.append(BackupReport(name, path, made.bytes, made.chunks, tuple(prune(settings, folder, name, keep))))
    return reports


def prune(settings: Settings, folder: Path, name: str, keep: int | None) -> list[Path]:
    """Delete the oldest dated bundles of `name` in `folder` beyond the `keep` newest."""
    if keep is None:
        return []
    dated = sorted(
        (p for p in folder.iterdir() if (m := _DATED.match(p.name)) and m["kb"] == name),
        key=lambda p: p.name,
        reverse=True,
    )
    gone = dated[keep:]
    with _raw(settings) as conn:
        for path in gone:
            path.unlink(missing_ok=True)
            conn.execute(bundle_sql("forget_backup"), {"file": str(path.resolve())})
    return gone


@dataclass(frozen=True)
class LastBackup:
    file: str
    made_at: datetime
    checked_at: datetime | None
    bytes: int


def last_backups(app: App) -> tuple[LastBackup | None, LastBackup | None]:
    """The knowledge base's newest backup that restore-check proved, and its newest backup at all."""
    assert app.kb is not None
    found = []
    with app.connection() as conn:
        for query in ("last_good_backup", "last_backup"):
            row = conn.execute(bundle_sql(query), {"kb": app.kb.name}).fetchone()
            found.append(None if row is None else LastBackup(str(row[0]), row[1], row[2], int(row[3])))
    return found[0], found[1]
