"""The endpoints: /health, /search, /ask, /stats and the page at /. Each translates and calls the App."""

# No `from __future__ import annotations` here: FastAPI reads the request models (built per app, since
# their `k` bound is a setting) from the annotations at definition time.

import base64
import hashlib
import re
from enum import Enum
from importlib import resources
from typing import TYPE_CHECKING, cast

from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request

from ragvps.app.keys import ANYONE
from ragvps.config import Settings
from ragvps.errors import ForbiddenError
from ragvps.serve.api.endpoints import Endpoints
from ragvps.serve.api.health import HealthCheck
from ragvps.serve.api.schemas import AnswerOut, AskBody, ErrorOut, HealthOut, SearchBody, SearchOut, request_models
from ragvps.serve.gate.principal import principal_of
from ragvps.serve.shared.failures import guarded
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ragvps.serve.api.metrics import Metrics
    from ragvps.serve.shared.lifecycle import Ready

KB_ERRORS: dict[int | str, dict[str, object]] = {
    404: {"model": ErrorOut, "description": "No such knowledge base, or none this key may use (the same answer)."},
}
ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorOut, "description": "The request is not valid (kind usage)."},
    401: {"model": ErrorOut, "description": "An API key is needed, or the one sent is not valid."},
    404: {"model": ErrorOut, "description": "No such knowledge base, or none this key may use (the same answer)."},
    409: {"model": ErrorOut, "description": "The index was built with another model (kind conflict)."},
    413: {"model": ErrorOut, "description": "The body is larger than max_body_bytes (kind too_long)."},
    503: {"model": ErrorOut, "description": "Not ready, the database is unreachable, or request_timeout passed."},
    500: {"model": ErrorOut, "description": "A setting is wrong (kind config) or an unexpected failure (failed)."},
}


def _event(name: str, payload: dict[str, object]) -> dict[str, object]:
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"const": name},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"type": "object", **payload},
            },
        },
    }


# One Server-Sent Event of a streamed /ask: its name and its JSON data.
SSE_EVENT: dict[str, object] = {
    "oneOf": [
        _event("sources", {"required": ["sources"], "properties": {"sources": {"type": "array"}}}),
        _event("token", {"required": ["text"], "properties": {"text": {"type": "string"}}}),
        _event("done", {"required": ["citations", "usage"], "properties": {"citations": {"type": "array"}}}),
        _event(
            "error",
            {"required": ["error", "kind"], "properties": {"error": {"type": "string"}, "kind": {"type": "string"}}},
        ),
    ]
}


# The page's icon (browsers ask for /favicon.ico on every load): a small magnifier, as SVG.
ICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="6.5" cy="6.5" r="4.5" '
    b'fill="none" stroke="#1a5fb4" stroke-width="2"/><path d="M10 10l4.5 4.5" stroke="#1a5fb4" '
    b'stroke-width="2.5" stroke-linecap="round"/></svg>'
)


def page() -> str:
    return resources.files("ragvps.serve.web").joinpath("index.html").read_text(encoding="utf-8")


def page_policy(html: str) -> str:
    """The page's Content-Security-Policy: only its own script runs (by hash, so an injected inline script or a
    `javascript:` link would not), nothing is loaded from elsewhere, and no other site may frame it."""
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'" for s in scripts
    )
    return (
        f"default-src 'self'; script-src {hashes}; style-src 'unsafe-inline'; img-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def add_routes(api: "FastAPI", ready: "Ready", settings: Settings) -> None:
    """The page and its icon, /health, /search, /ask, /stats, and the same per knowledge base (add_kb_routes)."""
    add_page_routes(api)
    SearchIn, AskIn = request_models(settings.serve.max_k)
    check = HealthCheck(ready)
    do = Endpoints(ready, settings)

    @api.get(
        "/health",
        response_model=HealthOut,
        responses={503: {"model": HealthOut}},
        summary="Database reachable, active model and dimension, number of chunks",
    )
    @guarded
    async def health() -> JSONResponse:
        status, body = await check()
        return JSONResponse(body, status_code=status)

    @api.post(
        "/search",
        response_model=SearchOut,
        responses=ERRORS,
        summary="Hybrid, vector or keyword search: the same hits as `ragvps query --json`",
    )
    @guarded
    async def search(request: Request, body: SearchIn) -> JSONResponse:  # type: ignore[valid-type]
        return await do.search(request, cast(SearchBody, body), None)

    @api.post(
        "/ask",
        response_model=AnswerOut,
        responses=ERRORS
        | {
            200: {
                "description": "The answer (`ragvps ask --json`); with stream: true, "
                "Server-Sent Events `sources`, `token`..., `done`.",
                "content": {"text/event-stream": {"schema": SSE_EVENT}},
            }
        },
        summary="An answer with citations, from the chunks search finds",
    )
    @guarded
    async def ask(request: Request, body: AskIn) -> object:  # type: ignore[valid-type]
        return await do.ask(request, cast(AskBody, body), None)

    @api.get("/stats", responses=ERRORS, summary="Table and index sizes beside RAM, as `ragvps stats --json`")
    @guarded
    async def stats(request: Request) -> dict[str, object]:
        return await do.stats(request, None)

    add_kb_routes(api, do, SearchIn, AskIn)


def add_page_routes(api: "FastAPI") -> None:
    """The page at / (its Content-Security-Policy allows its own script only) and its icon; not in the schema."""
    html = page()
    csp = page_policy(html)

    @api.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(
            html,
            headers={
                "Cache-Control": "no-cache",
                "Content-Security-Policy": csp,
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            },
        )

    @api.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def add_kb_routes(api: "FastAPI", do: "Endpoints", SearchIn: type, AskIn: type) -> None:
    """The same routes for any knowledge base the key may read, and the list of those."""
    tags: list[str | Enum] = ["knowledge bases"]

    @api.post(
        "/kb/{name}/search",
        response_model=SearchOut,
        responses=ERRORS | KB_ERRORS,
        tags=tags,
        summary="Search one knowledge base",
    )
    @guarded
    async def kb_search(request: Request, name: str, body: SearchIn) -> JSONResponse:  # type: ignore[valid-type]
        return await do.search(request, cast(SearchBody, body), name)

    @api.post(
        "/kb/{name}/ask",
        response_model=AnswerOut,
        responses=ERRORS | KB_ERRORS,
        tags=tags,
        summary="Ask one knowledge base",
    )
    @guarded
    async def kb_ask(request: Request, name: str, body: AskIn) -> object:  # type: ignore[valid-type]
        return await do.ask(request, cast(AskBody, body), name)

    @api.get("/kb/{name}/stats", responses=ERRORS | KB_ERRORS, tags=tags, summary="One knowledge base's sizes")
    @guarded
    async def kb_stats(request: Request, name: str) -> dict[str, object]:
        return await do.stats(request, name)

    @api.get("/kb", tags=tags, responses=ERRORS, summary="The knowledge bases this key may read")
    @guarded
    async def kb_list(request: Request) -> dict[str, object]:
        return await do.kb_list(request)


def add_metrics_route(api: "FastAPI", metrics: "Metrics", ready: "Ready") -> None:
    """GET /metrics: for a key that is admin on every knowledge base (a key from api_keys or api_key_file, or a
    made key granted admin on each), or anyone on a server without keys (which listens on loopback only). The
    metrics name every knowledge base and how much each is used, so a key scoped to some must not read them."""
    timeout = ready.settings.serve.request_timeout

    @api.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:
        principal = principal_of(request)
        if not principal.everything:
            names = await in_thread(lambda: ready.visible(ANYONE), timeout)  # every knowledge base
            if not names or not all(principal.can(n, "admin") for n in names):
                raise ForbiddenError(
                    "/metrics needs a key that is admin on every knowledge base (one from "
                    "api_keys or api_key_file): the metrics name them all"
                )
        body = await in_thread(metrics.exposition, timeout)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
