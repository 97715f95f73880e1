"""Request limits the server enforces before any work: body size (here), and the checks on a request's
values (query length as in the CLI, k up to `max_k`, strings PostgreSQL can store)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from ragvps.errors import InputTooLongError, UsageError
from ragvps.serve.auth import ASGIApp, Scope, send_error

MAX_META_DEPTH = 8


class LimitBody:
    """ASGI middleware: a body over `max_bytes` gets 413 `{error, kind: too_long}`, by Content-Length or as read;
    a body still arriving after `timeout` seconds (a slow-loris client) gets 408 `{error, kind: usage}`.

    The body (at most `max_bytes`) is read before the app sees the request, then replayed to it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 120.0):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_long = (f"the request body is larger than {self.max_bytes:,} bytes (setting max_body_bytes): "
                    "send a shorter request")
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
            await send_error(send, SlowBody(f"the request body did not arrive within {self.timeout:g} s (setting "
                                            "request_timeout): send it at once", settings=("request_timeout",)))
            return
        if sum(map(len, chunks)) > self.max_bytes:
            await send_error(send, InputTooLongError(too_long))
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Callable[[], Awaitable[Any]], chunks: list[bytes]) -> bool:
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


def check_strings(value: Any, what: str, depth: int = 0) -> Any:
    """`value` (a filter from JSON) as PostgreSQL can store it: no NUL in text, finite numbers, bounded depth."""
    if depth > MAX_META_DEPTH:
        raise UsageError(f"{what} is nested more than {MAX_META_DEPTH} levels deep: filter on flatter metadata")
    if isinstance(value, str):
        if "\x00" in value:
            raise UsageError(f"{what} contains a NUL character, which no stored text can match: remove it")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(f"{what} has a number JSON cannot hold ({value}): use a finite number")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_strings(key, what, depth + 1)
            check_strings(item, what, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_strings(item, what, depth + 1)
    return value


def check_k(k: int | None, max_k: int) -> int | None:
    if k is not None and not 1 <= k <= max_k:
        raise UsageError(f"k={k} is out of range: ask for 1 to {max_k} chunks (setting max_k)", settings=("max_k",))
    return k
