"""The answer use case: retrieve, rerank (optional), gate on evidence, fit the budget, consult the cache,
generate, cite.

The gate: hits whose evidence (rank-independent, retrieve/evidence.py) is below answer_min_evidence are not
sent; when none is left the answer is the refusal sentence and no generator runs (so no LLM request). The
refusal is cached like an answer, keyed on what was retrieved. A callback that raises (or Ctrl-C) ends the
stream, which closes the upstream connection, and nothing is cached.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragvps.app.checks import check_ask
from ragvps.app.ports import App, OnSources, OnToken, ignore
from ragvps.app.rendering import jsonable
from ragvps.app.requests import (
    Answer,
    AskRequest,
    CacheStatus,
    PromptPreview,
    Retrieval,
    Retrieved,
    SearchRequest,
)
from ragvps.app.search import search
from ragvps.db import store
from ragvps.generate import budget, cache, citations
from ragvps.generate.cache import Cached
from ragvps.generate.client_context import Attached, joined
from ragvps.generate.prompt import PROMPT_VERSION, REFUSAL, Source
from ragvps.generate.records import Quote, ToolCall, Usage
from ragvps.text import introduced

if TYPE_CHECKING:
    import psycopg

    from ragvps.app.ports import Spare
    from ragvps.config import GenerateSettings
    from ragvps.db.replicated import Reader, Write
    from ragvps.generate.budget import Fit
    from ragvps.retrieve.search import Hit


class _Clock:
    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.timings: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round((now - self.last) * 1000, 2)
        self.last = now

    def total(self) -> dict[str, float]:
        return self.timings | {"total_ms": round((time.perf_counter() - self.start) * 1000, 2)}


@dataclass(frozen=True)
class Prepared:
    """A request's retrieval and the prompt that fits: what the generator gets and what the Answer reports."""

    fit: Fit
    retrieval: Retrieval
    hits: tuple[Hit, ...]


def prepare(
    app: App, request: AskRequest, conn: psycopg.Connection, clock: _Clock | None = None, spare: Spare | None = None
) -> Prepared:
    """Retrieve (reranked when a reranker is configured), drop hits under the evidence floor, fit the budget, on the
    ask's connection (`spare`: where its search's second connection comes from). `request` is checked already (ask,
    build_prompt)."""
    clock = clock or _Clock()
    s, o = app.settings, request.overrides
    k = o.k or max(s.generate.answer_chunks, s.search.top_k)
    result = search(app, SearchRequest(request.question, k=k, mode=o.mode, filters=o.filters), conn, spare)
    clock.lap("retrieve_ms")
    clock.timings.update(result.timings)
    hits = tuple(result.hits)
    left: Counter[str] = Counter()
    kept = [h for h in hits if h.evidence >= s.generate.min_evidence]
    if len(kept) < len(hits):
        left["answer_min_evidence"] = len(hits) - len(kept)
    candidates = [_source(h) for h in kept]
    candidates = [_completed(conn, c) for c in candidates]
    if request.attached:  # the client's own context: one more source, within answer_chunks and the window
        candidates.insert(
            min(len(candidates), max(0, s.generate.answer_chunks - 1)),
            _attached(request.attached, o.generation(s.generate), s.generate.min_evidence),
        )
    fit = budget.fit(result.query, candidates, o.generation(s.generate), request.history)
    if request.tools or request.turn or request.said:
        fit.prompt = dataclasses.replace(fit.prompt, tools=request.tools, turn=request.turn, said=request.said)
    left.update(fit.left_out)
    clock.lap("budget_ms")
    retrieval = Retrieval(
        shown=fit.prompt.sources,
        left_out=dict(left),
        evidence=max((h.evidence for h in hits), default=0.0),
        retrieved=tuple(_retrieved(h) for h in hits),
    )
    return Prepared(fit, retrieval, hits)


def _source(h: Hit) -> Source:
    return Source(
        number=0,
        chunk_id=h.chunk_id,
        path=h.path,
        heading_path=h.heading_path,
        start=h.start,
        end=h.end,
        score=h.score,
        text=h.text,
        evidence=h.evidence,
        pages=h.pages,
    )


def _completed(conn: psycopg.Connection, source: Source) -> Source:
    """A chunk ending in a sentence with a colon, with what that sentence introduces (a command, a list, a table)
    from the next chunk of its document, when the chunker cut between them."""
    if not source.text.rstrip().endswith(":") or "#" not in source.chunk_id:
        return source
    doc_id, _, seq = source.chunk_id.rpartition("#")
    if not seq.isdigit():
        return source
    found = store.following_chunk(conn, doc_id, int(seq) + 1)
    conn.commit()
    if found is None or found[1] < source.end:
        return source
    text = source.text + "\n" * max(1, min(found[1] - source.end, 2)) + found[0]
    span = introduced(text, len(source.text.rstrip()))
    if span is None:
        return source
    return dataclasses.replace(source, text=text[: span[1]], end=source.end + span[1] - len(source.text))


def _attached(attached: tuple[tuple[str, str], ...], settings: GenerateSettings, evidence: float) -> Source:
    """The client's context (an attached file, its own retrieval) as a source, cut to fit the window."""
    one = joined(tuple(Attached(name, text) for name, text in attached))
    assert one is not None
    text = budget.clip(one.text, settings)
    return Source(
        number=0,
        chunk_id="client#1",
        path=one.name,
        heading_path="",
        start=0,
        end=len(text),
        score=0.0,
        text=text,
        evidence=evidence,
    )


def _retrieved(h: Hit) -> Retrieved:
    return Retrieved(
        chunk_id=h.chunk_id,
        path=h.path,
        heading_path=h.heading_path,
        score=h.score,
        cosine=h.cosine,
        terms=h.terms,
        evidence=h.evidence,
    )


def build_prompt(app: App, request: AskRequest) -> PromptPreview:
    checked = check_ask(request, app.settings.serve.max_k)
    prepared = app.read(lambda r: prepare(app, checked, r.conn, spare=r.spare))
    fit, g, p = prepared.fit, app.generator, prepared.fit.prompt
    return PromptPreview(
        system=p.system,
        user=p.user,
        text=p.as_text(),
        prompt_tokens=fit.prompt_tokens,
        system_tokens=fit.system_tokens,
        window=fit.window,
        reserve=fit.reserve,
        encoding=fit.encoding,
        sources=p.sources,
        left_out=prepared.retrieval.left_out,
        generator=g.name,
        model=g.model,
        prompt_version=p.version,
    )


def generation_settings(app: App, request: AskRequest | None = None) -> dict[str, object]:
    """The settings that shape an answer, for the cache key (never the API key)."""
    g = app.settings.generate if request is None else request.overrides.generation(app.settings.generate)
    return {
        "url": g.url,
        "temperature": g.temperature,
        "answer_reserve": g.answer_reserve,
        "version": app.generator.version,
        "min_evidence": app.settings.generate.min_evidence,
    } | ({"turn": request.turn, "said": request.said} if request and (request.turn or request.said) else {})


class _Asking:
    """One ask: the request, its clock and callbacks, and the memo it may fill."""

    def __init__(self, app: App, request: AskRequest, on_sources: OnSources, on_token: OnToken):
        self.app, self.request, self.on_sources, self.on_token = app, request, on_sources, on_token
        self.clock = _Clock()
        # a client's tools: the LLM may call one, which the cache does not keep
        self.use_cache = request.use_cache and app.settings.generate.cache and not request.tools
        self.memo, self.seen_at = "", -1
        self.replica: str | None = None  # the reading half's replica (None: the primary, which takes writes at once)
        self.later: list[Write] = []  # the reading half's writes, for the primary (on a replica)

    def reading(self, reader: Reader) -> None:
        """The reading half (run again when its replica failed under it) starts on `reader`."""
        self.replica, self.later, self.clock = reader.replica, [], _Clock()

    def write(self, conn: psycopg.Connection, write: Write) -> None:
        """A write of the reading half: on its own connection when it is the primary's, else kept for the primary."""
        if self.replica is None:
            write(conn)
        else:
            self.later.append(write)

    def written(self) -> None:
        """The writes kept for the primary: now, or later when it is away (a read never fails on them)."""
        if self.later:
            self.app.connections.write_behind(self.later, self.app.kb.schema if self.app.kb else None)
            self.later = []

    def get(self, conn: psycopg.Connection, key: str) -> Cached | None:
        """The cached answer under `key`; its hit counted at once on the primary, later from a replica."""
        hit = cache.get(conn, key, count=self.replica is None)
        if hit is not None and self.replica is not None:
            self.later.append(lambda c: cache.count_hit(c, key))
        return hit

    def remembered(self, conn: psycopg.Connection) -> Answer | None:
        """The same question since nothing changed: one query, no embedding, no search."""
        self.memo = cache.memo_key(memo_parts(self.app, self.request))
        if self.replica is None:
            self.seen_at, cached, retrieval = cache.memo_get(conn, self.memo)
        else:
            self.seen_at, cached, retrieval, key = cache.memo_peek(conn, self.memo)
            if cached is not None and key is not None:
                self.later.append(lambda c: cache.count_hit(c, key))
        self.clock.lap("memo_ms")
        if cached is None or retrieval is None:
            return None
        known = Retrieval.from_json(retrieval)
        self.on_sources(known.shown)
        self.on_token(cached.text)
        return self.answer(cached.text, known, Usage(), "hit", cached.quotes)

    def remember(self, conn: psycopg.Connection, retrieval: Retrieval, answer_key: str) -> None:
        if self.use_cache:
            self.write(conn, self.memo_write(retrieval, answer_key))

    def memo_write(self, retrieval: Retrieval, answer_key: str) -> Write:
        memo, seen_at, kept = self.memo, self.seen_at, retrieval.to_json()
        return lambda c: cache.memo_put(c, memo, seen_at, answer_key, kept)

    def refuse(self, conn: psycopg.Connection, prepared: Prepared) -> Answer:
        """No evidence: the refusal, and no generator runs (no LLM request)."""
        status, key = self.refusal_cache(conn, prepared.fit.prompt.question, prepared.hits)
        self.on_sources(prepared.retrieval.shown)
        self.on_token(REFUSAL)
        self.remember(conn, prepared.retrieval, key)
        return self.answer(REFUSAL, prepared.retrieval, Usage(), status)

    def refusal_cache(self, conn: psycopg.Connection, question: str, hits: tuple[Hit, ...]) -> tuple[CacheStatus, str]:
        """A refusal is cached like an answer, keyed on the chunks retrieved (a changed chunk misses): ("hit" when
        this refusal was cached already, "miss" when it is now, "off" when the cache is not used; its key)."""
        if not self.use_cache:
            return "off", ""
        app, gen = self.app, self.app.generator
        retrieved = [_source(h) for h in hits]
        key = cache.key(question, gen.name, gen.model, generation_settings(app) | {"refused": True}, retrieved)
        if self.get(conn, key) is not None:
            return "hit", key
        refused = Cached(text=REFUSAL, finish="refused")
        self.write(conn, lambda c: cache.put(c, key, question, gen.name, gen.model, retrieved, refused))
        return "miss", key

    def cache_key(self, prepared: Prepared) -> str:
        gen = self.app.generator
        return cache.key(
            prepared.fit.prompt.question,
            gen.name,
            gen.model,
            generation_settings(self.app, self.request),
            prepared.fit.prompt.sources,
        )

    def cached(self, conn: psycopg.Connection, prepared: Prepared) -> Answer | None:
        """The answer cached for these sources, if the cache is used and has it (sources shown first, once read: a
        replica failing under the read runs it again elsewhere, and the client sees them once)."""
        hit = None
        if self.use_cache:
            key = self.cache_key(prepared)
            hit = self.get(conn, key)
            self.clock.lap("cache_ms")
        self.on_sources(prepared.fit.prompt.sources)
        if hit is None:
            return None
        self.remember(conn, prepared.retrieval, key)
        self.on_token(hit.text)
        return self.answer(hit.text, prepared.retrieval, Usage(), "hit", hit.quotes)

    def generate(self, prepared: Prepared) -> Answer:
        """The generator's answer, with no connection held while it runs; then one for the cache's writes."""
        gen, sources = self.app.generator, prepared.fit.prompt.sources
        generation = gen.generate(prepared.fit, self.on_token)
        self.clock.lap("generate_ms")
        if self.use_cache:
            key, question = self.cache_key(prepared), prepared.fit.prompt.question
            g = generation
            made = Cached(text=g.text, finish=g.finish, usage=g.usage, quotes=g.quotes)
            self.later = [
                lambda c: cache.put(c, key, question, gen.name, gen.model, sources, made),
                self.memo_write(prepared.retrieval, key),
            ]
            self.written()  # on the primary now, or kept for it while it is away
            self.clock.lap("cache_ms")
        return self.answer(
            generation.text,
            prepared.retrieval,
            generation.usage,
            "miss" if self.use_cache else "off",
            generation.quotes,
            generation.tool_calls,
        )

    def answer(
        self,
        text: str,
        retrieval: Retrieval,
        usage: Usage,
        status: CacheStatus,
        quotes: tuple[Quote, ...] = (),
        tool_calls: tuple[ToolCall, ...] = (),
    ) -> Answer:
        """The Answer of a text and what it was retrieved from (the memo keeps the same retrieval)."""
        gen = self.app.generator
        parsed = citations.parse(text, retrieval.shown, gen.extractive)
        answer, minimum = parsed.text, self.app.settings.generate.min_evidence
        if not parsed.answered and not tool_calls and retrieval.shown:
            note = unquoted_note(retrieval, minimum)
            self.on_token("\n\n" + note)
            answer += "\n\n" + note
        return Answer(
            answer=answer,
            answered=parsed.answered,
            extractive=gen.extractive,
            citations=tuple(parsed.citations),
            invalid_citations=parsed.invalid,
            retrieval=retrieval,
            usage=usage,
            cache=status,
            generator=gen.name,
            model=gen.model,
            prompt_version=PROMPT_VERSION,
            timings=self.clock.total(),
            min_evidence=minimum,
            quotes=quotes,
            tool_calls=tool_calls,
        )


def unquoted_note(retrieval: Retrieval, minimum: float) -> str:
    """Why a refusal came although sources passed the evidence gate, and which sources came closest (the page's
    explanation, said in the answer itself so that chat clients and MCP show it too)."""
    closest = "; ".join(  # no [n]: a refusal cites nothing, so no source list follows to resolve a number
        f"`{s.path}`" + (" \u203a " + s.heading_path.replace(" > ", " \u203a ") if s.heading_path else "")
        for s in retrieval.shown[:3]
    )
    return (
        f"No sentence in the sources answers this directly, though they passed the evidence check (evidence "
        f"{retrieval.evidence:.2f}, enough to search: {minimum:.2f}). The closest: {closest}."
    )


def ask(app: App, request: AskRequest, on_sources: OnSources | None = None, on_token: OnToken | None = None) -> Answer:
    asking = _Asking(app, check_ask(request, app.settings.serve.max_k), on_sources or ignore, on_token or ignore)

    def reading(reader: Reader) -> Answer | Prepared:  # the reading half: the memo, the search, the cache
        asking.reading(reader)
        conn = reader.conn
        if asking.use_cache and (remembered := asking.remembered(conn)) is not None:
            return remembered
        prepared = prepare(app, asking.request, conn, asking.clock, reader.spare)
        if not prepared.fit.prompt.sources:
            return asking.refuse(conn, prepared)
        if (hit := asking.cached(conn, prepared)) is not None:
            return hit
        return prepared

    got = app.read(reading)  # on a replica when there are any; no connection held through the LLM's answer
    asking.written()
    return got if isinstance(got, Answer) else asking.generate(got)


def memo_parts(app: App, request: AskRequest) -> dict[str, object]:
    """What the memo's key holds: the request as asked and every setting that shapes the search and the
    answer (the embedder, index, search, reranker and generator groups), secrets left out."""
    s, o = app.settings, request.overrides
    gen = app.generator
    groups = {
        name: {f.name: getattr(group, f.name) for f in dataclasses.fields(group) if not f.metadata.get("secret")}
        for name, group in (
            ("embed", s.embed),
            ("index", s.index),
            ("search", s.search),
            ("rerank", s.rerank),
            ("generate", s.generate),
        )
    }
    return {
        "question": request.question,
        "attached": request.attached,
        "k": o.k,
        "mode": o.mode,
        "filters": jsonable(o.filters),
        "history": request.history,
        "turn": request.turn,
        "said": request.said,
        "temperature": o.temperature,
        "max_tokens": o.max_tokens,
        "max_k": s.serve.max_k,
        "generator": [gen.name, gen.model, gen.version],
        "settings": groups,
    }
