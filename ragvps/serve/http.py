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
from ragvps.serve.auth import check_bind, is_loopback, load_keys
from ragvps.serve.common import Ready, error_body, for_serving

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ragvps.app import App

log = logging.getLogger(__name__)


def create_app(settings: Settings, app: App | None = None, *, host: str | None = None,
               on_fatal: Callable[[RagvpsError], None] | None = None) -> Any:
    """The ASGI application: routes, the page, /mcp when the mcp extra is installed, keys, limits, CORS."""
    from fastapi import FastAPI
    from starlette.middleware.cors import CORSMiddleware

    from ragvps.serve.auth import RequireKey
    from ragvps.serve.limits import LimitBody

    keys = load_keys(settings)
    host = host or settings.serve.host
    ready = Ready(settings, app, on_fatal)
    mcp_server = _mcp(ready)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        opener = None
        if ready.app is None:
            opener = threading.Thread(target=ready.open_forever, name="ragvps-open", daemon=True)
            opener.start()
        async with contextlib.AsyncExitStack() as stack:
            if mcp_server is not None:
                await stack.enter_async_context(mcp_server.session_manager.run())
            yield
        if app is None:  # an App given by the caller is the caller's to close
            await asyncio.to_thread(ready.close)

    api = FastAPI(title="ragvps", version=_version(), lifespan=lifespan,
                  description="Search and ask a ragvps knowledge base. Every path but /health and / needs an "
                              "API key (`Authorization: Bearer KEY` or `X-API-Key: KEY`) when keys are set.")
    _errors(api)
    from ragvps.serve.routes import add_routes

    add_routes(api, ready, settings)
    from ragvps.serve.openai import add_openai_routes

    add_openai_routes(api, ready, settings)  # /v1: OpenAI-compatible chat
    if mcp_server is not None:
        sub = mcp_server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                             transport_security=_mcp_security(host, keys), host=host)
        api.router.routes.extend(sub.routes)
    _openapi_errors(api)

    asgi: Any = LimitBody(RequireKey(api, keys), settings.serve.max_body_bytes)
    if settings.serve.cors_origins:
        asgi = CORSMiddleware(asgi, allow_origins=list(settings.serve.cors_origins), allow_methods=["GET", "POST"],
                              allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    from ragvps.serve.openai_shapes import OpenAIErrors

    return OpenAIErrors(asgi)  # every error on /v1/* in OpenAI's shape, whichever layer answered it


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

    asgi = create_app(for_serving(settings), host=host, on_fatal=stop)
    config = uvicorn.Config(asgi, host=host, port=port, log_level="info", proxy_headers=False,
                            server_header=False, timeout_graceful_shutdown=10, lifespan="on")
    server = uvicorn.Server(config)
    server.run()
    if fatal:
        raise fatal[0]


def _errors(api: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    @api.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _validation_message(exc.errors()), "kind": "usage"}, status_code=400)

    @api.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        kind = kind_of_status(exc.status_code)
        status = exc.status_code if exc.status_code < 500 else HTTP_STATUS[kind]
        return JSONResponse({"error": str(exc.detail), "kind": kind}, status_code=status,
                            headers=getattr(exc, "headers", None))

    @api.exception_handler(RagvpsError)
    async def ragvps_error(_: Request, exc: RagvpsError) -> JSONResponse:
        status, body = error_body(exc)
        return JSONResponse(body, status_code=status)

    @api.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        status, body = error_body(exc)
        return JSONResponse(body, status_code=status)


def _validation_message(errors: Any) -> str:
    parts = []
    for e in list(errors)[:3]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "the request is not valid: " + "; ".join(parts) + " (see /docs for the request's shape)"


def _openapi_errors(api: FastAPI) -> None:
    """Document the errors as they are sent: validation failures are 400 `{error, kind}`, not FastAPI's 422."""
    from fastapi.openapi.utils import get_openapi

    def schema() -> dict[str, Any]:
        if api.openapi_schema is None:
            doc = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
            for item in doc.get("paths", {}).values():
                for op in item.values():
                    op.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                doc.get("components", {}).get("schemas", {}).pop(name, None)
            api.openapi_schema = doc
        return api.openapi_schema

    api.openapi = schema  # type: ignore[method-assign]


def _mcp(ready: Ready) -> Any:
    """The MCP server for /mcp, or None when the mcp extra is not installed."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return None
    from ragvps.serve.mcp import build_server

    return build_server(ready.get, ready.settings.serve.max_k)


def _mcp_security(host: str, keys: tuple[str, ...]) -> Any:
    """DNS-rebinding protection on loopback without keys (a page in the user's browser could otherwise reach
    it); with keys, the key protects /mcp and the Host may be the server's public name."""
    from mcp.server.transport_security import TransportSecuritySettings

    if keys or not is_loopback(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                                     allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragvps")
    except PackageNotFoundError:
        return "0"
