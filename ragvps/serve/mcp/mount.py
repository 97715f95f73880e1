"""/mcp, mounted before the mcp SDK is imported: the MCP server is built on the first request to it.

Importing the SDK (its types, pydantic models and transports) took about 0.45 s of CPU, the largest part of a
server's start, and its modules stay in memory: a server that no MCP client calls pays neither. The first
request to /mcp builds the server (serve/mcp/tools.py) in a thread and starts its session manager in a task of the
server's lifespan, which owns it until shutdown; that request, and any arriving meanwhile, wait for it (about
half a second), and every later one goes straight to the SDK's endpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib.util import find_spec
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.routing import Route

from ragvps.serve.shared.error_shapes import MCP_PATH

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ragvps.serve.shared.lifecycle import Ready


def mcp_installed() -> bool:
    """Whether the mcp extra is installed, without importing it."""
    return find_spec("mcp") is not None


class LazyMcp:
    """The ASGI endpoint of /mcp; `running()` belongs in the server's lifespan."""

    def __init__(self, ready: Ready, host: str):
        self.ready, self.host = ready, host
        self._endpoint: ASGIApp | None = None
        self._building = anyio.Lock()
        self._tasks: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()  # ends the session manager's task, if one started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint or await self._start()
        await endpoint(scope, receive, send)

    async def _start(self) -> ASGIApp:
        async with self._building:
            if self._endpoint is None:
                if self._tasks is None:
                    raise RuntimeError("/mcp was called outside the server's lifespan")
                server = await anyio.to_thread.run_sync(self._build)
                sub = server.streamable_http_app(
                    streamable_http_path=MCP_PATH,
                    stateless_http=True,
                    json_response=True,
                    transport_security=_security(),
                    host=self.host,
                )
                await self._tasks.start(_serve_sessions, server)
                (route,) = sub.routes  # Route(MCP_PATH, endpoint=the SDK's StreamableHTTPASGIApp)
                assert isinstance(route, Route)
                self._endpoint = route.app
        assert self._endpoint is not None
        return self._endpoint

    def _build(self) -> MCPServer[object]:
        from ragvps.serve.mcp.tools import build_server  # lazy: the mcp SDK (0.45 s) loads on the first call

        return build_server(self.ready, self.ready.settings.serve.max_k)


async def _serve_sessions(server: MCPServer[object], *, task_status: TaskStatus[None]) -> None:
    """The session manager's run(), entered and left in this one task, as its task group requires."""
    async with server.session_manager.run():
        task_status.started()
        await anyio.sleep_forever()


def _security() -> TransportSecuritySettings:
    """The SDK's own Host and Origin checks are off: HostOriginGuard applies the same rules to /mcp as to every
    route, and answers its refusals as JSON."""
    from mcp.server.transport_security import TransportSecuritySettings  # lazy: the mcp extra, on the first call

    return TransportSecuritySettings(enable_dns_rebinding_protection=False)
