"""The factory of each reranker that ragvps.backends.RERANKERS names (setting `reranker`), and rerank().

Every search calls rerank(); the reranker `none` keeps the search's order, `api` (rerank_api.py) orders the top
`rerank_candidates` hits by a rerank API's scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from ragvps import backends
from ragvps.config import RerankSettings
from ragvps.retrieve.search import Hit


class Reranker(Protocol):
    candidates: int  # how many of the search's first hits it orders (a search fetches at least this many)

    def order(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """The hits in the reranker's order, ranks from 1."""
        ...


class Scorer(Protocol):
    def scores(self, query: str, texts: Sequence[str]) -> list[float]: ...


class KeepOrder:
    """The reranker `none`: the hits as the search ranked them."""

    candidates = 0

    def order(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        return list(hits)


class ByScores:
    """The first `candidates` hits in the scorer's order, scored by it, ranks from 1; the rest after."""

    def __init__(self, scorer: Scorer, candidates: int):
        self.scorer, self.candidates = scorer, candidates

    def order(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        head, tail = list(hits[: self.candidates]), list(hits[self.candidates :])
        scores = self.scorer.scores(query, [f"{h.heading_path}\n{h.text}" if h.heading_path else h.text for h in head])
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        ranked = [dataclasses.replace(head[i], score=scores[i]) for i in order] + tail
        return [dataclasses.replace(h, rank=r) for r, h in enumerate(ranked, start=1)]


def none(settings: RerankSettings) -> Reranker:
    return KeepOrder()


def api(settings: RerankSettings) -> Reranker:
    # lazy: the api reranker (httpx) loads only when the settings choose it
    from ragvps.retrieve.rerank_api import ApiReranker

    return ByScores(ApiReranker(settings), settings.candidates)


def make_reranker(settings: RerankSettings) -> Reranker:
    factory = backends.RERANKERS[settings.kind].load()
    reranker: Reranker = factory(settings)
    return reranker


def rerank(query: str, hits: Sequence[Hit], settings: RerankSettings) -> list[Hit]:
    """The hits in the configured reranker's order (with reranker = none, as they are)."""
    return make_reranker(settings).order(query, hits) if hits else []
