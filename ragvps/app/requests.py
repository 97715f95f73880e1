"""The app layer's request and report types: what an interface builds to call a use case and what it renders,
and the one JSON rendering of them (`jsonable`) that `--json`, HTTP and MCP share.

Plain dataclasses; importing them loads no stage.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragvps.db.connections import PoolStats
    from ragvps.retrieve.filters import Filters
    from ragvps.retrieve.search import Hit, Mode


@dataclass(frozen=True)
class SearchRequest:
    query: str
    k: int | None = None  # None: setting top_k
    mode: Mode = "hybrid"
    filters: Filters | None = None


@dataclass
class SearchResult:
    query: str
    mode: str
    hits: list[Hit]
    model: str
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds


@dataclass
class Health:
    ready: bool  # the database answers: an ingest can start (and a search, once something is in)
    database: bool
    empty: bool = False  # nothing ingested yet: a state, not a failure
    model: str | None = None
    dims: int | None = None
    vector_type: str | None = None
    chunks: int = 0
    error: str | None = None
    pool: PoolStats | None = None  # a server's connection pool: size, busy, waiting, stalled_s


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
    history: tuple[tuple[str, str], ...] = ()  # earlier turns (role, text), sent before the sources
    temperature: float | None = None  # None: the setting temperature
    max_tokens: int | None = None  # the answer's length at most; None: the setting answer_reserve


@dataclass
class Answer:
    answer: str
    answered: bool
    extractive: bool
    citations: list[dict[str, Any]]  # number, chunk_id, path, heading_path, start, end
    invalid_citations: int
    sources: list[dict[str, Any]]  # what was sent: number, chunk_id, path, heading_path, start, end, score, text,
    #                                evidence
    left_out: dict[str, int]  # reason (answer_chunks, context_window, answer_min_evidence) -> candidates
    usage: dict[str, int]  # prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens
    cache: str  # "hit" | "miss" | "off" (off: not consulted, by request, setting, or a refusal without a call)
    generator: str
    model: str
    prompt_version: str
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds
    evidence: float = 0.0  # the best retrieved chunk's evidence, 0..1; below min_evidence: refused, no LLM request
    min_evidence: float = 0.0  # the setting answer_min_evidence this answer was gated with
    quotes: list[dict[str, Any]] = field(default_factory=list)  # extractive: number, chunk_id, path, start, end,
    #                                                             text (offsets in the source document)
    retrieved: list[dict[str, Any]] = field(default_factory=list)  # every candidate: chunk_id, path, score,
    #                                                                cosine, terms, evidence (why it was refused)


@dataclass(frozen=True)
class ChatRequest:
    """A conversation: every message (role, text) so far, the last one the user's question; no server state."""

    messages: tuple[tuple[str, str], ...]
    k: int | None = None
    mode: Mode = "hybrid"
    filters: Filters = field(default_factory=_no_filters)
    use_cache: bool = True
    temperature: float | None = None
    max_tokens: int | None = None
    history: bool = True  # False: retrieve for the last question alone (the bench's baseline)


@dataclass
class ChatAnswer:
    content: str  # the answer with its [n] markers and a Markdown list of the cited sources: what a client shows
    answer: Answer  # the ask use case's answer to the standalone question (citations, sources, cache, ...)
    question: str  # the conversation's last user turn
    standalone: str  # what was retrieved and answered: the question made standalone
    rewrite: str  # "none" (a first turn) | "rule" (no LLM configured) | "llm" (one short rewriting call)
    rewrite_cache: str  # "hit" | "miss" | "off"
    rewrite_usage: dict[str, int]
    usage: dict[str, int]  # the answer's and the rewriting call's together


@dataclass
class PromptPreview:
    """`ragvps ask --show-prompt`: the exact prompt, its token count, and what was left out; nothing is sent."""

    system: str
    user: str
    text: str
    prompt_tokens: int
    system_tokens: int
    window: int
    reserve: int
    encoding: str
    sources: list[dict[str, Any]]
    left_out: dict[str, int]
    generator: str
    model: str
    prompt_version: str


def jsonable(obj: Any) -> Any:
    """Dataclasses, tuples, sets, paths and numpy values as plain JSON values; NaN and infinities as null."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:  # numpy scalars
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # numpy arrays
        return jsonable(obj.tolist())
    return str(obj)
