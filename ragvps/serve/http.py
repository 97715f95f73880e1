"""The HTTP API: FastAPI on uvicorn, over one App (its embedder and connection pool) opened at start-up.

`create_app(settings)` builds the ASGI application; `serve(settings, host, port)` runs it. Every error is
one JSON object `{error, kind}` with the status of its kind (`ragvps.errors.HTTP_STATUS`), never a
traceback. The App opens in the background, so /health answers 503 until it is ready (and while the
database cannot be reached at start-up, retrying).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ragvps.config import Settings
from ragvps.errors import HTTP_STATUS, RagvpsError, kind_of_status
from ragvps.serve.auth import check_bind, load_keys
from ragvps.serve.failures import error_body
from ragvps.serve.lifecycle import Ready, for_serving

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    from ragvps.app import App
    from ragvps.serve.metrics import Metrics

log = logging.getLogger(__name__)


def create_app(settings: Settings, app: App | None = None, *, host: str | None = None,
               on_fatal: Callable[[RagvpsError], None] | None = None) -> Any:
    """The ASGI application: routes, the page, /docs, /mcp when the mcp extra is installed; the Host and Origin
    checks, keys, limits, CORS."""
    from fastapi import FastAPI

    from ragvps.serve.docs import add_docs
    from ragvps.serve.metrics import Metrics
    from ragvps.serve.routes import add_metrics_route
    from ragvps.serve.runner import JobRunner

    keys = load_keys(settings)
    host = host or settings.serve.host
    ready = Ready(settings, app, on_fatal)
    runner = JobRunner(ready)
    metrics = Metrics(ready)
    ready.observe(metrics)
    mcp_server = _mcp(ready)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if ready.app is None:
            threading.Thread(target=ready.open_forever, name="ragvps-open", daemon=True).start()
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(runner.running())  # upload jobs, stopped first at shutdown
            if mcp_server is not None:
                await stack.enter_async_context(mcp_server.session_manager.run())
            yield
        if app is None:  # an App given by the caller is the caller's to close
            await asyncio.to_thread(ready.close)

    api = FastAPI(title="ragvps", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Search and ask a ragvps knowledge base. When the server has API keys, every path "
                              "but /health, the page and this description needs one (`Authorization: Bearer KEY` "
                              "or `X-API-Key: KEY`): Authorize takes it.")
    _errors(api)
    from ragvps.serve.routes import add_routes

    add_routes(api, ready, settings, runner)
    add_metrics_route(api, metrics, ready)
    from ragvps.serve.openai import add_openai_routes

    add_openai_routes(api, ready, settings)  # /v1: OpenAI-compatible chat
    if mcp_server is not None:
        sub = mcp_server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                             transport_security=_mcp_security(), host=host)
        api.router.routes.extend(sub.routes)
    add_docs(api, bool(keys))

    return _middleware(api, settings, ready, keys, host, metrics)


def _middleware(api: FastAPI, settings: Settings, ready: Ready, keys: tuple[str, ...], host: str,
                metrics: Metrics) -> Any:
    """The layers around the routes, innermost first: keys, body limits, CORS, the Host and Origin checks,
    OpenAI's error shape on /v1, and outermost the request log (its id, line and counts)."""
    from starlette.middleware.cors import CORSMiddleware

    from ragvps.serve.access import Access, RequireKey
    from ragvps.serve.guard import HostOriginGuard
    from ragvps.serve.limits import LimitBody
    from ragvps.serve.openai_shapes import OpenAIErrors
    from ragvps.serve.request_log import RequestLog

    asgi: Any = LimitBody(RequireKey(api, Access(keys, ready)), settings.serve.max_body_bytes,
                          settings.serve.request_timeout)
    if settings.serve.cors_origins:
        asgi = CORSMiddleware(asgi, allow_origins=list(settings.serve.cors_origins),
                              allow_methods=["GET", "POST", "DELETE"],
                              allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    asgi = HostOriginGuard(asgi, host, settings.serve.allowed_hosts, settings.serve.cors_origins)
    asgi = OpenAIErrors(asgi)  # every error on /v1/* in OpenAI's shape, whichever layer answered it
    return RequestLog(asgi, api.router.routes, metrics.request, settings.serve.log_questions)


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Run the server until interrupted; refuses a non-loopback address without an API key."""
    import uvicorn

    host = host or settings.serve.host
    port = settings.serve.port if port is None else port
    check_bind(host, load_keys(settings))
    fatal: list[RagvpsError] = []
    server: uvicorn.Server | None = None

    def stop(exc: RagvpsError) -> None:  # a configuration error at start-up ends the server at once
        fatal.append(exc)
        if server is not None:
            server.should_exit = True

    from ragvps.serve.protocol import bounded_protocol

    raise_open_files_limit()
    asgi = create_app(for_serving(settings), host=host, on_fatal=stop)
    log_requests(settings.serve.log_format)
    config = uvicorn.Config(asgi, host=host, port=port, log_level="info", proxy_headers=False, access_log=False,
                            server_header=False, timeout_graceful_shutdown=10, lifespan="on",
                            http=bounded_protocol(settings.serve.header_timeout))
    server = uvicorn.Server(config)
    server.run()
    if fatal:
        raise fatal[0]


def log_requests(log_format: str) -> None:
    """The request log (serve/request_log.py) on stderr, one line a request, in its format; it replaces
    uvicorn's access line."""
    from ragvps.serve.request_log import JsonLines

    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter("%(asctime)s %(message)s"))
    requests_log = logging.getLogger("ragvps.requests")
    requests_log.handlers[:] = [handler]
    requests_log.setLevel(logging.INFO)
    requests_log.propagate = False


def raise_open_files_limit(most: int = 1 << 16) -> None:
    """Every connection, idle or not, holds a file descriptor: raise the soft limit (often 1,024) to the hard
    one (at most `most`), so a thousand idle clients do not stop the server from accepting new ones."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = most if hard == resource.RLIM_INFINITY else min(hard, most)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        log.info("raised the open-files limit (RLIMIT_NOFILE) from %d to %d for client connections", soft, target)


def _errors(api: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    from ragvps.serve.bodies import http_message, invalid_request

    @api.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = invalid_request(exc.errors(), exc.body, request.headers.get("content-type"))
        return JSONResponse({"error": message, "kind": "usage"}, status_code=status)

    @api.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = kind_of_status(exc.status_code)
        status = exc.status_code if exc.status_code < 500 else HTTP_STATUS[kind]
        headers = getattr(exc, "headers", None)
        message = http_message(exc.status_code, str(exc.detail), request.method, request.url.path,
                               (headers or {}).get("Allow"))
        return JSONResponse({"error": message, "kind": kind}, status_code=status, headers=headers)

    @api.exception_handler(RagvpsError)
    async def ragvps_error(_: Request, exc: RagvpsError) -> JSONResponse:
        status, body = error_body(exc)
        return JSONResponse(body, status_code=status)

    @api.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        status, body = error_body(exc)
        return JSONResponse(body, status_code=status)


def _mcp(ready: Ready) -> MCPServer | None:
    """The MCP server for /mcp, or None when the mcp extra is not installed."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return None
    from ragvps.serve.mcp import build_server

    return build_server(ready, ready.settings.serve.max_k)


def _mcp_security() -> TransportSecuritySettings:
    """The SDK's own Host and Origin checks are off: HostOriginGuard applies the same rules to /mcp as to every
    route, and answers its refusals as JSON."""
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragvps")
    except PackageNotFoundError:
        return "0"
