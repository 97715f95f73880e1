"""The answer cache in PostgreSQL, keyed on what was actually sent.

Retrieval runs first, then the key hashes the normalised question, the generator, its
model and settings, the prompt version and the ordered (chunk id, sent-text hash) list. A changed chunk
therefore misses by construction; a cache keyed on the question alone would serve stale answers.

The memo in front of it (migration 007) makes a repeated question cheap without that risk: it maps the
question, the request and the settings to the answer's key and what was retrieved, at the corpus generation
it was retrieved at; any write that can change a search's result moves the generation on, and the memo
misses. A hit then costs one query instead of embedding the question and searching.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ragvps.db.sql import queries
from ragvps.db.store import end_implicit_transaction
from ragvps.generate.prompt import PROMPT_VERSION, Source
from ragvps.generate.records import Json, Quote, Usage


def _q(name: str) -> str:
    return queries("generate.sql")[name]


def normalise(question: str) -> str:
    """The question as the key sees it: Unicode NFKC, case folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", question).casefold().split())


def sent_hash(heading_path: str, text: str) -> str:
    """What the cache remembers of a chunk; sql/generate.sql cache_prune computes the same in SQL."""
    return hashlib.sha256(f"{heading_path}\n{text}".encode()).hexdigest()


def key(
    question: str,
    generator: str,
    model: str,
    generation: Mapping[str, Any],
    sources: Sequence[Source],
    prompt_version: str = PROMPT_VERSION,
) -> str:
    """The cache key; `generation` holds the settings that shape the answer (never the API key)."""
    raw = json.dumps(
        {
            "question": normalise(question),
            "generator": generator,
            "model": model,
            "prompt_version": prompt_version,
            "generation": dict(generation),
            "sent": [[s.chunk_id, sent_hash(s.heading_path, s.text)] for s in sources],
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class Cached:
    """A cached answer (or a rewritten question): its text, how it ended, what it cost, its quotes."""

    text: str
    finish: str = ""
    usage: Usage = field(default_factory=Usage)
    quotes: tuple[Quote, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.text,
            "finish": self.finish,
            "usage": self.usage.to_json(),
            "quotes": [q.to_json() for q in self.quotes],
        }

    @classmethod
    def from_json(cls, data: Json) -> Cached:
        usage, quotes = data.get("usage"), data.get("quotes") or []
        assert isinstance(quotes, list)
        return cls(
            text=str(data["text"]),
            finish=str(data.get("finish") or ""),
            usage=Usage.from_json(usage if isinstance(usage, dict) else None),
            quotes=tuple(Quote.from_json(q) for q in quotes),
        )


def get(conn: psycopg.Connection, cache_key: str, count: bool = True) -> Cached | None:
    """The cached answer, counting the hit (not with `count` False: a read replica's, counted by `count_hit` on the
    primary); None on a miss."""
    end_implicit_transaction(conn)
    if not count:
        row = conn.execute(_q("cache_peek"), {"key": cache_key}).fetchone()
        conn.rollback()
        return Cached.from_json(row[0]) if row else None
    with conn.transaction():
        _no_wait(conn)
        row = conn.execute(_q("cache_get"), {"key": cache_key}).fetchone()
    return Cached.from_json(row[0]) if row else None


def count_hit(conn: psycopg.Connection, cache_key: str) -> None:
    """A hit read on a replica, counted on the primary."""
    end_implicit_transaction(conn)
    with conn.transaction():
        _no_wait(conn)
        conn.execute(_q("cache_count"), {"key": cache_key})


def _no_wait(conn: psycopg.Connection) -> None:
    """This transaction's commit does not wait for the disk (about 3 ms of an otherwise 0.3 ms hit): it only
    counts a hit or remembers a memo, and a crash losing the last fraction of a second of those loses nothing
    that cannot be found again. Cached answers themselves (put) are committed durably."""
    conn.execute("SET LOCAL synchronous_commit TO off")


def put(
    conn: psycopg.Connection,
    cache_key: str,
    question: str,
    generator: str,
    model: str,
    sources: Sequence[Source],
    answer: Cached,
) -> None:
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(
            _q("cache_put"),
            {
                "key": cache_key,
                "question": normalise(question),
                "generator": generator,
                "model": model,
                "prompt_version": PROMPT_VERSION,
                "chunk_ids": [s.chunk_id for s in sources],
                "sent_hashes": [sent_hash(s.heading_path, s.text) for s in sources],
                "answer": Jsonb(answer.to_json()),
                "prompt_tokens": answer.usage.prompt_tokens,
                "completion_tokens": answer.usage.completion_tokens,
            },
        )


def prune(conn: psycopg.Connection) -> int:
    """Delete the entries whose chunks are gone or changed, and the memos that can no longer hit; the number
    of entries deleted."""
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(_q("memo_prune"))
        return conn.execute(_q("cache_prune")).rowcount


def memo_key(parts: Mapping[str, Any]) -> str:
    """The memo's key: the normalised question and everything of the request and the settings that shapes
    what is retrieved and answered (never a secret)."""
    raw = json.dumps(
        {**parts, "question": normalise(str(parts["question"])), "prompt_version": PROMPT_VERSION},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(raw.encode()).hexdigest()


def memo_get(conn: psycopg.Connection, memo: str) -> tuple[int, Cached | None, Json | None]:
    """(the corpus generation now, the remembered answer, what it was answered from); the last two None on a
    miss. A hit counts on the answer's cache entry, as cache.get does."""
    end_implicit_transaction(conn)
    with conn.transaction():
        _no_wait(conn)
        row = conn.execute(_q("memo_get"), {"key": memo}).fetchone()
    if row is None:  # a database without corpus_stats' row: never remembered
        return -1, None, None
    generation, answer, retrieval = row
    return int(generation), Cached.from_json(answer) if answer else None, retrieval or None


def memo_peek(conn: psycopg.Connection, memo: str) -> tuple[int, Cached | None, Json | None, str | None]:
    """memo_get on a read replica: nothing counted; with the answer's cache key, for `count_hit` on the primary."""
    end_implicit_transaction(conn)
    row = conn.execute(_q("memo_peek"), {"key": memo}).fetchone()
    conn.rollback()
    if row is None:
        return -1, None, None, None
    generation, answer, retrieval, answer_key = row
    if not answer:
        return int(generation), None, None, None
    return int(generation), Cached.from_json(answer), retrieval or None, answer_key


def memo_put(
    conn: psycopg.Connection, memo: str, generation: int, answer_key: str, retrieval: Mapping[str, Any]
) -> None:
    """Remember which cached answer this question got at this generation (see sql/migrations/007)."""
    if generation < 0:
        return
    end_implicit_transaction(conn)
    with conn.transaction():
        _no_wait(conn)
        conn.execute(
            _q("memo_put"),
            {"key": memo, "generation": generation, "answer_key": answer_key, "retrieval": Jsonb(dict(retrieval))},
        )


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
