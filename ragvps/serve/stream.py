"""/ask with `stream: true`: Server-Sent Events from the app's callbacks.

The app is synchronous, so the answer runs in a worker thread; its `on_sources`/`on_token` callbacks hand
events to the event loop through a queue. When the client goes away, the response task is cancelled and
the next callback raises, which closes the upstream LLM request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from ragvps.errors import UnavailableError
from ragvps.serve.convert import jsonable

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_END = object()


class ClientGone(Exception):  # noqa: N818  (raised into the app to cancel the answer, not an error)
    """The HTTP client disconnected: stop generating."""


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
    from ragvps.serve.common import error_body

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    gone = threading.Event()
    sent = {"sources": 0, "tokens": 0}

    def put(item: Any) -> None:
        # The server may have stopped while this answer was still being made: then nobody is waiting for it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def on_sources(sources: Any) -> None:
        if gone.is_set():
            raise ClientGone
        if not sent["sources"]:
            sent["sources"] = 1
            put(("sources", {"sources": jsonable(sources)}))

    def on_token(text: str) -> None:
        if gone.is_set():
            raise ClientGone
        sent["tokens"] += 1
        put(("token", {"text": text}))

    def work() -> None:
        try:
            answer = app.ask(request, on_sources=on_sources, on_token=on_token)
            if not sent["sources"]:  # e.g. an answer from the cache: its sources still come first
                on_sources(getattr(answer, "sources", []))
            text = str(getattr(answer, "answer", ""))
            if not sent["tokens"] and text:
                on_token(text)  # a generator that does not stream: the whole answer as one token
            put(("done", done_payload(answer)))
        except ClientGone:
            pass
        except BaseException as exc:  # noqa: BLE001  (reported to the client as one error event)
            status, body = error_body(exc)
            put(("error", body | {"status": status}))
        finally:
            put(_END)

    threading.Thread(target=work, name="ragvps-ask", daemon=True).start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                gone.set()
                late = UnavailableError(f"the answer took longer than {timeout:g} s (setting request_timeout)")
                yield sse("error", {"error": str(late), "kind": late.kind, "status": late.http_status})
                return
            if item is _END:
                return
            yield sse(*item)
    finally:
        gone.set()  # the client left (this generator was cancelled or closed) or we are done


def streaming_response(app: Any, request: Any, timeout: float) -> Any:
    from starlette.responses import StreamingResponse

    return StreamingResponse(answer_events(app, request, timeout), media_type="text/event-stream",
                             headers=SSE_HEADERS)
