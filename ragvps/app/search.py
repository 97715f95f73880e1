"""The search use case: the question embedded, both legs and their fusion in one transaction (retried when a
model switch committed under it), then the reranker's order when one is configured. Each search is reported to
the App's observer with its stage timings."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from ragvps.app.requests import SearchRequest, SearchResult
from ragvps.errors import ActiveSetChangedError

if TYPE_CHECKING:
    import numpy as np
    import psycopg
    from numpy.typing import NDArray

    from ragvps.app.ports import App
    from ragvps.db.store import EmbeddingSet
    from ragvps.retrieve.search import Hit


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def search(app: App, request: SearchRequest) -> SearchResult:
    """The top chunks for a query: the active embedding set is read and searched in one transaction."""
    from ragvps.app.checks import check_search
    from ragvps.retrieve.reranking import make_reranker

    request = check_search(request, app.settings.serve.max_k)
    text = request.query
    reranker = make_reranker(app.settings.rerank)
    k = request.k or app.settings.search.top_k
    fetch = dataclasses.replace(request, k=max(k, reranker.candidates))  # a reranker orders its candidates
    start = time.perf_counter()
    timings: dict[str, float] = {}
    with app.connection() as conn:  # one connection for the whole search, checked out once
        app.active_set(conn, "query")  # refuse a model mismatch before paying for the query embedding
        conn.commit()
        embedding = app.embed_query(text) if request.mode != "keyword" else None
        embedded = time.perf_counter()
        hits, eset = _search(app, conn, text, embedding, fetch, timings)
    done = time.perf_counter()
    timings = {"embed_ms": ms(embedded - start), "search_ms": ms(done - embedded)} | timings
    hits = reranker.order(text, hits)[:k] if hits else []  # the first k of the reranker's order are kept
    if reranker.candidates:
        timings["rerank_ms"] = ms(time.perf_counter() - done)
    result = SearchResult(text, request.mode, hits, eset.model, timings)
    app.observer.searched(app.kb_name, result)
    return result


def _search(app: App, conn: psycopg.Connection, text: str, embedding: NDArray[np.float32] | None,
            request: SearchRequest, timings: dict[str, float]) -> tuple[list[Hit], EmbeddingSet]:
    from ragvps.db.database import driver_errors
    from ragvps.retrieve.search import search as search_legs

    for attempt in range(3):
        try:
            with driver_errors(app.settings), conn.transaction():
                eset = app.active_set(conn, "query")
                hits = search_legs(conn, eset, text, embedding, app.settings, request.mode, request.k,
                                   request.filters, timings)
            return hits, eset
        except ActiveSetChangedError:
            # A model switch committed between reading the active set and searching its table: the
            # old table is gone, the new set is active and holds the same chunks. Read it again.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
