"""The search use case: the question embedded, both legs and their fusion in one transaction (retried when a
model switch committed under it), then the reranker's order when one is configured. Each search is reported to
the App's observer with its stage timings.

A hybrid search starts its keyword leg before the question is embedded (it needs no vector). In a server it runs
on a second pool connection, so the search takes about the slower of the two paths (embedding + vector leg, keyword
leg) plus the fusion; when the pool has no connection idle at once, it runs on the request's own, beside the
embedding, and the vector leg follows it (`SearchResult.legs` says which, ragvps_search_legs_total counts it)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ragvps.app.checks import check_search
from ragvps.app.requests import SearchRequest, SearchResult
from ragvps.db.catalog import bind
from ragvps.db.database import driver_errors
from ragvps.errors import ActiveSetChangedError, ModelMismatchError
from ragvps.retrieve.reranking import make_reranker
from ragvps.retrieve.search import keyword_scored
from ragvps.retrieve.search import search as search_legs

if TYPE_CHECKING:
    import numpy as np
    import psycopg
    from numpy.typing import NDArray

    from ragvps.app.ports import App, Spare
    from ragvps.db.store import EmbeddingSet
    from ragvps.retrieve.fusion import Scored
    from ragvps.retrieve.search import Hit


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def search(
    app: App, request: SearchRequest, conn: psycopg.Connection | None = None, spare: Spare | None = None
) -> SearchResult:
    """The top chunks for a query: the active embedding set is read and searched in one transaction, on `conn`
    when the caller holds one (an ask, with `spare` for a second connection of the same server), else on one the
    App reads from (a replica, when there are any)."""
    if conn is None:
        return app.read(lambda reader: search(app, request, reader.conn, reader.spare))
    request = check_search(request, app.settings.serve.max_k)
    text = request.query
    reranker = make_reranker(app.settings.rerank)
    k = request.k or app.settings.search.top_k
    fetch = dataclasses.replace(request, k=max(k, reranker.candidates))  # a reranker orders its candidates
    start = time.perf_counter()
    timings: dict[str, float] = {}
    with _keyword_leg(app, conn, fetch, spare or app.connections.spare) as (keyword, legs):
        if not app.set_matched:  # refuse a model mismatch before paying for the query embedding
            app.active_set(conn, "query")
            conn.commit()
        if keyword is not None:
            keyword.start()  # while the question is embedded
        embedding = app.embed_query(text) if request.mode != "keyword" else None
        if keyword is not None and keyword.conn is conn:
            keyword.wait()  # on this request's own connection: done with it before the vector leg takes it
        embedded = time.perf_counter()
        hits, eset = _search(app, conn, text, embedding, fetch, timings, keyword)
    done = time.perf_counter()
    timings = {"embed_ms": ms(embedded - start), "search_ms": ms(done - embedded)} | timings
    hits = reranker.order(text, hits)[:k] if hits else []  # the first k of the reranker's order are kept
    if reranker.candidates:
        timings["rerank_ms"] = ms(time.perf_counter() - done)
    result = SearchResult(text, request.mode, hits, eset.model, timings, legs)
    app.observer.searched(app.kb_name, result)
    return result


class KeywordLeg:
    """A hybrid search's keyword leg, run by the legs' threads on a spare connection (beside the embedding and the
    vector leg) or on the request's own (beside the embedding only); its scored ids when asked."""

    def __init__(self, app: App, conn: psycopg.Connection, request: SearchRequest):
        self.app, self.conn, self.request = app, conn, request
        self.future: Future[Scored] | None = None
        self.ms = 0.0

    def start(self) -> None:
        self.future = _executor().submit(self._run)

    def _run(self) -> Scored:
        began = time.perf_counter()
        with driver_errors(self.app.settings):
            scored = keyword_scored(self.conn, self.request.query, self.app.settings, self.request.filters)
        self.ms = ms(time.perf_counter() - began)
        return scored

    def __call__(self) -> Scored:
        assert self.future is not None, "start() first"
        return self.future.result()

    def wait(self) -> None:
        """Until the leg has finished with its connection (whether it succeeded is for __call__ to say)."""
        if self.future is not None:
            self.future.exception()


@contextmanager
def _keyword_leg(
    app: App, conn: psycopg.Connection, request: SearchRequest, spares: Spare
) -> Iterator[tuple[KeywordLeg | None, str]]:
    """A hybrid search's KeywordLeg: on a spare pool connection ("parallel"), else on the request's own `conn`,
    beside the embedding but before the vector leg ("fallback" when the pool had none idle at once, "sequential"
    with a single connection). Not hybrid: None."""
    if request.mode != "hybrid":
        yield None, ""
        return

    with spares() as spare:
        if spare is None:
            leg = KeywordLeg(app, conn, request)
            how = "fallback" if app.connections.stats() is not None else "sequential"
        else:
            with driver_errors(app.settings):
                if app.kb is not None:
                    bind(spare, app.kb.schema)
            leg, how = KeywordLeg(app, spare, request), "parallel"
        try:
            yield leg, how
        finally:
            leg.wait()  # its connection is given back (or used again) only once the leg is done with it


_legs: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The threads that run keyword legs beside their requests (made on first use, shared by the process)."""
    global _legs
    if _legs is None:
        _legs = ThreadPoolExecutor(max_workers=16, thread_name_prefix="ragvps-keyword-leg")
    return _legs


def _search(
    app: App,
    conn: psycopg.Connection,
    text: str,
    embedding: NDArray[np.float32] | None,
    request: SearchRequest,
    timings: dict[str, float],
    keyword: KeywordLeg | None,
) -> tuple[list[Hit], EmbeddingSet]:
    for attempt in range(3):
        try:
            # One transaction, not autocommit: the vector leg locks the embedding table before the evidence query
            # locks chunks, the order a switch's DROP TABLE takes them in; statement by statement the evidence
            # query would take chunks first and deadlock with it (test_switch_queries found it).
            with driver_errors(app.settings), conn.transaction():
                eset = app.active_set(conn, "query")
                hits = search_legs(
                    conn,
                    eset,
                    text,
                    embedding,
                    app.settings,
                    request.mode,
                    request.k,
                    request.filters,
                    timings,
                    keyword,
                )
            if keyword is not None:
                timings["keyword_ms"] = keyword.ms  # its own time, on its connection, beside the embedding
            app.set_matched = True
            return hits, eset
        except ModelMismatchError:
            app.set_matched = False  # the next search refuses before embedding again
            raise
        except ActiveSetChangedError:
            # A model switch committed between reading the active set and searching its table: the
            # old table is gone, the new set is active and holds the same chunks. Read it again.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
