"""/ask with `stream: true`: Server-Sent Events from the app's callbacks.

The app is synchronous, so the answer runs on a thread of its own (serve.threads.thread_events, within the
server's thread limit); its `on_sources`/`on_token` callbacks hand events to the event loop through a
queue. When the client goes away, the response stops reading and the next callback raises, which closes
the upstream LLM request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from starlette.responses import StreamingResponse

from ragvps.app import json_object, jsonable
from ragvps.errors import UnavailableError
from ragvps.serve.shared.failures import failure
from ragvps.serve.shared.threads import Emit, Emitted, Failed, Finished, TimedOut, thread_events

if TYPE_CHECKING:
    from ragvps.app import Answer, App, AskRequest
    from ragvps.app.requests import Source

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(event: str, data: object) -> bytes:
    """One Server-Sent Event; the JSON is on one line, so `data:` never needs splitting."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def done_payload(answer: Answer) -> dict[str, object]:
    """The answer without its sources (sent first); its text comes again whole in `answer`, after the tokens."""
    return {k: v for k, v in json_object(answer).items() if k != "sources"}


async def answer_events(app: App, request: AskRequest, timeout: float) -> AsyncIterator[bytes]:
    """`sources` once, then `token`s, then `done` (or one `error` event); stops the app if the client leaves."""

    def work(emit: Emit[bytes]) -> Answer:
        sent = False

        def on_sources(sources: Sequence[Source]) -> None:
            nonlocal sent
            if sent:
                emit.check()  # nothing new: only the check that the client is still there
                return
            sent = True
            emit(sse("sources", {"sources": jsonable(sources)}))

        return app.ask(request, on_sources=on_sources, on_token=lambda text: emit(sse("token", {"text": text})))

    async for event in thread_events(work, timeout, "ragvps-ask"):
        if isinstance(event, Emitted):
            yield event.value
        elif isinstance(event, Finished):
            yield sse("done", done_payload(event.value))
        elif isinstance(event, Failed):
            f = failure(event.error)
            yield sse("error", f.body() | {"status": f.status})
        elif isinstance(event, TimedOut):
            late = UnavailableError(f"the answer took longer than {timeout:g} s (setting request_timeout)")
            yield sse("error", {"error": str(late), "kind": late.kind, "status": late.http_status})


def streaming_response(app: App, request: AskRequest, timeout: float) -> StreamingResponse:
    return StreamingResponse(answer_events(app, request, timeout), media_type="text/event-stream", headers=SSE_HEADERS)
