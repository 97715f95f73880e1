"""The answer cache in PostgreSQL, keyed on what was actually sent.

Retrieval runs first (it is cheap), then the key hashes the normalised question, the generator, its
model and settings, the prompt version and the ordered (chunk id, sent-text hash) list. A changed chunk
therefore misses by construction; a cache keyed on the question alone would serve stale answers.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ragvps.db.database import queries
from ragvps.db.store import end_implicit_transaction
from ragvps.generate.prompt import PROMPT_VERSION, Source


def _q(name: str) -> str:
    return queries("generate.sql")[name]


def normalise(question: str) -> str:
    """The question as the key sees it: Unicode NFKC, case folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", question).casefold().split())


def sent_hash(heading_path: str, text: str) -> str:
    """What the cache remembers of a chunk; sql/generate.sql cache_prune computes the same in SQL."""
    return hashlib.sha256(f"{heading_path}\n{text}".encode()).hexdigest()


def key(question: str, generator: str, model: str, generation: Mapping[str, Any], sources: Sequence[Source],
        prompt_version: str = PROMPT_VERSION) -> str:
    """The cache key; `generation` holds the settings that shape the answer (never the API key)."""
    raw = json.dumps({
        "question": normalise(question), "generator": generator, "model": model,
        "prompt_version": prompt_version, "generation": dict(generation),
        "sent": [[s.chunk_id, sent_hash(s.heading_path, s.text)] for s in sources],
    }, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


def get(conn: psycopg.Connection, cache_key: str) -> dict[str, Any] | None:
    """The cached answer, counting the hit; None on a miss."""
    end_implicit_transaction(conn)
    with conn.transaction():
        row = conn.execute(_q("cache_get"), {"key": cache_key}).fetchone()
    return dict(row[0]) if row else None


def put(conn: psycopg.Connection, cache_key: str, question: str, generator: str, model: str,
        sources: Sequence[Source], answer: Mapping[str, Any], prompt_tokens: int, completion_tokens: int) -> None:
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(_q("cache_put"), {
            "key": cache_key, "question": normalise(question), "generator": generator, "model": model,
            "prompt_version": PROMPT_VERSION, "chunk_ids": [s.chunk_id for s in sources],
            "sent_hashes": [sent_hash(s.heading_path, s.text) for s in sources], "answer": Jsonb(dict(answer)),
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})


def prune(conn: psycopg.Connection) -> int:
    """Delete the entries whose chunks are gone or changed; the number deleted."""
    end_implicit_transaction(conn)
    with conn.transaction():
        return conn.execute(_q("cache_prune")).rowcount


def clear(conn: psycopg.Connection) -> int:
    end_implicit_transaction(conn)
    with conn.transaction():
        return conn.execute(_q("cache_clear")).rowcount


def stats(conn: psycopg.Connection) -> dict[str, int]:
    """Entries, hits, and LLM tokens the hits did not spend (prompt plus answer)."""
    row = conn.execute(_q("cache_stats")).fetchone()
    conn.commit()
    entries, hits, saved = row if row else (0, 0, 0)
    return {"entries": int(entries), "hits": int(hits), "tokens_saved": int(saved)}
