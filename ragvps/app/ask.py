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
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

from ragvps.app.requests import Answer, AskRequest, PromptPreview, SearchRequest, jsonable
from ragvps.generate import budget, cache, citations
from ragvps.generate.prompt import PROMPT_VERSION, REFUSAL, Source

if TYPE_CHECKING:
    import psycopg

    from ragvps.app.requests import SearchResult
    from ragvps.config import GenerateSettings, Settings
    from ragvps.generate.budget import Fit
    from ragvps.generate.registry import Generator
    from ragvps.retrieve.search import Hit

OnSources = Callable[[list[dict[str, Any]]], None]
OnToken = Callable[[str], None]


class App(Protocol):
    """What the ask use case needs of the App (ragvps.app.core.App), so this module never imports it."""

    settings: Settings

    @property
    def generator(self) -> Generator: ...

    def search(self, request: SearchRequest) -> SearchResult: ...

    def connection(self) -> AbstractContextManager[psycopg.Connection]: ...


def _ignore(_: Any) -> None:
    pass


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


def prepare(app: App, request: AskRequest, clock: _Clock | None = None) -> tuple[Fit, dict[str, int]]:
    """Retrieve (app.search reranks when a reranker is configured), drop hits under the evidence floor, fit the
    budget."""
    from ragvps.app.checks import check_ask

    fit, left, _ = _prepare(app, check_ask(request, app.settings.serve.max_k), clock)
    return fit, left


def _prepare(app: App, request: AskRequest, clock: _Clock | None = None) -> tuple[Fit, dict[str, int], list[Hit]]:
    """prepare() for a request already checked."""
    clock = clock or _Clock()
    s = app.settings
    k = request.k or max(s.generate.answer_chunks, s.search.top_k)
    result = app.search(SearchRequest(request.question, k=k, mode=request.mode, filters=request.filters))
    clock.lap("retrieve_ms")
    clock.timings.update(result.timings)
    hits = result.hits
    left: Counter[str] = Counter()
    kept = [h for h in hits if h.evidence >= s.generate.min_evidence]
    if len(kept) < len(hits):
        left["answer_min_evidence"] = len(hits) - len(kept)
    fit = budget.fit(result.query, [_source(h) for h in kept], request_settings(s.generate, request),
                     request.history)
    left.update(fit.left_out)
    clock.lap("budget_ms")
    return fit, dict(left), hits


def _source(h: Hit) -> Source:
    return Source(0, h.chunk_id, h.path, h.heading_path, h.start, h.end, h.score, h.text, h.evidence, h.pages)


def _retrieved(hits: list[Hit]) -> list[dict[str, Any]]:
    return [{"chunk_id": h.chunk_id, "path": h.path, "heading_path": h.heading_path, "score": h.score,
             "cosine": h.cosine, "terms": h.terms, "evidence": h.evidence} for h in hits]


def build_prompt(app: App, request: AskRequest) -> PromptPreview:
    fit, left_out = prepare(app, request)
    g = app.generator
    p = fit.prompt
    return PromptPreview(p.system, p.user, p.as_text(), fit.prompt_tokens, fit.system_tokens, fit.window,
                         fit.reserve, fit.encoding, [asdict(s) for s in p.sources], left_out, g.name, g.model,
                         p.version)


def request_settings(g: GenerateSettings, request: AskRequest) -> GenerateSettings:
    """The generator settings with the request's temperature and answer length (a chat client's), if any."""
    changed: dict[str, Any] = {}
    if request.temperature is not None:
        changed["temperature"] = request.temperature
    if request.max_tokens is not None:
        changed["answer_reserve"] = request.max_tokens
    return dataclasses.replace(g, **changed) if changed else g


def generation_settings(app: App, request: AskRequest | None = None) -> dict[str, Any]:
    """The settings that shape an answer, for the cache key (never the API key)."""
    g = app.settings.generate if request is None else request_settings(app.settings.generate, request)
    return {"url": g.url, "temperature": g.temperature, "answer_reserve": g.answer_reserve,
            "version": app.generator.version, "min_evidence": app.settings.generate.min_evidence}


def ask(app: App, request: AskRequest, on_sources: OnSources | None = None,
        on_token: OnToken | None = None) -> Answer:
    from ragvps.app.checks import check_ask

    on_sources, on_token = on_sources or _ignore, on_token or _ignore
    clock = _Clock()
    request = check_ask(request, app.settings.serve.max_k)
    use_cache = request.use_cache and app.settings.generate.cache
    memo, seen_at = "", -1
    if use_cache:  # the same question since nothing changed: one query, no embedding, no search
        memo = cache.memo_key(memo_parts(app, request))
        with app.connection() as conn:
            seen_at, remembered, retrieval = cache.memo_get(conn, memo)
        clock.lap("memo_ms")
        if remembered is not None and retrieval is not None:
            return _remembered(app, remembered, retrieval, clock, on_sources, on_token)
    fit, left_out, hits = _prepare(app, request, clock)
    gen = app.generator
    sources = list(fit.prompt.sources)
    question = fit.prompt.question
    retrieval = {"shown": [asdict(s) for s in sources], "left_out": left_out,
                 "evidence": max((h.evidence for h in hits), default=0.0), "retrieved": _retrieved(hits)}

    def answer(parsed: citations.Parsed, usage: dict[str, int], status: str, quotes: Any = ()) -> Answer:
        return _answer(app, parsed, retrieval, usage, status, clock, quotes)

    def remember(answer_key: str) -> None:
        with app.connection() as conn:
            cache.memo_put(conn, memo, seen_at, answer_key, jsonable(retrieval))

    shown = retrieval["shown"]
    if not sources:  # no evidence: the refusal, and no generator runs (no LLM request)
        on_sources(shown)
        on_token(REFUSAL)
        status, refusal_key = _refusal_cache(app, question, hits, use_cache)
        if use_cache:
            remember(refusal_key)
        return answer(citations.parse(REFUSAL, []), _usage(), status)

    key = cache.key(question, gen.name, gen.model, generation_settings(app, request), sources)
    on_sources(shown)
    if use_cache:
        with app.connection() as conn:
            hit = cache.get(conn, key)
        clock.lap("cache_ms")
        if hit is not None:
            remember(key)
            on_token(hit["text"])
            parsed = citations.parse(hit["text"], sources)
            return answer(parsed, _usage(), "hit", hit.get("quotes"))
    generation = gen.generate(fit, on_token)
    clock.lap("generate_ms")
    parsed = citations.parse(generation.text, sources)
    usage = _usage(**asdict(generation.usage))
    if use_cache:
        with app.connection() as conn:
            cache.put(conn, key, question, gen.name, gen.model, sources,
                      {"text": generation.text, "finish": generation.finish, "usage": usage,
                       "quotes": generation.quotes}, usage["prompt_tokens"], usage["completion_tokens"])
        remember(key)
        clock.lap("cache_ms")
    return answer(parsed, usage, "miss" if use_cache else "off", generation.quotes)


def memo_parts(app: App, request: AskRequest) -> dict[str, Any]:
    """What the memo's key holds: the request as asked and every setting that shapes the search and the
    answer (the embedder, index, search, reranker and generator groups), secrets left out."""
    s = app.settings
    gen = app.generator
    groups = {name: {f.name: getattr(group, f.name) for f in dataclasses.fields(group)
                     if not f.metadata.get("secret")}
              for name, group in (("embed", s.embed), ("index", s.index), ("search", s.search),
                                  ("rerank", s.rerank), ("generate", s.generate))}
    return {"question": request.question, "k": request.k, "mode": request.mode,
            "filters": jsonable(request.filters), "history": request.history, "temperature": request.temperature,
            "max_tokens": request.max_tokens, "max_k": s.serve.max_k, "generator": [gen.name, gen.model, gen.version],
            "settings": groups}


def _remembered(app: App, remembered: dict[str, Any], retrieval: dict[str, Any], clock: _Clock,
                on_sources: OnSources, on_token: OnToken) -> Answer:
    """The answer from the memo: what the first asking sent, retrieved and answered."""
    text = str(remembered["text"])
    on_sources(retrieval["shown"])
    on_token(text)
    parsed = citations.parse(text, [Source(**d) for d in retrieval["shown"]])
    return _answer(app, parsed, retrieval, _usage(), "hit", clock, remembered.get("quotes"))


def _answer(app: App, parsed: citations.Parsed, retrieval: dict[str, Any], usage: dict[str, int], status: str,
            clock: _Clock, quotes: Any = ()) -> Answer:
    """The Answer of a parsed text and what it was retrieved from (the memo keeps the same `retrieval`)."""
    gen = app.generator
    return Answer(parsed.text, parsed.answered, gen.extractive, [asdict(c) for c in parsed.citations],
                  parsed.invalid, list(retrieval["shown"]), dict(retrieval["left_out"]), usage, status, gen.name,
                  gen.model, PROMPT_VERSION, clock.total(), float(retrieval["evidence"] or 0.0),
                  app.settings.generate.min_evidence, list(quotes or []), list(retrieval["retrieved"]))


def _refusal_cache(app: App, question: str, hits: list[Hit], use_cache: bool) -> tuple[str, str]:
    """A refusal is cached like an answer, keyed on the chunks retrieved (a changed chunk misses): ("hit" when
    this refusal was cached already, "miss" when it is now, "off" when the cache is not used; its key)."""
    if not use_cache:
        return "off", ""
    gen = app.generator
    retrieved = [_source(h) for h in hits]
    key = cache.key(question, gen.name, gen.model, generation_settings(app) | {"refused": True}, retrieved)
    with app.connection() as conn:
        if cache.get(conn, key) is not None:
            return "hit", key
        cache.put(conn, key, question, gen.name, gen.model, retrieved,
                  {"text": REFUSAL, "finish": "refused", "usage": _usage()}, 0, 0)
    return "miss", key


def _usage(prompt_tokens: int = 0, completion_tokens: int = 0, cached_tokens: int = 0,
           cache_creation_tokens: int = 0) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "cached_tokens": cached_tokens,
            "cache_creation_tokens": cache_creation_tokens}
