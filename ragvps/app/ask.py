"""The answer use case: retrieve, rerank (optional), fit the budget, consult the cache, generate, cite.

Nothing relevant retrieved (or nothing above answer_min_score) answers with the refusal sentence and
makes no LLM request. A callback that raises (or Ctrl-C) ends the stream, which closes the upstream
connection, and nothing is cached.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

from ragvps.app.requests import Answer, AskRequest, PromptPreview, SearchRequest
from ragvps.generate import budget, cache, citations
from ragvps.generate.prompt import PROMPT_VERSION, REFUSAL, Source

if TYPE_CHECKING:
    import psycopg

    from ragvps.app.requests import SearchResult
    from ragvps.config import GenerateSettings, Settings
    from ragvps.generate.budget import Fit
    from ragvps.generate.registry import Generator

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
    """Retrieve (app.search reranks when a reranker is configured), drop hits under the floor, fit the budget."""
    clock = clock or _Clock()
    s = app.settings
    k = request.k or max(s.generate.answer_chunks, s.search.top_k)
    result = app.search(SearchRequest(request.question, k=k, mode=request.mode, filters=request.filters))
    clock.lap("retrieve_ms")
    clock.timings.update(result.timings)
    hits = result.hits
    left: Counter[str] = Counter()
    kept = [h for h in hits if h.score >= s.generate.min_score]
    if len(kept) < len(hits):
        left["answer_min_score"] = len(hits) - len(kept)
    candidates = [Source(0, h.chunk_id, h.path, h.heading_path, h.start, h.end, h.score, h.text) for h in kept]
    fit = budget.fit(result.query, candidates, request_settings(s.generate, request), request.history)
    left.update(fit.left_out)
    clock.lap("budget_ms")
    return fit, dict(left)


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
        changed["max_answer_tokens"] = request.max_tokens
    return dataclasses.replace(g, **changed) if changed else g


def generation_settings(app: App, request: AskRequest | None = None) -> dict[str, Any]:
    """The settings that shape an answer, for the cache key (never the API key)."""
    g = app.settings.generate if request is None else request_settings(app.settings.generate, request)
    return {"url": g.url, "temperature": g.temperature, "answer_reserve": g.max_answer_tokens,
            "version": app.generator.version}


def ask(app: App, request: AskRequest, on_sources: OnSources | None = None,
        on_token: OnToken | None = None) -> Answer:
    on_sources, on_token = on_sources or _ignore, on_token or _ignore
    clock = _Clock()
    fit, left_out = prepare(app, request, clock)
    gen = app.generator
    sources = list(fit.prompt.sources)
    shown = [asdict(s) for s in sources]
    question = fit.prompt.question

    def answer(parsed: citations.Parsed, usage: dict[str, int], status: str) -> Answer:
        return Answer(parsed.text, parsed.answered, gen.extractive,
                      [asdict(c) for c in parsed.citations], parsed.invalid, shown, left_out, usage, status,
                      gen.name, gen.model, PROMPT_VERSION, clock.total())

    if not sources:  # nothing relevant: the refusal, and no request
        on_sources(shown)
        on_token(REFUSAL)
        return answer(citations.parse(REFUSAL, []), _usage(), "off")

    use_cache = request.use_cache and app.settings.generate.cache
    key = cache.key(question, gen.name, gen.model, generation_settings(app, request), sources)
    on_sources(shown)
    if use_cache:
        with app.connection() as conn:
            hit = cache.get(conn, key)
        clock.lap("cache_ms")
        if hit is not None:
            on_token(hit["text"])
            parsed = citations.parse(hit["text"], sources)
            return answer(parsed, _usage(), "hit")
    generation = gen.generate(fit, on_token)
    clock.lap("generate_ms")
    parsed = citations.parse(generation.text, sources)
    usage = _usage(**asdict(generation.usage))
    if use_cache:
        with app.connection() as conn:
            cache.put(conn, key, question, gen.name, gen.model, sources,
                      {"text": generation.text, "finish": generation.finish, "usage": usage},
                      usage["prompt_tokens"], usage["completion_tokens"])
        clock.lap("cache_ms")
    return answer(parsed, usage, "miss" if use_cache else "off")


def _usage(prompt_tokens: int = 0, completion_tokens: int = 0, cached_tokens: int = 0,
           cache_creation_tokens: int = 0) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "cached_tokens": cached_tokens,
            "cache_creation_tokens": cache_creation_tokens}
