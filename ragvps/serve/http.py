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
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from ragvps.config import Settings
from ragvps.errors import HTTP_STATUS, RagvpsError, UnavailableError, redact
from ragvps.serve.auth import check_bind, is_loopback, load_keys

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ragvps.app import App

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_OPEN_S = 5.0


class Ready:
    """The App once it is open (or the reason it is not yet), shared by the HTTP routes and the MCP tools."""

    def __init__(self, settings: Settings, app: App | None = None):
        self.settings = settings
        self.app = app
        self.error = "starting: loading the model and connecting to the database"
        self._stack = contextlib.ExitStack()
        self._stop = threading.Event()

    def get(self) -> App:
        if self.app is None:
            raise UnavailableError(f"the server is not ready yet ({self.error}); retry in a few seconds")
        return self.app

    def open_forever(self) -> None:
        """Open the App (pool, embedder, a warm-up query), retrying until it works or the server stops."""
        from ragvps.app import App

        while not self._stop.is_set():
            stack = contextlib.ExitStack()
            try:
                app = stack.enter_context(App.open(self.settings, pooled=True))
                app.embed_query("warm up the model")
            except Exception as exc:  # noqa: BLE001  (any failure to start is reported by /health and retried)
                stack.close()
                self.error = redact(str(exc) if isinstance(exc, RagvpsError) else f"{exc.__class__.__name__}: {exc}")
                log.warning("not ready, retrying in %.0f s: %s", RETRY_OPEN_S, self.error)
                self._stop.wait(RETRY_OPEN_S)
                continue
            self._stack.enter_context(stack)
            self.app = app
            log.info("ready: model %s", self.settings.embed.model_name)
            return

    def close(self) -> None:
        self._stop.set()
        self._stack.close()


def create_app(settings: Settings, app: App | None = None, *, host: str | None = None) -> Any:
    """The ASGI application: routes, the page, /mcp when the mcp extra is installed, keys, limits, CORS."""
    from fastapi import FastAPI
    from starlette.middleware.cors import CORSMiddleware

    from ragvps.serve.auth import RequireKey
    from ragvps.serve.limits import LimitBody

    keys = load_keys(settings)
    host = host or settings.serve.host
    ready = Ready(settings, app)
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
    if mcp_server is not None:
        sub = mcp_server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                             transport_security=_mcp_security(host, keys), host=host)
        api.router.routes.extend(sub.routes)
    _openapi_errors(api)

    asgi: Any = LimitBody(RequireKey(api, keys), settings.serve.max_body_bytes)
    if settings.serve.cors_origins:
        asgi = CORSMiddleware(asgi, allow_origins=list(settings.serve.cors_origins), allow_methods=["GET", "POST"],
                              allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    return asgi


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Run the server until interrupted; refuses a non-loopback address without an API key."""
    import uvicorn

    host = host or settings.serve.host
    port = settings.serve.port if port is None else port
    check_bind(host, load_keys(settings))
    asgi = create_app(for_serving(settings), host=host)
    config = uvicorn.Config(asgi, host=host, port=port, log_level="info", proxy_headers=False,
                            server_header=False, timeout_graceful_shutdown=10, lifespan="on")
    uvicorn.Server(config).run()


def for_serving(settings: Settings) -> Settings:
    """A server embeds one short query per request, several requests at once: one onnxruntime thread each
    (unless the setting threads says otherwise). Its spinning pool threads would otherwise take the CPU
    PostgreSQL needs for the same requests (bench/RESULTS.md: 3x slower searches on a 2-core machine)."""
    return settings.replace(threads=1) if settings.embed.threads == 0 else settings


async def in_thread(fn: Callable[[], T], timeout: float) -> T:
    """Run blocking work (the app is synchronous) off the event loop, within the request timeout."""
    import anyio

    try:
        return await asyncio.wait_for(anyio.to_thread.run_sync(fn, abandon_on_cancel=True), timeout)
    except TimeoutError:
        raise UnavailableError(f"the request took longer than {timeout:g} s (setting request_timeout): try a "
                               "smaller k, or raise request_timeout", settings=("request_timeout",)) from None


def guarded(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A route whose unexpected errors become RagvpsErrors (kind failed/unavailable), answered as JSON by the
    RagvpsError handler; Starlette's catch-all 500 handler would re-raise them and drop the connection."""
    import functools

    from starlette.exceptions import HTTPException

    @functools.wraps(fn)
    async def route(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except (RagvpsError, HTTPException):
            raise
        except Exception as exc:  # noqa: BLE001
            _, body = error_body(exc)
            raise RagvpsError(body["error"], kind=body["kind"]) from None  # type: ignore[arg-type]

    return route


def error_body(exc: BaseException) -> tuple[int, dict[str, str]]:
    """The status and `{error, kind}` for any exception; unexpected ones are logged, never shown."""
    import psycopg

    if isinstance(exc, RagvpsError):
        return HTTP_STATUS[exc.kind], {"error": redact(str(exc)), "kind": exc.kind}
    if isinstance(exc, psycopg.OperationalError) or exc.__class__.__name__ == "PoolTimeout":
        return 503, {"error": "the database cannot be reached or is too busy: retry, and check PostgreSQL",
                     "kind": "unavailable"}
    log.error("unexpected error", exc_info=exc)
    return 500, {"error": "unexpected server error; the server log has the details", "kind": "failed"}


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
        kind = {401: "unauthorized", 404: "not_found", 413: "too_long"}.get(exc.status_code, "usage")
        status = exc.status_code if exc.status_code < 500 else 500
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


def page() -> str:
    return resources.files("ragvps.serve.web").joinpath("index.html").read_text(encoding="utf-8")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragvps")
    except PackageNotFoundError:
        return "0"
