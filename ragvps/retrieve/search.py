"""Search: a vector leg and a BM25 full-text leg over one embedding set, fused (retrieve/fusion.py: reciprocal rank
fusion by default, or a convex combination of their scores).

The legs run in the caller's transaction (the app's), so the active set and the search are one step."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from ragvps import langs
from ragvps.config import Settings
from ragvps.db.database import autocommit
from ragvps.db.sql import compose
from ragvps.db.store import EmbeddingSet, as_param
from ragvps.embed.models import model_spec
from ragvps.errors import UsageError
from ragvps.records import cite_label, fields_dict
from ragvps.retrieve import fusion
from ragvps.retrieve.evidence import COSINE_RANGE, NAMED_ROW, combine
from ragvps.retrieve.filters import Filters
from ragvps.retrieve.fusion import Scored
from ragvps.retrieve.modes import Mode
from ragvps.text import named_rows

Vector = np.ndarray[tuple[int], np.dtype[np.float32]]  # one embedding


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
    start: int = 0  # character offsets of the chunk's text in its document
    end: int = 0
    cosine: float | None = None  # query-chunk cosine (None without a query vector: keyword mode)
    terms: float | None = None  # share of the query's IDF mass the chunk contains (None: no query lexemes)
    evidence: float = 0.0  # both combined (retrieve/evidence.py): rank-independent, 0..1
    pages: tuple[int, ...] = ()  # the PDF pages the chunk's text is on
    kb: str | None = None  # the knowledge base, in a search of several (None: the one searched)

    @property
    def label(self) -> str:
        """The path as a citation shows it: `report.pdf p. 12`."""
        return cite_label(self.path, self.pages)

    def to_json(self) -> dict[str, object]:
        out = fields_dict(self)
        if self.kb is None:
            del out["kb"]
        return out


MAX_QUERY_CHARS = 20_000


@dataclass(frozen=True)
class Bm25:
    """BM25 parameters, and the candidate budget (default: setting keyword_budget): the query's rarest
    lexemes find candidates while their chunk counts add up to at most `budget` (the rarest always
    does); every query lexeme scores them."""

    k1: float = 1.2
    b: float = 0.75
    budget: int | None = None
    cap: int = 4  # candidates scored at most: cap x budget (the first in table order past it)


BM25 = Bm25()  # chosen by bench/quality_bench.py


def check_query(text: str) -> str:
    """The query as PostgreSQL can take it (no NUL, valid UTF-8), or a clear error."""
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ").strip()
    if not re.search(r"\w", text):
        raise UsageError(f"the query {text!r} has no words to search for: ask in words")
    if len(text) > MAX_QUERY_CHARS:
        raise UsageError(f"the query is {len(text):,} characters long; ask in at most {MAX_QUERY_CHARS:,}")
    return text


def vector_leg(
    conn: psycopg.Connection, eset: EmbeddingSet, embedding: Vector, settings: Settings, filters: Filters | None = None
) -> list[int]:
    """Chunk ids nearest to the embedding (vector_scored's, without their cosines)."""
    return [c for c, _ in vector_scored(conn, eset, embedding, settings, filters)]


def vector_scored(
    conn: psycopg.Connection, eset: EmbeddingSet, embedding: Vector, settings: Settings, filters: Filters | None = None
) -> list[tuple[int, float]]:
    """Chunks nearest to the embedding, with their cosine; HNSW when indexed, with ef_search set for this query only.

    A bit set with its index takes the binary index's nearest bit_rerank_depth and re-ranks them by cosine
    (without the index, the exact scan over its stored vectors is cheaper and exact)."""
    bit = eset.vector_type == "bit" and eset.indexed
    ef = bit_depth(settings) if bit else max(settings.search.ef_search, settings.search.candidates)
    vector = as_param(eset, embedding)
    name = "vector_search_bit" if bit else "vector_search"
    with _local(conn):
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
        if filters:
            conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
            query = compose(
                name + "_filtered", table=eset.table, filter=filters.condition(), dims=sql.Literal(eset.dims)
            )
            params: dict[str, object] = {"embedding": vector, "candidates": settings.search.candidates, "depth": ef}
            rows = conn.execute(query, params | filters.params())
        else:  # the limits composed in, so that its prepared statement keeps one plan (queries.sql says why)
            query = compose(
                name,
                table=eset.table,
                dims=sql.Literal(eset.dims),
                candidates=sql.Literal(settings.search.candidates),
                depth=sql.Literal(ef),
            )
            rows = conn.execute(query, {"embedding": vector})
        scored = [(r[0], float(r[1])) for r in rows]
        if filters:  # SET LOCAL lasts to the end of the caller's open transaction
            conn.execute("RESET hnsw.iterative_scan")
        return scored


@contextmanager
def _local(conn: psycopg.Connection) -> Iterator[None]:
    """A block whose SET LOCAL lasts to its end: the caller's open transaction (no savepoint: two round trips
    saved on every search), else one of its own."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        yield
        return
    with conn.transaction():
        yield


def bit_depth(settings: Settings) -> int:
    """How many Hamming neighbours a bit index hands to the cosine re-rank (also its ef_search)."""
    return max(settings.search.bit_rerank_depth, settings.search.candidates)


def keyword_leg(
    conn: psycopg.Connection, text: str, settings: Settings, filters: Filters | None = None, bm25: Bm25 = BM25
) -> list[int]:
    """Chunk ids ranked by BM25 (keyword_scored's, without their scores)."""
    return [c for c, _ in keyword_scored(conn, text, settings, filters, bm25)]


def keyword_scored(
    conn: psycopg.Connection, text: str, settings: Settings, filters: Filters | None = None, bm25: Bm25 = BM25
) -> list[tuple[int, float]]:
    """Chunks ranked by BM25 over the full-text lexemes of `text`, with their scores; never an error for any
    words."""
    where = compose("keyword_filter", filter=filters.condition()) if filters else sql.SQL("true")
    source = compose("keyword_source_filtered" if filters else "keyword_source")
    budget = bm25.budget or settings.search.keyword_budget
    params = lexeme_params(text, settings) | {
        "candidates": settings.search.candidates,
        "budget": budget,
        "cap": max(bm25.cap * budget, settings.search.candidates),
        "k1": bm25.k1,
        "b": bm25.b,
    }
    if filters:
        params |= filters.params()
    with autocommit(conn):  # one statement: on an idle connection no BEGIN and COMMIT around it
        rows = conn.execute(
            compose("keyword_search", source=source, filter=where, lexemes=compose("query_lexemes")), params
        )
        return [(r[0], float(r[1])) for r in rows]


def search(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    text: str,
    embedding: Vector | None,
    settings: Settings,
    mode: Mode = "hybrid",
    k: int | None = None,
    filters: Filters | None = None,
    timings: dict[str, float] | None = None,
    keyword: Callable[[], Scored] | None = None,
) -> list[Hit]:
    """The top k chunks for `text` (its query embedding given for the vector and hybrid modes); `timings`, when
    given, gets each stage's milliseconds: vector_ms, keyword_ms, fusion_ms (RRF and the chunks' details).
    `keyword`: the keyword leg's ids, run elsewhere (another connection); keyword_wait_ms is then the wait."""
    k = k or settings.search.top_k
    if filters is None:
        filters = Filters()
    lap = _Laps(timings if timings is not None else {})
    vec: Scored = []
    if mode != "keyword" and embedding is not None:
        vec = vector_scored(conn, eset, embedding, settings, filters)
    lap("vector_ms")
    if keyword is not None and mode != "vector":
        kw = keyword()
        lap("keyword_wait_ms")
    else:
        kw = keyword_scored(conn, text, settings, filters) if mode != "vector" else []
        lap("keyword_ms")
    fused = fuse(vec, kw, settings, eset.model)[:k]
    rows = chunk_evidence(conn, eset, [i for i, _ in fused], text, embedding if mode != "keyword" else None, settings)
    hits = _details(fused, vec, kw, rows, cosine_range(eset.model), text)
    lap("fusion_ms")
    return hits


def fuse(vec: Scored, kw: Scored, settings: Settings, model: str = "") -> list[tuple[int, float]]:
    """The legs fused as the settings say: `fusion` (zscore, rrf or convex), rrf_k, and the vector leg's weight (the
    keyword leg's is 1): the setting vector_weight times the model's own (vector_scale); an empty leg counts for
    nothing."""
    s = settings.search
    return fusion.fuse(vec, kw, s.fusion, s.rrf_k, s.vector_weight * vector_scale(model))


class _Laps:
    """Milliseconds since the last lap, into `timings` under each name."""

    def __init__(self, timings: dict[str, float]):
        self.timings, self.last = timings, time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round((now - self.last) * 1000, 2)
        self.last = now


def chunk_evidence(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    ids: list[int],
    text: str,
    embedding: Vector | None,
    settings: Settings,
) -> dict[int, TupleRow]:
    """Each chunk's details with its cosine and IDF share for this query, whatever its rank: one query."""
    if not ids:
        return {}
    cosine: sql.Composable = sql.SQL("NULL::float8")
    params: dict[str, object] = lexeme_params(text, settings) | {"ids": ids}
    if embedding is not None:
        cosine = compose("chunk_cosine", table=eset.table)
        params["embedding"] = as_param(eset, embedding)
    return {
        r[0]: r
        for r in conn.execute(compose("chunk_evidence", cosine=cosine, lexemes=compose("query_lexemes")), params)
    }


def lexeme_params(text: str, settings: Settings) -> dict[str, object]:
    """What query_lexemes reads a question with: its script's language when that is sure (langs.of_question), else
    every language of the knowledge base (the `language` setting while it has none)."""
    s = settings.search
    code = langs.of_question(text) if s.detect_language else ""
    reading = langs.reading(code, s.language)
    return {
        "languages": [reading.config],
        "texts": [reading.terms(text) or text],
        "every": s.detect_language and not code,
        "folded": langs.fold(text),
        "text": text,
    }


def vector_scale(model: str) -> float:
    """The model's own weight for its vector leg in fusion (ModelSpec.fusion_weight; 1 for a model with no entry)."""
    spec = model_spec(model) if model else None
    return spec.fusion_weight if spec is not None else 1.0


def cosine_range(model: str) -> tuple[float, float]:
    """The cosines a model's evidence maps onto 0..1 (MiniLM's for a model ragvps has no entry for)."""
    spec = model_spec(model)
    return spec.cosine_range if spec is not None else COSINE_RANGE


def _details(
    fused: list[tuple[int, float]],
    vec: Scored,
    kw: Scored,
    rows: dict[int, TupleRow],
    span: tuple[float, float] = COSINE_RANGE,
    query: str = "",
) -> list[Hit]:
    vrank = {c: r for r, (c, _) in enumerate(vec, start=1)}
    krank = {c: r for r, (c, _) in enumerate(kw, start=1)}
    hits = []
    # A keyword leg run on another connection saw its own snapshot: a chunk deleted in between has no row here.
    for rank, (cid, score) in enumerate((f for f in fused if f[0] in rows), start=1):
        _, doc_id, source, _root, seq, heading, body, start, end, cos, share, pages = rows[cid]
        hits.append(
            Hit(
                rank,
                score,
                f"{doc_id}#{seq}",
                source,
                doc_id,
                heading,
                body,
                vrank.get(cid),
                krank.get(cid),
                start,
                end,
                cos,
                share,
                max(combine(cos, share, span), NAMED_ROW if named_rows(body, query, specific=True) else 0.0),
                tuple(int(p) for p in pages or ()),
            )
        )
    return hits
