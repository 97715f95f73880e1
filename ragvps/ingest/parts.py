"""A large CSV or TSV ingested in parts (issue 30): PART_ROWS rows at a time, each part a document of its own
(`<file>#rows-<first>-<last>`) whose table repeats the header row, chunked, embedded and stored before the next
part is read, so that memory stays flat in the file's size.

A part stored already with the same content and chunker is skipped: ingesting the same file again chunks,
embeds and stores nothing. A run cut short leaves whole parts stored; the next run finds them stored and goes
on, and the parts a file no longer has (it shrank) are deleted once the whole file was read. A first pass
counts the rows, so that progress is rows done out of the table's rows (stage `rows <file>`), and finds a file
that cannot be read as a table before anything of it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import psycopg

from ragvps.config import Settings
from ragvps.db import store
from ragvps.embed.hosts import Lanes
from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.chunk import ChunkerConfig, chunk_documents
from ragvps.ingest.embedding import EmbedOutcome, embed_stage
from ragvps.ingest.formats import delimited
from ragvps.ingest.sources import SourceFile
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import Document, ModelSpec

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]

STREAM_BYTES = 4 << 20  # a CSV or TSV this large is read in parts
ROWS = "rows "  # the progress stage of one file's rows: "rows <file>"


def streams(source: SourceFile) -> bool:
    """Whether the file is read in parts."""
    try:
        return source.path.suffix.lower() in (".csv", ".tsv") and source.path.stat().st_size >= STREAM_BYTES
    except OSError:
        return False  # read whole, where the error is reported as for any file


def rows_file(stage: str) -> str | None:
    """The file a progress stage counts the rows of, or None."""
    return stage[len(ROWS) :] if stage.startswith(ROWS) else None


@dataclass
class PartsOutcome:
    rel: str
    documents: int = 0  # parts
    chunks: int = 0  # of all its parts, stored now or before
    stored: int = 0  # parts stored now (new or changed)
    deleted: int = 0  # parts it no longer has
    error: str | None = None  # why the file could not be read (nothing of it changed)
    reason: str | None = None  # the skipped reason counted for it


@dataclass(frozen=True)
class PartsRun:
    """What storing parts needs: where, with which chunker and model, and whom to tell."""

    conn: psycopg.Connection
    eset: store.EmbeddingSet
    root: str
    cache: VectorCache
    config: ChunkerConfig
    settings: Settings
    spec: ModelSpec
    lanes: Callable[[], Lanes]
    progress: Progress
    warn: Warn


def store_file(run: PartsRun, source: SourceFile, outcome: EmbedOutcome) -> PartsOutcome:
    """Read, chunk, embed and store one file part by part; SkipFile's message in `error` when it cannot be read."""
    out = PartsOutcome(source.rel)
    try:
        total = delimited.table_rows(source)
    except (SkipFile, OSError) as exc:
        return _failed(out, exc)
    stored = store.stored_documents(run.conn, run.root)
    run.conn.commit()
    stage, done, seen = ROWS + source.rel, 0, set()
    run.progress(stage, 0, total)
    try:
        for doc in delimited.parts(source, run.warn):
            seen.add(doc.doc_id)
            out.documents += 1
            old = stored.get(doc.doc_id)
            if not (old and old.content_hash == doc.content_hash and old.chunker == run.config.key()):
                _store_part(run, doc, outcome)
                out.stored += 1
            first, last = cast(list[int], doc.metadata["rows"])
            done += last - first + 1
            run.progress(stage, min(done, total), total)
    except (SkipFile, OSError) as exc:  # changed under the reader: what is stored stays, nothing is deleted
        return _failed(out, exc)
    gone = [d for d, old in stored.items() if old.source == source.rel and d not in seen]
    store.delete_documents(run.conn, run.root, gone)
    out.deleted = len(gone)
    out.chunks = store.source_chunks(run.conn, run.root, source.rel)
    run.conn.commit()
    return out


def _failed(out: PartsOutcome, exc: SkipFile | OSError) -> PartsOutcome:
    if isinstance(exc, SkipFile):
        out.error, out.reason = str(exc), exc.reason
    else:
        out.error, out.reason = f"{out.rel}: {exc.strerror or exc}, skipped", "unreadable"
    return out


def _store_part(run: PartsRun, doc: Document, outcome: EmbedOutcome) -> None:
    chunks = chunk_documents([doc], run.config)[0]
    deferred = run.settings.embed.defer_embedding
    if not deferred:
        before = outcome.embedded

        def embedding(stage: str, done: int, total: int) -> None:  # counted over the whole file
            run.progress(stage, before + done, before + total)

        part = embed_stage(run.cache, chunks, run.spec, run.lanes, run.settings.embed.batch_size, embedding)
        outcome.embedded += part.embedded
        outcome.hosts = part.hosts
    store.replace_documents(
        run.conn,
        run.eset,
        run.root,
        run.config.key(),
        run.settings.search.language,
        [(doc, chunks, run.cache.of_chunks(chunks, deferred))],
        run.settings.search.detect_language,
    )
