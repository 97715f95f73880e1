"""What the two chat doors (/v1/chat/completions, SSE chunks; /api/chat, NDJSON lines) share: each knowledge base
as a model name, the `ragvps` field of an answer, and the start of a streamed answer. The answer runs on a thread
of its own, and the stream opens once its first piece is there, so whatever fails before it (a refused request,
the database, the LLM, request_timeout) is answered as the same request not streamed would be, with its status,
before the first byte. Each protocol shapes the errors and the pieces its own way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from ragvps.errors import UnavailableError
from ragvps.serve.shared.threads import Emit, Emitted, Failed, Finished, TimedOut, thread_events

if TYPE_CHECKING:
    from ragvps.app import App, ChatAnswer, ChatRequest

T = TypeVar("T")
MODEL = "ragvps"  # the server's own knowledge base (setting kb, `default`), as /v1/models lists it


def too_slow(timeout: float) -> UnavailableError:
    return UnavailableError(
        f"the answer took longer than {timeout:g} s (setting request_timeout)", settings=("request_timeout",)
    )


@dataclass
class Opened(Generic[T]):
    """A stream whose first event is there: its pieces (Emitted), its end (Finished), or a failure after the
    start (the error, a timeout as one)."""

    first: Emitted[str] | Finished[T]
    rest: AsyncIterator[Emitted[str] | Finished[T] | Failed | TimedOut]
    timeout: float

    async def events(self) -> AsyncIterator[Emitted[str] | Finished[T] | BaseException]:
        yield self.first
        async for event in self.rest:
            if isinstance(event, Failed):
                yield event.error
            elif isinstance(event, TimedOut):
                yield too_slow(self.timeout)
            else:
                yield event


async def open_chat(app: App, request: ChatRequest, timeout: float, thread: str) -> Opened[ChatAnswer] | BaseException:
    """The chat answer's stream once its first piece is there, or the error that came before it."""

    def work(emit: Emit[str]) -> ChatAnswer:
        return app.chat(request, on_token=emit)

    events = thread_events(work, timeout, thread)
    first = await anext(events)
    if isinstance(first, Failed | TimedOut):
        await events.aclose()
        return first.error if isinstance(first, Failed) else too_slow(timeout)
    return Opened(first, events, timeout)


def model_of(kb: str, own: str) -> str:
    """A knowledge base as a model: the server's own is `ragvps` (as before knowledge bases), the others by name."""
    return MODEL if kb == own else kb


def kb_of(model: str, own: str) -> str:
    return own if model == MODEL else model


def extra(chat: ChatAnswer) -> dict[str, object]:
    """The one extra top-level field: the answer's citations and sources, and how the question was read."""
    answer = {k: v for k, v in chat.answer.to_json().items() if k != "answer"}
    return {
        "task": chat.task,
        "question": chat.question,
        "standalone_question": chat.standalone,
        "rewrite": chat.rewrite,
        "rewrite_cache": chat.rewrite_cache,
        "rewrite_usage": chat.rewrite_usage.to_json(),
        **answer,
        "usage": chat.usage.to_json(),
    }
