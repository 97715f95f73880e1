"""The staged pipeline: sources -> chunk -> embed -> store, each stage reading the last one's files."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from ragvps.config import Settings
from ragvps.db import index, queue, store
from ragvps.embed.hosts import Lanes
from ragvps.ingest import links, parts, sources
from ragvps.ingest.artifacts import ChunkFile
from ragvps.ingest.chunk import ChunkerConfig
from ragvps.ingest.chunking import (
    IngestReport,
    IngestRun,
    Progress,
    Warn,
    chunk_stage,
    chunker_config,
    nothing_readable,
)
from ragvps.ingest.embedding import EmbedOutcome, embed_stage
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import Chunk, Document, ModelSpec

log = logging.getLogger(__name__)

STORE_BATCH_CHUNKS = 2000  # chunks written per transaction


def store_stage(
    conn: psycopg.Connection,
    run: IngestRun,
    eset: store.EmbeddingSet,
    files: Sequence[ChunkFile],
    unreadable: set[str],
    cache: VectorCache,
    only: set[str] | None = None,
) -> None:
    """Write new and changed documents; delete those whose source file is gone (of the sources in `only`,
    when given: a few files of a folder were ingested, not the folder)."""
    settings, report, progress, root = run.settings, run.report, run.progress, str(run.root)
    stored = {d: s for d, s in store.stored_documents(conn, root).items() if only is None or s.source in only}
    key = run.config.key()
    changed: list[tuple[Document, list[Chunk]]] = []
    seen: set[str] = set()
    for f in files:
        by_doc: dict[str, list[Chunk]] = {}
        for c in f.chunks:
            by_doc.setdefault(c.doc_id, []).append(c)
        for doc in f.documents:
            seen.add(doc.doc_id)
            old = stored.get(doc.doc_id)
            if old and old.content_hash == doc.content_hash and old.chunker == key:
                report.unchanged += 1
            else:
                changed.append((doc, by_doc.get(doc.doc_id, [])))
    total = sum(len(chunks) for _, chunks in changed)
    done = 0
    for batch in batches(changed, STORE_BATCH_CHUNKS):
        defer = settings.embed.defer_embedding
        rows = [(doc, chunks, cache.of_chunks(chunks, defer)) for doc, chunks in batch]
        store.replace_documents(conn, eset, root, key, settings.search.language, rows, settings.search.detect_language)
        report.stored += len(batch)
        done += sum(len(chunks) for _, chunks in batch)
        progress("store", done, total)
    # A file that could not be read this time keeps its documents: nothing is lost to a transient error.
    gone = [d for d, old in stored.items() if d not in seen and old.source not in unreadable]
    store.delete_documents(conn, root, gone)
    report.deleted = len(gone)


Changed = list[tuple[Document, list[Chunk]]]


def batches(items: Changed, max_chunks: int) -> Iterator[Changed]:
    """Documents grouped so that each group holds at most `max_chunks` chunks (or one larger document)."""
    batch: Changed = []
    size = 0
    for item in items:
        if batch and size + len(item[1]) > max_chunks:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += len(item[1])
    if batch:
        yield batch


def ingest(
    conn: psycopg.Connection,
    settings: Settings,
    path: Path,
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    progress: Progress,
    warn: Warn,
) -> IngestReport:
    """Bring the database in line with the folder at `path`, doing only the work that changed.

    With defer_embedding, chunks without a cached vector are stored without one and queued for
    `ragvps worker`; the keyword leg finds them at once, the vector leg once a worker has embedded them.
    """
    report = IngestReport()

    def record(message: str, show: Warn = warn) -> None:
        report.warnings.append(message)
        show(message)

    warn = record

    scan = sources.scan(path, settings.chunk.follow_symlinks)
    root = path.resolve()
    report.files = len(scan.files)
    report.skipped.update(scan.skipped)
    for w in scan.warnings:
        warn(w)
    store.check_model(store.active_set(conn), spec, settings.index.vector_type, "ingest")
    store.adopt_root(conn, str(root))
    stored_before = bool(store.stored_documents(conn, str(root)))
    if not scan.files and not stored_before:
        raise nothing_readable(path, report)
    with store.write_lock(conn):
        store.relabel_languages(conn, settings.search.language, settings.search.detect_language)  # migration 014
        run = IngestRun(settings, spec, root, _ingest_chunker(conn, settings, spec), report, progress, warn, lanes)
        streamed: list[sources.SourceFile] = []
        urls = links.links(root)  # a mirrored source's folder: each document's source is its item's URL
        files = links.linked(chunk_stage(run, scan, streamed, parts.streams), urls)
        report.documents = sum(len(f.documents) for f in files)
        if not report.documents and not stored_before and not streamed:
            raise nothing_readable(path, report)
        report.chunks = sum(len(f.chunks) for f in files)
        unreadable = {urls.get(rel, rel) for rel in {f.rel for f in scan.files} - {f.source for f in files}}
        embed_and_store(conn, run, files, unreadable, streamed=streamed)
        if not report.documents and not stored_before:
            raise nothing_readable(path, report)
    return report


def embed_and_store(
    conn: psycopg.Connection,
    run: IngestRun,
    files: Sequence[ChunkFile],
    unreadable: set[str],
    only: set[str] | None = None,
    streamed: Sequence[sources.SourceFile] = (),
) -> list[parts.PartsOutcome]:
    """Embed what the vector cache lacks (or queue it, defer_embedding), store, keep the index current; then
    the files read in parts, each part embedded and stored before the next is read (their outcomes)."""
    settings, spec, report, warn = run.settings, run.spec, run.report, run.warn
    cache = VectorCache(settings.database.kb_dir, spec.identity, spec.dims)
    outcome = EmbedOutcome()
    try:
        if not settings.embed.defer_embedding:
            embed_stage(
                cache,
                [c for f in files for c in f.chunks],
                spec,
                run.embedding_lanes(),
                settings.embed.batch_size,
                run.progress,
                outcome,
            )
        eset = store.ensure_set(conn, spec, settings.index.vector_type, activate=True)
        store_stage(conn, run, eset, files, unreadable | {s.rel for s in streamed}, cache, only)
        in_parts = parts.PartsRun(
            conn, eset, str(run.root), cache, run.config, settings, spec, run.embedding_lanes(), run.progress, warn
        )
        streamed_out = [parts.store_file(in_parts, s, outcome) for s in streamed]
    finally:
        report.embedded, report.hosts = outcome.embedded, outcome.hosts
    _count_parts(report, streamed_out, warn)
    if settings.embed.defer_embedding:
        queue.enqueue_missing(conn, eset)
    report.queued = queue.left(conn, eset)
    if report.queued and not settings.embed.defer_embedding:
        warn(
            f"{report.queued} chunks stored by an earlier ingest with defer_embedding still wait for "
            "`ragvps worker`; vector search does not find them until a worker has embedded them"
        )
    if report.queued:  # the worker that empties the queue builds the index
        report.index_built = index.index_exists(conn, eset)
        conn.commit()
    else:
        report.index_built = index.ensure_index(conn, eset, settings, run.progress, warn)
    return streamed_out


def _count_parts(report: IngestReport, outcomes: Sequence[parts.PartsOutcome], warn: Warn) -> None:
    for o in outcomes:
        if o.error:
            warn(o.error)
            report.skipped[o.reason or "unreadable"] += 1
        report.documents += o.documents
        report.chunks += o.chunks
        report.stored += o.stored
        report.unchanged += o.documents - o.stored
        report.deleted += o.deleted


@dataclass(frozen=True)
class FileOutcome:
    """One file of `ingest_files`: stored (done), found as stored already (unchanged), or failed (why)."""

    rel: str
    state: str
    error: str | None = None
    documents: int = 0
    chunks: int = 0


def ingest_files(
    conn: psycopg.Connection,
    settings: Settings,
    root: Path,
    rels: Sequence[str],
    spec: ModelSpec,
    lanes: Callable[[], Lanes],
    progress: Progress,
    warn: Warn,
    lock_wait: float | None = None,
) -> tuple[IngestReport, list[FileOutcome]]:
    """Ingest these files of the folder `root` (relative names) and nothing else of it: the documents of its
    other files stay as they are. Each file's outcome says why it failed, naming it."""
    report = IngestReport()
    said: dict[str, list[str]] = {}
    wanted = set(rels)

    def record(message: str) -> None:
        report.warnings.append(message)
        rel = message.split(": ", 1)[0]
        said.setdefault(rel if rel in wanted else "", []).append(message)
        warn(message)

    root = root.resolve()
    scan, refused = sources.ScanReport(), {}
    for rel in rels:
        source, problem = sources.source_file(root, rel, settings.chunk.follow_symlinks)
        if source is None:
            refused[rel] = problem
        else:
            scan.files.append(source)
    report.files = len(rels)
    store.check_model(store.active_set(conn), spec, settings.index.vector_type, "ingest")
    with store.write_lock(conn, lock_wait):
        config = _ingest_chunker(conn, settings, spec)
        run = IngestRun(settings, spec, root, config, report, progress, record, lanes)
        streamed: list[sources.SourceFile] = []
        files = chunk_stage(run, scan, streamed, parts.streams)
        report.documents = sum(len(f.documents) for f in files)
        report.chunks = sum(len(f.chunks) for f in files)
        before = store.stored_documents(conn, str(root))
        conn.commit()
        unreadable = {f.rel for f in scan.files} - {f.source for f in files}
        in_parts = embed_and_store(conn, run, files, unreadable, only=wanted, streamed=streamed)
    why = {rel: refused.get(rel) or "; ".join(said.get(rel, [])) for rel in rels}  # of a file that failed
    return report, _file_outcomes(rels, in_parts, files, before, config.key(), why)


def _file_outcomes(
    rels: Sequence[str],
    in_parts: Sequence[parts.PartsOutcome],
    files: Sequence[ChunkFile],
    before: Mapping[str, store.StoredDocument],
    chunker: str,
    why: Mapping[str, str],
) -> list[FileOutcome]:
    """Each file's outcome: as its parts were stored, or as its documents compare with those stored `before`
    (with `chunker`), or failed: `why` (refused, or the warnings that name it), else unreadable."""
    loaded = {f.source: f for f in files}
    by_parts = {o.rel: o for o in in_parts}
    outcomes = []
    for rel in rels:
        if (o := by_parts.get(rel)) is not None:
            outcomes.append(
                FileOutcome(rel, "failed", o.error)
                if o.error
                else FileOutcome(rel, "done" if o.stored or o.deleted else "unchanged", None, o.documents, o.chunks)
            )
            continue
        f = loaded.get(rel)
        if f is None:
            outcomes.append(FileOutcome(rel, "failed", why.get(rel) or f"{rel}: could not be read, skipped"))
            continue
        same = all(
            (old := before.get(d.doc_id)) is not None and old.content_hash == d.content_hash and old.chunker == chunker
            for d in f.documents
        )
        outcomes.append(FileOutcome(rel, "unchanged" if same else "done", None, len(f.documents), len(f.chunks)))
    return outcomes


def _ingest_chunker(conn: psycopg.Connection, settings: Settings, spec: ModelSpec) -> ChunkerConfig:
    """The model's chunker settings, unless a model switch pinned the ones the stored chunks were cut with.

    Chunk settings given explicitly (size, overlap, mode) that differ from the pinned ones end the pin.
    """
    config = chunker_config(settings, spec)
    active = store.active_set(conn)
    pin = store.chunker_pin(conn, active) if active is not None else None
    pinned = _chunker_from(store.chunker_settings(conn, pin)) if pin and pin != config.key() else None
    if pinned is not None and active is not None:
        if (
            (settings.chunk.size is None or settings.chunk.size == pinned.size)
            and (settings.chunk.overlap is None or settings.chunk.overlap == pinned.overlap)
            and settings.chunk.mode == pinned.mode
        ):
            config = pinned
        else:
            store.set_chunker_pin(conn, active, None)
    store.record_chunker(conn, config.key(), asdict(config))
    conn.commit()
    return config


def _chunker_from(stored: dict[str, Any] | None) -> ChunkerConfig | None:
    try:
        return ChunkerConfig(**stored) if stored else None
    except TypeError:  # settings from another version of the chunker
        return None
