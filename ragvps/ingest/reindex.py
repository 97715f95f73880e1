"""Reindex: switch embedding models without re-reading a source, re-sync every folder, rebuild the index."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ragvps.config import Settings
from ragvps.db import index, store
from ragvps.embed.hosts import Lanes
from ragvps.errors import InputTooLongError
from ragvps.ingest.chunking import IngestReport, Progress, Warn
from ragvps.ingest.embedding import embed_stage, too_long, too_long_message
from ragvps.ingest.pipeline import STORE_BATCH_CHUNKS, ingest
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import ModelSpec

log = logging.getLogger(__name__)


@dataclass
class SwitchReport:
    old_model: str
    new_model: str
    chunks: int = 0  # stored chunks, re-embedded as they are
    embedded: int = 0  # of which not in the vector cache
    index_built: bool = False
    pinned_chunker: str | None = None


@dataclass
class ReindexReport:
    switch: SwitchReport | None
    roots: dict[str, IngestReport]


def reindex(
    conn: psycopg.Connection,
    settings: Settings,
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    progress: Progress,
    warn: Warn,
) -> ReindexReport:
    """Switch to the configured model if it differs from the index's, re-sync every folder ingested before,
    then rebuild the vector index in place without blocking reads."""
    switch = None
    active = store.active_set(conn)
    if active is not None and (active.identity, active.vector_type) != (spec.identity, settings.index.vector_type):
        with store.write_lock(conn):
            switch = switch_model(conn, settings, spec, active, lanes, progress)
    roots = store.ingested_roots(conn)
    conn.commit()
    reports = {}
    for root in roots:
        if root.startswith(store.FOREIGN_ROOT):
            where = root.removeprefix(store.FOREIGN_ROOT)
            warn(
                f"documents imported from a bundle under {where} are kept as they are, never read from there "
                f"(the bundle named that folder, not you): `ragvps ingest {where}` re-syncs them from it"
            )
            continue
        if not Path(root).exists():
            warn(f"{root} no longer exists; its documents are kept (delete them by ingesting an empty folder)")
            continue
        reports[root] = ingest(conn, settings, Path(root), spec, lanes, progress, warn)
    if switch is None:  # a switch has just built its index
        with store.write_lock(conn):
            eset = store.active_set(conn)
            if eset is not None:
                index.rebuild_index(conn, eset, settings, progress, warn)
    return ReindexReport(switch, reports)


def switch_model(
    conn: psycopg.Connection,
    settings: Settings,
    spec: ModelSpec,
    old: store.EmbeddingSet,
    lanes: Callable[[], Lanes],
    progress: Progress,
) -> SwitchReport:
    """Re-embed the stored chunks as they are into a new embedding set, index it, then make it the active one.

    No source is read and nothing is re-chunked; queries use the old set until the final transaction.
    """
    report = SwitchReport(old.model, spec.name)
    rows = store.chunks_with_ids(conn)
    conn.commit()
    chunks = [c for _, c in rows]
    report.chunks = len(chunks)
    offenders = too_long(chunks, spec)
    if offenders:
        raise InputTooLongError(
            too_long_message(
                offenders,
                len(chunks),
                spec,
                f"they were cut for model {old.model}; re-ingest into a fresh data directory and database with "
                f"{spec.name} configured, or pick a model that takes longer input",
            )
        )
    cache = VectorCache(settings.database.kb_dir, spec.identity, spec.dims)
    report.embedded = embed_stage(cache, chunks, spec, lanes, settings.embed.batch_size, progress).embedded
    eset = store.ensure_set(conn, spec, settings.index.vector_type, activate=False)
    conn.commit()
    with conn.transaction():  # a leftover set from an interrupted switch is refilled from scratch
        store.reset_vectors(conn, eset)
        for lo in range(0, len(rows), STORE_BATCH_CHUNKS):
            part = chunks[lo : lo + STORE_BATCH_CHUNKS]
            store.write_vectors(
                conn,
                eset,
                [r[0] for r in rows[lo : lo + STORE_BATCH_CHUNKS]],
                cache.get([c.content_hash for c in part]),
            )
            progress("store", lo + len(part), len(chunks))
    report.index_built = index.ensure_index(conn, eset, settings, progress)
    keys = store.document_chunkers(conn)
    report.pinned_chunker = keys[0][0] if keys and store.chunker_settings(conn, keys[0][0]) else None
    conn.commit()
    with conn.transaction():
        store.activate_set(conn, eset)
        store.set_chunker_pin(conn, eset, report.pinned_chunker)
        for dropped in store.drop_other_sets(conn, eset):
            log.info("dropped embedding set %s (%s)", dropped.table_name, dropped.model)
    return report
