"""What the search, ask and stats routes do, once for the server's own knowledge base (/search) and for any
other (/kb/{name}/search): find the caller's App, translate the body, run the use case off the event loop."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

from ragvps.app import json_object, jsonable
from ragvps.app.library import search_many
from ragvps.config import Settings
from ragvps.serve.gate.principal import principal_of
from ragvps.serve.shared.convert import ask_request, hits_out, search_request
from ragvps.serve.shared.stream import streaming_response
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import StreamingResponse

    from ragvps.app import App
    from ragvps.app.keys import Role
    from ragvps.serve.api.schemas import AskBody, SearchBody
    from ragvps.serve.shared.lifecycle import Ready


class Endpoints:
    def __init__(self, ready: Ready, settings: Settings):
        self.ready, self.settings = ready, settings
        self.timeout = float(settings.serve.request_timeout)
        self.max_k = settings.serve.max_k

    async def app_for(self, request: Request, name: str | None, role: Role = "read") -> App:
        """The App of knowledge base `name` (the server's own without one), if the caller holds `role` on it."""
        principal = principal_of(request)
        name = name or self.settings.database.kb
        known = self.ready.kb_known(name, principal, role)  # most requests: no thread, no query
        if known is not None:
            return known
        return await in_thread(lambda: self.ready.kb(name, principal, role), self.timeout)

    async def search(self, request: Request, body: SearchBody, name: str | None) -> JSONResponse:
        """The hits as JSON, rendered here: the response is not validated against SearchOut again (jsonable's
        output already has its shape; validating ten hits and their texts cost 2-3% of a served search's CPU)."""
        query = search_request(body.query, body.k, body.mode, body.path_prefix, body.meta, self.max_k)
        start = time.perf_counter()
        if body.kbs:  # several knowledge bases: each searched with its own model, fused by rank
            principal = principal_of(request)
            names = list(dict.fromkeys(body.kbs))
            apps = await in_thread(lambda: [self.ready.kb(kb, principal) for kb in names], self.timeout)
            result = await in_thread(lambda: search_many(apps, query), self.timeout)
        else:
            app = await self.app_for(request, name)
            result = await in_thread(lambda: app.search(query), self.timeout)
        return JSONResponse({"hits": hits_out(result.hits), "took_ms": round((time.perf_counter() - start) * 1000, 3)})

    async def ask(self, request: Request, body: AskBody, name: str | None) -> StreamingResponse | object:
        app = await self.app_for(request, name)
        question = ask_request(
            body.question, body.k, body.mode, body.path_prefix, body.meta, self.max_k, body.use_cache
        )
        if body.stream:
            return streaming_response(app, question, self.timeout)
        answer = await in_thread(lambda: app.ask(question), self.timeout)
        return JSONResponse(jsonable(answer))  # rendered once, as the CLI does; AnswerOut documents the shape

    async def stats(self, request: Request, name: str | None) -> dict[str, object]:
        app = await self.app_for(request, name)
        report = await in_thread(app.stats, self.timeout)
        return json_object(report)

    async def kb_list(self, request: Request) -> dict[str, object]:
        principal = principal_of(request)
        names = await in_thread(lambda: self.ready.visible(principal), self.timeout)
        return {"knowledge_bases": [{"name": n, "default": n == self.settings.database.kb} for n in names]}
