"""The HTTP protocol `ragvps serve` runs: uvicorn's h11 protocol with a bound on how long a request's head (its
request line and headers) may take to arrive, which uvicorn itself does not have.

A connection that has not sent a complete head `header_timeout` seconds after it opened, or after the first
byte of its next request on a kept-alive connection, is answered 408 `{error, kind: usage}` and closed; one
that sent nothing at all is closed quietly. A slow-loris client thus holds a connection for seconds, not for as
long as it likes. (The body's own bound is LimitBody's, in limits.py; an idle kept-alive connection is closed
by uvicorn's timeout_keep_alive.) Imported only by `serve()`, so nothing imports uvicorn before it runs.
"""

from __future__ import annotations

import asyncio
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


def head_timeout_body(timeout: float) -> bytes:
    """The 408 response to a head that did not arrive in time, and the connection closes."""
    body = json.dumps(
        {
            "error": f"the request's headers did not arrive within {timeout:g} s (setting "
            "header_timeout): send the whole request at once",
            "kind": "usage",
        }
    ).encode()
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )


class BoundedHeadProtocol(H11Protocol):
    """H11Protocol whose request heads must arrive within `header_timeout` seconds (set by `bounded_protocol`)."""

    header_timeout: float = 5.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:  # the first bytes of a request: its head is now on the clock
            self._arm()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is complete (or the connection is done)
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still being sent (pipelining); its own bounds apply
        received, _ = self.conn.trailing_data
        if received:
            log.info(
                "closed a connection from %s: its request's headers took over %g s (setting header_timeout)",
                _peer(self.client),
                self.header_timeout,
            )
            self.transport.write(head_timeout_body(self.header_timeout))
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"


def bounded_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """The protocol class to give uvicorn (`http=`), with this header timeout."""
    return type("BoundedHeadProtocol", (BoundedHeadProtocol,), {"header_timeout": float(header_timeout)})
