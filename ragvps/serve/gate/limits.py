"""The request body's size limit the server enforces before any work (the checks on a request's values are
the app's, in ragvps/app/checks.py)."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from ragvps.errors import InputTooLongError, UsageError
from ragvps.serve.gate.auth import send_error

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

UPLOAD_PATH = re.compile(r"/kb/[^/]+/documents/?")


class LimitBody:
    """ASGI middleware: a body over `max_bytes` gets 413 `{error, kind: too_long}`, by Content-Length or as read;
    a body still arriving after `timeout` seconds (a slow-loris client) gets 408 `{error, kind: usage}`.

    The body (at most `max_bytes`) is read before the app sees the request, then replayed to it. An upload
    (`POST /kb/{name}/documents`) is passed on as it arrives: its route streams it to disk under limits of
    its own (upload_max_bytes, upload_max_file_bytes, upload_max_files).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 120.0):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope.get("method") == "POST" and UPLOAD_PATH.fullmatch(scope["path"])):
            await self.app(scope, receive, send)
            return
        too_long = (
            f"the request body is larger than {self.max_bytes:,} bytes (setting max_body_bytes): send a shorter request"
        )
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.strip().isdigit():
                    await send_error(send, UsageError("the Content-Length header is not a number"))
                    return
                if int(value) > self.max_bytes:
                    await send_error(send, InputTooLongError(too_long))
                    return
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.timeout):
                if not await self._read(receive, chunks):
                    return  # the client went away
        except TimeoutError:
            await send_error(
                send,
                SlowBody(
                    f"the request body did not arrive within {self.timeout:g} s (setting "
                    "request_timeout): send it at once",
                    settings=("request_timeout",),
                ),
            )
            return
        if sum(map(len, chunks)) > self.max_bytes:
            await send_error(send, InputTooLongError(too_long))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, chunks: list[bytes]) -> bool:
        """Read the body into `chunks`, stopping past max_bytes; False if the client disconnected."""
        size = 0
        while True:
            event = await receive()
            if event["type"] != "http.request":
                return False
            chunks.append(event.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes or not event.get("more_body", False):
                return True


class SlowBody(UsageError):
    """A body that arrives too slowly: HTTP 408 (its kind stays usage)."""

    @property
    def http_status(self) -> int:
        return 408
