"""/ask with `stream: true`: Server-Sent Events from the app's callbacks.

The app is synchronous, so the answer runs in a worker thread; its `on_sources`/`on_token` callbacks hand
events to the event loop through a queue. When the client goes away, the response task is cancelled and
the next callback raises, which closes the upstream LLM request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ragvps.app import jsonable
from ragvps.errors import UnavailableError

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

def sse(event: str, data: Any) -> bytes:
    """One Server-Sent Event; the JSON is on one line, so `data:` never needs splitting."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def done_payload(answer: Any) -> dict[str, Any]:
    """The answer without its sources (sent first) and text (sent as tokens); citations always a list."""
    out = {k: v for k, v in jsonable(answer).items() if k not in ("sources",)}
    out["citations"] = out.get("citations") or []
    out.setdefault("usage", None)
    return out


async def answer_events(app: Any, request: Any, timeout: float) -> AsyncIterator[bytes]:
    """`sources` once, then `token`s, then `done` (or one `error` event); stops the app if the client leaves."""
    from ragvps.serve.common import TIMED_OUT, Emit, error_body, thread_events

    def work(emit: Emit) -> Any:
        sent = {"sources": False}

        def on_sources(sources: Any) -> None:
            if not sent["sources"]:
                sent["sources"] = True
                emit(("sources", {"sources": jsonable(sources)}))
            else:
                emit(None)  # nothing new: only the check that the client is still there

        def on_token(text: str) -> None:
            emit(("token", {"text": text}))

        return app.ask(request, on_sources=on_sources, on_token=on_token)  # sources first, then tokens

    def failed(exc: BaseException) -> Any:
        status, body = error_body(exc)
        return ("error", body | {"status": status})

    async for item in thread_events(work, failed, timeout, "ragvps-ask"):
        if item is TIMED_OUT:
            late = UnavailableError(f"the answer took longer than {timeout:g} s (setting request_timeout)")
            yield sse("error", {"error": str(late), "kind": late.kind, "status": late.http_status})
            return
        what, value = item
        yield sse(what, done_payload(value) if what == "done" else value)


def streaming_response(app: Any, request: Any, timeout: float) -> Any:
    from starlette.responses import StreamingResponse

    return StreamingResponse(answer_events(app, request, timeout), media_type="text/event-stream",
                             headers=SSE_HEADERS)
