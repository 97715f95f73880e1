"""What a server watches of the use cases: each search and each answer is reported, as it ends, to the App's
Observer (a server's metrics and request log; nobody, `QUIET`, in a command). The use cases know nothing of
Prometheus or logs; an observer must be quick and must not raise."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from ragvps.app.requests import Answer, SearchResult

# A use case's timings (milliseconds, by key) -> the stage they measure; other keys are sums of these.
STAGES = {
    "embed_ms": "question_embedding",
    "vector_ms": "vector_leg",
    "keyword_ms": "keyword_leg",
    "fusion_ms": "fusion",
    "rerank_ms": "rerank",
    "generate_ms": "generation",
    "cache_ms": "answer_cache",
    "memo_ms": "answer_memo",
}
ANSWER_STAGES = ("generate_ms", "cache_ms", "memo_ms")  # an answer's own; its search reports the others

Outcome = Literal["answered", "extractive", "refused_gate", "refused_model", "cached"]
OUTCOMES: tuple[Outcome, ...] = ("answered", "extractive", "refused_gate", "refused_model", "cached")


class Observer(Protocol):
    def searched(self, kb: str, result: SearchResult) -> None: ...

    def answered(self, kb: str, answer: Answer) -> None: ...

    def used(self, kb: str) -> None: ...  # a request worked in `kb` without searching (a chat client's task)


class Quiet:
    """The observer of a command: nobody listens."""

    def searched(self, kb: str, result: SearchResult) -> None:
        pass

    def answered(self, kb: str, answer: Answer) -> None:
        pass

    def used(self, kb: str) -> None:
        pass


QUIET = Quiet()


def outcome(answer: Answer) -> Outcome:
    """How an answer ended: from the answer cache; refused by the evidence gate (no source passed it, so no
    generator ran); refused by the model (it had sources and said it cannot answer); answered by quoting the
    sources (the extractive generator); answered by a model."""
    if answer.cache == "hit":
        return "cached"
    if not answer.answered:
        return "refused_model" if answer.sources else "refused_gate"
    return "extractive" if answer.extractive else "answered"
