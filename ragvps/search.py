"""Search: a vector leg and a full-text leg, fused by reciprocal rank fusion."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import psycopg

from ragvps.config import Settings
from ragvps.database import compose, q
from ragvps.errors import UsageError
from ragvps.store import EmbeddingSet

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")


@dataclass(frozen=True)
class Hit:
    rank: int
    score: float
    chunk_id: str  # stable: "<doc_id>#<seq>"
    path: str  # the source file, relative to the ingested folder
    doc_id: str
    heading_path: str
    text: str
    vector_rank: int | None
    keyword_rank: int | None


def rrf(rankings: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank), ranks from 1."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def check_query(text: str) -> str:
    text = text.strip()
    if not re.search(r"\w", text):
        raise UsageError(f"the query {text!r} has no words to search for: ask in words")
    return text


def vector_leg(conn: psycopg.Connection, eset: EmbeddingSet, embedding: np.ndarray, settings: Settings) -> list[int]:
    with conn.transaction():
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(settings.ef_search,
                                                                                settings.candidates)),))
        rows = conn.execute(compose("vector_search", table=eset.table),
                            {"embedding": _as_param(eset, embedding), "candidates": settings.candidates})
        return [r[0] for r in rows]


def keyword_leg(conn: psycopg.Connection, text: str, settings: Settings) -> list[int]:
    rows = conn.execute(q("keyword_search"), {"language": settings.language, "text": text,
                                              "candidates": settings.candidates})
    return [r[0] for r in rows]


def _as_param(eset: EmbeddingSet, embedding: np.ndarray) -> object:
    if eset.vector_type == "halfvec":
        from pgvector import HalfVector

        return HalfVector(embedding)
    return embedding


def search(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    text: str,
    embedding: np.ndarray | None,
    settings: Settings,
    mode: Mode = "hybrid",
    k: int | None = None,
) -> list[Hit]:
    """The top k chunks for `text` (its query embedding given for the vector and hybrid modes)."""
    k = k or settings.top_k
    vec = vector_leg(conn, eset, embedding, settings) if mode != "keyword" and embedding is not None else []
    kw = keyword_leg(conn, text, settings) if mode != "vector" else []
    fused = rrf([leg for leg in (vec, kw) if leg], settings.rrf_k)[:k]
    conn.commit()
    return _details(conn, fused, vec, kw)


def _details(conn: psycopg.Connection, fused: list[tuple[int, float]], vec: list[int], kw: list[int]) -> list[Hit]:
    ids = [i for i, _ in fused]
    rows = {r[0]: r for r in conn.execute(q("chunk_details"), {"ids": ids})}
    vrank = {c: r for r, c in enumerate(vec, start=1)}
    krank = {c: r for r, c in enumerate(kw, start=1)}
    hits = []
    for rank, (cid, score) in enumerate(fused, start=1):
        _, doc_id, source, _root, seq, heading, body = rows[cid]
        hits.append(Hit(rank, score, f"{doc_id}#{seq}", source, doc_id, heading, body,
                        vrank.get(cid), krank.get(cid)))
    conn.commit()
    return hits
