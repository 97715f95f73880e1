"""The endpoints: /health, /search, /ask, /stats and the page at /. Each translates and calls the App."""

# No `from __future__ import annotations` here: FastAPI reads the request models (built per app, since
# their `k` bound is a setting) from the annotations at definition time.

import time
from typing import TYPE_CHECKING, Any, cast

from ragvps.config import Settings
from ragvps.serve.schemas import AnswerOut, AskBody, ErrorOut, HealthOut, SearchBody, SearchOut, request_models

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ragvps.serve.lifecycle import Ready

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "The request is not valid (kind usage)."},
    401: {"model": ErrorOut, "description": "An API key is needed, or the one sent is not valid."},
    409: {"model": ErrorOut, "description": "The index was built with another model (kind conflict)."},
    413: {"model": ErrorOut, "description": "The body is larger than max_body_bytes (kind too_long)."},
    503: {"model": ErrorOut, "description": "Not ready, the database is unreachable, or request_timeout passed."},
    500: {"model": ErrorOut, "description": "A setting is wrong (kind config) or an unexpected failure (failed)."},
}


def _event(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["event", "data"],
            "properties": {"event": {"const": name},
                           "data": {"type": "string", "contentMediaType": "application/json",
                                    "contentSchema": {"type": "object", **payload}}}}


# One Server-Sent Event of a streamed /ask: its name and its JSON data.
SSE_EVENT: dict[str, Any] = {"oneOf": [
    _event("sources", {"required": ["sources"], "properties": {"sources": {"type": "array"}}}),
    _event("token", {"required": ["text"], "properties": {"text": {"type": "string"}}}),
    _event("done", {"required": ["citations", "usage"], "properties": {"citations": {"type": "array"}}}),
    _event("error", {"required": ["error", "kind"], "properties": {"error": {"type": "string"},
                                                                   "kind": {"type": "string"}}}),
]}


def page() -> str:
    from importlib import resources

    return resources.files("ragvps.serve.web").joinpath("index.html").read_text(encoding="utf-8")


def page_policy(html: str) -> str:
    """The page's Content-Security-Policy: only its own script runs (by hash, so an injected inline script or a
    `javascript:` link would not), nothing is loaded from elsewhere, and no other site may frame it."""
    import base64
    import hashlib
    import re

    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    hashes = " ".join("'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
                      for s in scripts)
    return (f"default-src 'self'; script-src {hashes}; style-src 'unsafe-inline'; img-src 'self'; "
            "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def add_routes(api: "FastAPI", ready: "Ready", settings: Settings) -> None:
    from fastapi.responses import HTMLResponse, JSONResponse

    from ragvps.app import json_object, jsonable
    from ragvps.serve.convert import ask_request, hits_out, search_request
    from ragvps.serve.failures import guarded
    from ragvps.serve.health import HealthCheck
    from ragvps.serve.stream import streaming_response
    from ragvps.serve.threads import in_thread

    SearchIn, AskIn = request_models(settings.serve.max_k)
    timeout = float(settings.serve.request_timeout)
    max_k = settings.serve.max_k
    html = page()
    csp = page_policy(html)
    check = HealthCheck(ready)

    @api.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(html, headers={"Cache-Control": "no-cache", "Content-Security-Policy": csp,
                                           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"})

    @api.get("/health", response_model=HealthOut, responses={503: {"model": HealthOut}},
             summary="Database reachable, active model and dimension, number of chunks")
    @guarded
    async def health() -> Any:
        status, body = await check()
        return JSONResponse(body, status_code=status)

    @api.post("/search", response_model=SearchOut, responses=ERRORS,
              summary="Hybrid, vector or keyword search: the same hits as `ragvps query --json`")
    @guarded
    async def search(body: SearchIn) -> Any:  # type: ignore[valid-type]
        app, b = ready.get(), cast(SearchBody, body)
        request = search_request(b.query, b.k, b.mode, b.path_prefix, b.meta, max_k)
        start = time.perf_counter()
        result = await in_thread(lambda: app.search(request), timeout)
        return {"hits": hits_out(result.hits), "took_ms": round((time.perf_counter() - start) * 1000, 3)}

    @api.post("/ask", response_model=AnswerOut,
              responses=ERRORS | {200: {"description": "The answer (`ragvps ask --json`); with stream: true, "
                                                      "Server-Sent Events `sources`, `token`..., `done`.",
                                        "content": {"text/event-stream": {"schema": SSE_EVENT}}}},
              summary="An answer with citations, from the chunks search finds")
    @guarded
    async def ask(body: AskIn) -> Any:  # type: ignore[valid-type]
        app, b = ready.get(), cast(AskBody, body)
        request = ask_request(b.question, b.k, b.mode, b.path_prefix, b.meta, max_k, b.use_cache)
        if b.stream:
            return streaming_response(app, request, timeout)
        answer = await in_thread(lambda: app.ask(request), timeout)
        return jsonable(answer)

    @api.get("/stats", responses=ERRORS, summary="Table and index sizes beside RAM, as `ragvps stats --json`")
    @guarded
    async def stats() -> dict[str, object]:
        app = ready.get()
        report = await in_thread(app.stats, timeout)
        return json_object(report)
