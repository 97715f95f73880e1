"""The start of a streamed chat answer, shared by /v1/chat/completions (SSE chunks) and /api/chat (NDJSON lines):
the answer runs on a thread of its own, and the stream opens once its first piece is there, so whatever fails
before it (a refused request, the database, the LLM, request_timeout) is answered as the same request not streamed
would be, with its status, before the first byte. Each protocol shapes the errors and the pieces its own way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from ragvps.errors import UnavailableError
from ragvps.serve.threads import Emit, Emitted, Failed, Finished, TimedOut, thread_events

if TYPE_CHECKING:
    from ragvps.app import App, ChatAnswer, ChatRequest

T = TypeVar("T")


def too_slow(timeout: float) -> UnavailableError:
    return UnavailableError(f"the answer took longer than {timeout:g} s (setting request_timeout)",
                            settings=("request_timeout",))


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


async def open_chat(app: App, request: ChatRequest, timeout: float,
                    thread: str) -> Opened[ChatAnswer] | BaseException:
    """The chat answer's stream once its first piece is there, or the error that came before it."""

    def work(emit: Emit[str]) -> ChatAnswer:
        return app.chat(request, on_token=emit)

    events = thread_events(work, timeout, thread)
    first = await anext(events)
    if isinstance(first, Failed | TimedOut):
        await events.aclose()
        return first.error if isinstance(first, Failed) else too_slow(timeout)
    return Opened(first, events, timeout)
