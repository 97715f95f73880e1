"""The app layer's request and report types: what an interface builds to call a use case and what it renders
(rendered as JSON by app/rendering.py, for `--json`, HTTP and MCP alike).

Plain dataclasses; importing them loads no stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ragvps.errors import UsageError
from ragvps.generate.budget import window_for
from ragvps.generate.prompt import Source as Source  # re-exported: the HTTP schema derives its shapes from these
from ragvps.generate.prompt import Turn
from ragvps.generate.records import Citation, Json, ToolCall, source_from_json, source_json
from ragvps.generate.records import Quote as Quote
from ragvps.generate.records import Usage as Usage
from ragvps.records import fields_dict
from ragvps.retrieve.filters import Filters

if TYPE_CHECKING:
    from ragvps.config import GenerateSettings
    from ragvps.db.connections import PoolStats
    from ragvps.db.replicas import ReplicaStatus
    from ragvps.retrieve.modes import Mode
    from ragvps.retrieve.search import Hit as Hit  # re-exported: the server renders hits


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
    legs: str = ""  # hybrid: "parallel" (two connections), "fallback" (pool busy: one after the other), "sequential"


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
    degraded: str | None = None  # answering, but not as configured: the primary away, a replica skipped (why)
    replicas: tuple[ReplicaStatus, ...] = ()  # each read replica's state and lag (setting database_replica_urls)


def _no_filters() -> Filters:
    return Filters()


@dataclass(frozen=True)
class Overrides:
    """What a request may set for itself: the search (k, mode, filters) and the answer (temperature, length).
    The one shape that carries them from an interface (CLI flags, an HTTP body, a chat client's request) to the
    search and, through `generation()`, to the generator."""

    k: int | None = None  # chunks retrieved; None: max(answer_chunks, top_k) (rerank_candidates with a reranker)
    mode: Mode = "hybrid"
    filters: Filters = field(default_factory=_no_filters)
    temperature: float | None = None  # None: the setting temperature
    max_tokens: int | None = None  # the answer's length at most; None: the setting answer_reserve

    def generation(self, settings: GenerateSettings) -> GenerateSettings:
        """The generator settings with this request's temperature and answer length, if it sets them."""
        changed: dict[str, float | int] = {}
        if self.temperature is not None:
            changed["temperature"] = self.temperature
        if self.max_tokens is not None:
            window = window_for(settings)
            if self.max_tokens >= window:  # the request's, not a setting: the asker's to change
                raise UsageError(
                    f"max_tokens={self.max_tokens:,} leaves no room for a prompt in the model's context "
                    f"window of {window:,} tokens (setting context_window): ask for fewer, e.g. "
                    f"{settings.answer_reserve:,}"
                )
            changed["answer_reserve"] = self.max_tokens
        return dataclasses.replace(settings, **changed) if changed else settings  # type: ignore[arg-type]


@dataclass(frozen=True)
class AskRequest:
    question: str
    overrides: Overrides = field(default_factory=Overrides)
    use_cache: bool = True
    history: tuple[Turn, ...] = ()  # earlier turns (role, text), sent before the sources
    attached: tuple[tuple[str, str], ...] = ()  # the client's own context (name, text): one more source
    tools: str = ""  # a chat client's tools, tool_choice, response_format (JSON text), passed to the LLM
    turn: str = ""  # a follow-up's own words, when `question` was made standalone from the history
    said: tuple[str, ...] = ()  # the earlier answers' text: an extractive follow-up quotes something new


CacheStatus = Literal["hit", "miss", "off"]


@dataclass(frozen=True)
class Retrieved:
    """One retrieved candidate, sent or not, with the signals that decided (why a question was refused)."""

    chunk_id: str
    path: str
    heading_path: str
    score: float
    cosine: float | None
    terms: float | None
    evidence: float

    def to_json(self) -> dict[str, object]:
        return fields_dict(self)

    @classmethod
    def from_json(cls, data: Json) -> Retrieved:
        cosine, terms = data.get("cosine"), data.get("terms")
        return cls(
            chunk_id=str(data["chunk_id"]),
            path=str(data["path"]),
            heading_path=str(data["heading_path"]),
            score=float(str(data["score"])),
            cosine=None if cosine is None else float(str(cosine)),
            terms=None if terms is None else float(str(terms)),
            evidence=float(str(data["evidence"])),
        )


@dataclass(frozen=True)
class Retrieval:
    """What an answer was retrieved from: the sources sent, what was left out and why, every candidate, and
    the best evidence. The memo keeps it, so a remembered answer reports the same."""

    shown: tuple[Source, ...]
    left_out: Mapping[str, int]  # reason (answer_chunks, context_window, answer_min_evidence) -> candidates
    evidence: float  # the best candidate's evidence, 0..1
    retrieved: tuple[Retrieved, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "shown": [source_json(s) for s in self.shown],
            "left_out": dict(self.left_out),
            "evidence": self.evidence,
            "retrieved": [r.to_json() for r in self.retrieved],
        }

    @classmethod
    def from_json(cls, data: Json) -> Retrieval:
        shown, left, retrieved = data["shown"], data["left_out"], data["retrieved"]
        assert isinstance(shown, list) and isinstance(left, dict) and isinstance(retrieved, list)
        return cls(
            shown=tuple(source_from_json(d) for d in shown),
            left_out={str(k): int(v) for k, v in left.items()},
            evidence=float(str(data["evidence"] or 0.0)),
            retrieved=tuple(Retrieved.from_json(d) for d in retrieved),
        )


@dataclass(frozen=True)
class Answer:
    answer: str
    answered: bool
    extractive: bool
    citations: tuple[Citation, ...]
    invalid_citations: int
    retrieval: Retrieval
    usage: Usage
    cache: CacheStatus  # off: not consulted, by request, setting, or a refusal without a call
    generator: str
    model: str
    prompt_version: str
    timings: Mapping[str, float]  # milliseconds
    min_evidence: float  # the setting answer_min_evidence this answer was gated with
    quotes: tuple[Quote, ...] = ()  # extractive: the sentences quoted (offsets in the source document)
    tool_calls: tuple[ToolCall, ...] = ()  # the functions the LLM called instead of (or besides) answering

    @property
    def sources(self) -> tuple[Source, ...]:
        """What was sent, numbered from 1."""
        return self.retrieval.shown

    @property
    def left_out(self) -> Mapping[str, int]:
        return self.retrieval.left_out

    @property
    def evidence(self) -> float:
        """The best retrieved chunk's evidence, 0..1; below min_evidence: refused, no LLM request."""
        return self.retrieval.evidence

    @property
    def retrieved(self) -> tuple[Retrieved, ...]:
        return self.retrieval.retrieved

    def to_json(self) -> dict[str, object]:
        return {
            "answer": self.answer,
            "answered": self.answered,
            "extractive": self.extractive,
            "citations": [c.to_json() for c in self.citations],
            "invalid_citations": self.invalid_citations,
            "sources": [source_json(s) for s in self.sources],
            "left_out": dict(self.left_out),
            "usage": self.usage.to_json(),
            "cache": self.cache,
            "generator": self.generator,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "timings": dict(self.timings),
            "evidence": self.evidence,
            "min_evidence": self.min_evidence,
            "quotes": [q.to_json() for q in self.quotes],
            "tool_calls": [t.to_json() for t in self.tool_calls],
            "retrieved": [r.to_json() for r in self.retrieved],
        }


@dataclass(frozen=True)
class ChatRequest:
    """A conversation: every message (role, text) so far, the last one the user's question; no server state."""

    messages: tuple[tuple[str, str], ...]
    overrides: Overrides = field(default_factory=Overrides)
    use_cache: bool = True
    history: bool = True  # False: retrieve for the last question alone (the bench's baseline)
    tools: str = ""  # the client's tools, tool_choice, response_format (JSON text), for the LLM as sent
    sent: str = ""  # the messages as the client sent them (JSON text), for a prompt passed through unchanged
    denied: str = ""  # the person a chat front end speaks for may not read this knowledge base: the answer says why


RewriteHow = Literal["none", "rule", "llm"]


@dataclass(frozen=True)
class ChatAnswer:
    content: str  # the answer with its [n] markers and a Markdown list of the cited sources: what a client shows
    answer: Answer  # the ask use case's answer to the standalone question (citations, sources, cache, ...)
    question: str  # the conversation's last user turn
    standalone: str  # what was retrieved and answered: the question made standalone
    rewrite: RewriteHow  # "none" (a first turn) | "rule" (no LLM configured) | "llm" (one short rewriting call)
    rewrite_cache: CacheStatus
    rewrite_usage: Usage
    usage: Usage  # the answer's and the rewriting call's together
    task: str | None = None  # a chat client's background task (title, tags, follow_ups, ...), not a question


@dataclass(frozen=True)
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
    sources: tuple[Source, ...]
    left_out: Mapping[str, int]
    generator: str
    model: str
    prompt_version: str
