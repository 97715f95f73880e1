"""Knowledge bases: which one an App is bound to, and the use cases that create, list, rename and drop them.

A knowledge base is a schema of its own (db/catalog.py says why) and a folder of stage files
(`data_dir/kb/NAME`); its settings (model contract, chunking, the refusal line ...) sit over the global ones.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ragvps.backends import EMBEDDERS
from ragvps.config import Settings
from ragvps.config.groups import EmbedSettings
from ragvps.db import catalog, store
from ragvps.errors import RagvpsError, UsageError

if TYPE_CHECKING:
    from ragvps.db.catalog import KnowledgeBase
    from ragvps.db.connections import Connections
    from ragvps.db.replicated import Reader

log = logging.getLogger(__name__)

DEFAULT_EMBEDDER = EmbedSettings().kind

# What `kb create` may pin for a knowledge base; other settings stay global.
KB_SETTINGS = (
    "embedder",
    "embed_model",
    "vector_type",
    "chunk_mode",
    "chunk_size",
    "chunk_overlap",
    "answer_min_evidence",
    "fusion",
    "rrf_k",
    "vector_weight",
)


def resolve(settings: Settings, connections: Connections) -> tuple[KnowledgeBase, Settings, Settings | None]:
    """The knowledge base `settings.database.kb` names, its schema migrated (once per connection source);
    `default` is made when missing. Another name that does not exist is a NotFoundError listing the others.
    With it, its settings (its own over `settings`, and the model it kept: kept_model) and, when it kept an older
    model, the settings as configured (what `reindex` switches it to)."""
    with connections.connection() as conn:
        kb = catalog.open_kb(conn, settings.database.kb, connections.migrated)
        catalog.bind(conn, kb.schema)
        active = store.active_set(conn)
        catalog.unbind(conn)
        conn.commit()
    configured = settings.replace(**kb.settings)
    _adopt_legacy_files(configured)
    kept = kept_model(configured, active.model if active is not None else None)
    return kb, kept, configured if kept is not configured else None


def kept_model(settings: Settings, active_model: str | None) -> Settings:
    """An existing knowledge base keeps the in-process model it was embedded with while the embedder is the
    default one (issue 52: the default changed from MiniLM to USE multilingual); `ragvps reindex` switches it to
    the configured model. Any other embedder configured is taken as said."""
    if settings.embed.kind != DEFAULT_EMBEDDER or active_model in (None, settings.embed.model_name):
        return settings
    kind = next((b.name for b in EMBEDDERS.values() if b.model and b.model == active_model), None)
    return settings if kind is None else settings.replace(embedder=kind)


def not_found(name: str, allowed: list[str]) -> RagvpsError:
    """The error for a knowledge base that does not exist or that the caller may not use (the same words)."""
    return catalog.not_found(name, allowed)


def _adopt_legacy_files(settings: Settings) -> None:
    """Stage files of a data directory from before knowledge bases (data_dir/chunks, data_dir/embeddings) become
    the default knowledge base's, moved, not copied: the vector cache keeps saving re-embedding."""
    db = settings.database
    if db.kb != "default" or db.kb_dir.exists():
        return
    legacy = [db.data_dir / part for part in ("chunks", "embeddings") if (db.data_dir / part).is_dir()]
    if legacy:
        db.kb_dir.mkdir(parents=True)
        for folder in legacy:
            folder.rename(db.kb_dir / folder.name)
        log.info("moved the stage files in %s into %s (the knowledge base default)", db.data_dir, db.kb_dir)


@dataclass(frozen=True)
class KbInfo:
    """A knowledge base as `ragvps kb list` shows it."""

    name: str
    documents: int
    chunks: int
    model: str | None
    vector_type: str | None
    index_bytes: int
    last_ingest: datetime | None
    created_at: datetime | None


def kept_settings(model: str | None, vector_type: str | None, chunk_size: int | None) -> dict[str, object]:
    """What `kb create --model ... --vector-type ... --chunk-size ...` keeps: an in-process model by its name, any
    other name an Ollama model."""
    kept: dict[str, object] = {"vector_type": vector_type, "chunk_size": chunk_size}
    if model is not None:
        kind = next((b.name for b in EMBEDDERS.values() if b.model and b.model == model), None)
        kept |= {"embedder": kind} if kind else {"embedder": "ollama", "embed_model": model}
    return {k: v for k, v in kept.items() if v is not None}


def pinned(settings: dict[str, object]) -> dict[str, object]:
    """The settings a knowledge base keeps for itself, checked as flags would be."""
    unknown = [name for name in settings if name not in KB_SETTINGS]
    if unknown:
        raise UsageError(f"a knowledge base cannot keep {', '.join(unknown)}: it keeps {', '.join(KB_SETTINGS)}")
    Settings.of(**settings)  # each value checked now, not at the first ingest
    return {k: v for k, v in settings.items() if v is not None}


def create(settings: Settings, connections: Connections, name: str, kept: dict[str, object]) -> KnowledgeBase:
    with connections.connection() as conn:
        kb = catalog.create(conn, name, pinned(kept))
        catalog.unbind(conn)
        conn.commit()
    connections.migrated.add(kb.schema)
    return kb


def drop(settings: Settings, connections: Connections, name: str) -> KnowledgeBase:
    """Its schema (every table, index, cached answer) and its stage files; `default` is made again, empty."""
    with connections.connection() as conn:
        kb = catalog.drop(conn, name)
        catalog.unbind(conn)
        conn.commit()
    connections.migrated.discard(kb.schema)
    shutil.rmtree(settings.replace(kb=name).database.kb_dir, ignore_errors=True)
    if name == catalog.DEFAULT_KB:
        create(settings, connections, name, {})
    return kb


def rename(settings: Settings, connections: Connections, old: str, new: str) -> None:
    with connections.connection() as conn:
        catalog.rename(conn, old, new)
        conn.commit()
    before, after = settings.replace(kb=old).database.kb_dir, settings.replace(kb=new).database.kb_dir
    if before.exists():
        after.parent.mkdir(parents=True, exist_ok=True)
        before.rename(after)


def catalog_of(connections: Connections) -> list[KnowledgeBase]:
    """Every knowledge base, read where reads go (a replica that has seen the catalog's last write, when any)."""

    def read(reader: Reader) -> list[KnowledgeBase]:
        kbs = catalog.all_kbs(reader.conn)
        reader.conn.commit()
        return kbs

    return connections.read(read)


def listing(connections: Connections) -> list[KbInfo]:
    out = []
    with connections.connection() as conn:
        for kb in catalog.all_kbs(conn):
            catalog.bind(conn, kb.schema)
            facts = store.kb_facts(conn)
            out.append(
                KbInfo(
                    name=kb.name,
                    documents=facts.documents,
                    chunks=facts.chunks,
                    model=facts.model,
                    vector_type=facts.vector_type,
                    index_bytes=facts.index_bytes,
                    last_ingest=facts.last_ingest,
                    created_at=kb.created_at,
                )
            )
        catalog.unbind(conn)
        conn.commit()
    return out
