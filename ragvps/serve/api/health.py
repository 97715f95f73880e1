"""GET /health: one check at a time, in a thread of its own, its answer shared by every caller that asks while it
runs and reused for `TTL_S`. A thousand /health calls (a load balancer, a thousand clients) cost one database
round trip, and none of them waits behind the requests on the pool or the worker threads."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from ragvps.app import json_object
from ragvps.serve.shared.failures import error_body
from ragvps.serve.shared.lifecycle import Ready

TTL_S = 0.5  # an answer this fresh is given again
TIMEOUT_S = 8.0  # a check that has not ended by then is reported as not answering (it cannot hang /health)


class HealthCheck:
    def __init__(self, ready: Ready):
        self.ready = ready
        self._answer: tuple[float, int, dict[str, object]] | None = None
        self._running: asyncio.Future[tuple[int, dict[str, object]]] | None = None
        self._started = 0.0

    async def __call__(self) -> tuple[int, dict[str, object]]:
        """The status and body of /health."""
        if self.ready.app is None:
            return 503, {"status": "starting", "error": self.ready.error}
        now = time.monotonic()
        if self._answer is not None and now - self._answer[0] < TTL_S:
            return self._answer[1], self._answer[2]
        if self._running is None:
            self._running = asyncio.get_running_loop().create_future()
            self._started = now
            threading.Thread(
                target=self._check, args=(asyncio.get_running_loop(), self._running), name="ragvps-health", daemon=True
            ).start()
        try:
            return await asyncio.wait_for(
                asyncio.shield(self._running), max(0.0, self._started + TIMEOUT_S - time.monotonic())
            )
        except TimeoutError:
            return 503, {
                "status": "unavailable",
                "database": False,
                "error": f"the database did not answer the health check within {TIMEOUT_S:g} s: check "
                "that PostgreSQL is running and not overloaded",
            }

    def _check(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[tuple[int, dict[str, object]]]) -> None:
        app = self.ready.get()
        try:
            body = json_object(app.health())
            healthy = bool(body.get("ready")) and bool(body.get("database")) and not body.get("error")
            body["status"] = ("degraded" if body.get("degraded") else "ok") if healthy else "unavailable"
            answer = (200 if healthy else 503, body)
        except Exception as exc:  # health says why, and stays 503 until it works
            answer = (503, {"status": "unavailable", "error": error_body(exc)[1]["error"]})

        def done() -> None:
            self._answer = (time.monotonic(), *answer)
            self._running = None
            if not future.done():
                future.set_result(answer)

        with contextlib.suppress(RuntimeError):  # the server stopped meanwhile: nobody waits for the answer
            loop.call_soon_threadsafe(done)
