"""Generate stage: an answer with citations from the retrieved chunks.

`prompt` (the fixed layout), `budget` (what fits, counted with tiktoken), `citations` ([n] -> chunk),
`llm/` (one small httpx client per provider), `extractive` (the default with no LLM), `cache` (answers
in PostgreSQL), `registry` (generator kind -> implementation), `answer` (the use case).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragvps.retrieve.filters import Filters
    from ragvps.retrieve.search import Mode


def _no_filters() -> Filters:
    from ragvps.retrieve.filters import Filters

    return Filters()


@dataclass(frozen=True)
class AskRequest:
    question: str
    k: int | None = None  # chunks retrieved; None: max(answer_chunks, top_k) (rerank_candidates with a reranker)
    mode: Mode = "hybrid"
    filters: Filters = field(default_factory=_no_filters)
    use_cache: bool = True


@dataclass
class Answer:
    answer: str
    answered: bool
    extractive: bool
    citations: list[dict[str, Any]]  # number, chunk_id, path, heading_path, start, end
    invalid_citations: int
    sources: list[dict[str, Any]]  # what was sent: number, chunk_id, path, heading_path, start, end, score, text
    left_out: dict[str, int]  # reason (answer_chunks, context_window, answer_min_score) -> candidates
    usage: dict[str, int]  # prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens
    cache: str  # "hit" | "miss" | "off" (off: not consulted, by request, setting, or a refusal without a call)
    generator: str
    model: str
    prompt_version: str
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds


__all__ = ["Answer", "AskRequest"]
