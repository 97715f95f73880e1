"""The HTTP API's request and response shapes (pydantic), which FastAPI turns into /openapi.json."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from ragvps.app import MAX_QUERY_CHARS, Mode
from ragvps.app.requests import Quote, Retrieved, Source, Usage
from ragvps.errors import Kind

MAX_PATH_PREFIX = 4096


class ErrorOut(BaseModel):
    error: str = Field(description="What went wrong and what to do next.")
    kind: str = Field(description=" | ".join(get_args(Kind)))


class HitOut(BaseModel):
    """One chunk, as `ragvps query --json` prints it."""

    model_config = ConfigDict(extra="allow")
    rank: int
    score: float
    chunk_id: str
    path: str
    doc_id: str
    heading_path: str
    text: str
    vector_rank: int | None = None
    keyword_rank: int | None = None


class SearchOut(BaseModel):
    hits: list[HitOut]
    took_ms: float


class CitationOut(BaseModel):
    """A source an answer cites: where its text is (`pages` only for a PDF's chunks)."""

    number: int
    chunk_id: str
    path: str
    heading_path: str
    start: int
    end: int
    pages: list[int] = Field(default_factory=list)


class AnswerOut(BaseModel):
    """The answer, as `ragvps ask --json` prints it."""

    model_config = ConfigDict(extra="allow")
    answer: str
    answered: bool
    extractive: bool
    citations: list[CitationOut] = Field(description="Each [n] the answer cites.")
    invalid_citations: int = Field(description="Numbers the answer used that no source has (dropped).")
    sources: list[Source] = Field(description="The chunks sent, numbered as the answer cites them.")
    left_out: dict[str, int]
    usage: Usage = Field(
        description="Tokens: prompt, completion, cached; `counted` when the LLM server reported "
        "none and ragvps counted them."
    )
    cache: Literal["hit", "miss", "off"]
    generator: str
    model: str
    prompt_version: str
    timings: dict[str, float]
    evidence: float = Field(
        description="The best retrieved chunk's evidence (0..1, rank-independent); below "
        "min_evidence the answer is the refusal and no LLM request is made."
    )
    min_evidence: float = Field(description="The setting answer_min_evidence the answer was gated with.")
    quotes: list[Quote] = Field(description="Extractive answers: each quoted sentence (offsets in the document).")
    retrieved: list[Retrieved] = Field(description="Every chunk retrieved, sent or not, with its evidence.")


class HealthOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["ok", "starting", "unavailable"]
    ready: bool | None = Field(None, description="The database answers: the server takes an ingest now.")
    empty: bool | None = Field(None, description="Nothing is ingested yet (a state, not a failure).")
    error: str | None = None


QUESTION = "how do I stop the embedded database?"


class SearchBody(BaseModel):
    """The /search body; `request_models` gives the class whose `k` is bounded by the setting max_k."""

    # /docs's "Try it out" sends the first example as it is (serve/shared/docs.py): no `meta` pairs that filter out
    # every hit, as a body Swagger UI made up from the schema would carry.
    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"query": QUESTION, "k": 5}]}
    )
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="The question, in words.")
    k: int | None = Field(None, ge=1, description="How many chunks (default: setting top_k).")
    mode: Mode = "hybrid"
    path_prefix: str = Field(
        "", max_length=MAX_PATH_PREFIX, description="Only chunks from source files whose path starts so."
    )
    meta: dict[str, object] = Field(
        default_factory=dict, description="Only chunks whose document or chunk metadata has these pairs."
    )
    kbs: list[str] | None = Field(
        None,
        max_length=64,
        description="Several knowledge bases at once: each is "
        "searched with its own model and the lists are fused by rank (RRF); each hit "
        "names its knowledge base.",
    )


class AskBody(BaseModel):
    """The /ask body; `request_models` gives the class whose `k` is bounded by the setting max_k."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"question": QUESTION}]})
    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int | None = Field(None, ge=1, description="Chunks to retrieve (default: setting top_k).")
    mode: Mode = "hybrid"
    path_prefix: str = Field("", max_length=MAX_PATH_PREFIX)
    meta: dict[str, object] = Field(default_factory=dict)
    stream: bool = Field(False, description="Server-Sent Events: `sources`, then `token`s, then `done`.")
    use_cache: bool = Field(True, description="Answer from the answer cache when the same chunks were sent.")


def request_models(max_k: int) -> tuple[type[SearchBody], type[AskBody]]:
    """The /search and /ask bodies; `k` is bounded by the setting max_k, so the schema says the truth."""

    class SearchIn(SearchBody):
        k: int | None = Field(None, ge=1, le=max_k, description="How many chunks (default: setting top_k).")

    class AskIn(AskBody):
        k: int | None = Field(None, ge=1, le=max_k, description="Chunks to retrieve (default: setting top_k).")

    return SearchIn, AskIn
