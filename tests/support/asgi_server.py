"""The server in this process: `create_app(settings, app)` reached through starlette's TestClient (whose transport
calls the ASGI application, streaming its answers; lifespan run once, at start), for the tests of routes, shapes,
errors, guards and keys. The clients are plain `httpx.Client`s (what the tests and the openai SDK take) over that
transport, which speaks httpx2 (`Bridge`). No port is opened: the address in `url` is only the name the requests
carry, so the Host and Origin checks see a loopback server as they would behind a real socket.

`InProcess` offers what `serve_server.Server` offers the tests (`url`, `key`, `headers`, `client()`), plus
`keyless()` for a client without the key and `call(async_fn)` to run a coroutine on the application's own event
loop (the MCP client over streamable HTTP). What needs a real process (signals, sockets, slow clients, timeouts
that abandon threads, a browser, the access log) stays with `Server`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest

from support import waiting
from support.serve_server import KEY, SECOND_KEY, free_port

if TYPE_CHECKING:
    from starlette.testclient import TestClient

    from ragvps.app import App

T = TypeVar("T")


@dataclass
class InProcess:
    """`create_app` over the settings `env` gives (as `ragvps serve` reads them), in this process.

    Given an open `app`, the server uses it (and leaves it open); without one, its lifespan opens its own, as
    `ragvps serve` does, and `start` waits for /health as `Server.start` does."""

    env: dict[str, str]
    key: str | None = KEY
    app: App | None = None
    port: int = field(default_factory=free_port)  # a name for the Host header: nothing listens there
    _client: TestClient | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def start(self, wait_ready: bool = True, timeout: float = 120) -> InProcess:
        from starlette.testclient import TestClient

        from ragvps.config import load_settings
        from ragvps.serve.http import create_app
        from ragvps.serve.shared.lifecycle import for_serving

        settings = for_serving(load_settings(env=self.env))
        # The server's own answer to an unexpected error (500 JSON), not the exception raised into the test.
        self._client = TestClient(create_app(settings, self.app), base_url=self.url, raise_server_exceptions=False)
        self._client.__enter__()
        deadline = waiting.deadline(timeout)
        while True:
            status = self.keyless().get("/health").status_code
            if status == 200 or (not wait_ready and status == 503):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the in-process server was not ready within {timeout:.0f} s")
            time.sleep(0.02)

    def client(self, **kwargs: Any) -> httpx.Client:
        """A client with the key (if any), as `Server.client` gives."""
        return self.keyless(headers=self.headers | kwargs.pop("headers", {}), **kwargs)

    def keyless(self, **kwargs: Any) -> httpx.Client:
        """A client that sends no key (closing it leaves the server running)."""
        assert self._client is not None, "start() the server first"
        return httpx.Client(transport=Bridge(self._client._transport), base_url=self.url, timeout=60, **kwargs)

    def transport(self) -> httpx.BaseTransport:
        """The transport of `keyless()`, for a client that builds its own httpx client (the ollama client)."""
        assert self._client is not None, "start() the server first"
        return Bridge(self._client._transport)

    def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn()` on the application's event loop (where its lifespan runs), and wait for its result."""
        assert self._client is not None and self._client.portal is not None, "start() the server first"
        return self._client.portal.call(fn)

    @property
    def asgi(self) -> Any:
        assert self._client is not None, "start() the server first"
        return self._client.app

    def stop(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.__exit__(None, None, None)


class Bridge(httpx.BaseTransport):
    """An httpx transport over an httpx2 one (starlette's TestClient speaks httpx2): the request as it is sent,
    the answer as it streams."""

    def __init__(self, inner: Any):
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        import httpx2

        body = request.read()
        sent = httpx2.Request(
            request.method,
            str(request.url),
            headers=request.headers.raw,
            content=body if "content-length" in request.headers else iter([body]),
        )
        answer = self.inner.handle_request(sent)
        return httpx.Response(
            answer.status_code,
            headers=answer.headers.raw,
            stream=_Body(answer.stream),
            extensions={"http_version": b"HTTP/1.1"},
        )


class _Body(httpx.SyncByteStream):
    def __init__(self, inner: Any):
        self.inner = inner

    def __iter__(self) -> Iterator[bytes]:
        yield from self.inner

    def close(self) -> None:
        self.inner.close()


@contextlib.contextmanager
def in_process(env: dict[str, str], key: str | None = None, **start: Any) -> Iterator[InProcess]:
    """A server of its own, in this process, over the settings in `env`; stopped after the block."""
    srv = InProcess(env, key=key).start(**start)
    try:
        yield srv
    finally:
        srv.stop()


# --- fixtures (registered for every test module by tests/conftest.py's pytest_plugins) ----------------------


@pytest.fixture(scope="session")
def api(serve_env: dict[str, str]) -> Iterator[InProcess]:
    """The served database (serve_env) behind `create_app` in this process, with an App opened here and the two
    API keys (KEY and SECOND_KEY): what the `server` fixture serves, without its process."""
    from ragvps.app import App
    from ragvps.config import load_settings
    from ragvps.serve.shared.lifecycle import for_serving

    env = serve_env | {"RAGVPS_API_KEYS": f"{KEY},{SECOND_KEY}"}
    with App.open(for_serving(load_settings(env=env)), pooled=True) as app:
        app.embed_query("warm up the model")
        srv = InProcess(env, app=app).start()
        yield srv
        srv.stop()
