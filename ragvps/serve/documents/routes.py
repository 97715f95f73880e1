"""Documents in and out over HTTP: `POST /kb/{name}/documents` (an upload, answered 202 with a job at once),
`GET /jobs/{id}` (its progress, or Server-Sent Events of it), `DELETE /jobs/{id}` (cancel),
`GET /kb/{name}/documents` (a page of them) and `DELETE /kb/{name}/documents/{id}`. Adding and removing take
the `write` role; a job is seen only by keys that may read its knowledge base (the same 404 otherwise)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from fastapi import Path, Query
from fastapi.responses import JSONResponse
from starlette.requests import Request  # at run time: FastAPI reads the routes' annotations
from starlette.responses import StreamingResponse

from ragvps.app import json_object
from ragvps.app.documents import (
    cancel_job,
    delete_document,
    discard,
    job_kb,
    job_status,
    list_documents,
    new_job_id,
    submit,
)
from ragvps.config import Settings
from ragvps.errors import NotFoundError
from ragvps.serve.documents import uploads
from ragvps.serve.gate.principal import principal_of
from ragvps.serve.shared.failures import failure, guarded
from ragvps.serve.shared.stream import SSE_HEADERS, sse
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from enum import Enum

    from fastapi import FastAPI

    from ragvps.app import App
    from ragvps.app.keys import Role
    from ragvps.serve.documents.runner import JobRunner
    from ragvps.serve.shared.lifecycle import Ready

MAX_ID = (1 << 63) - 1  # PostgreSQL's bigint
EVENTS_EVERY_S = 0.5  # how often a progress stream reads the job
KEEPALIVE_S = 15.0


# One Server-Sent Event of a job's progress: its name and its JSON (the job, or an error).
_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"enum": ["progress", "done", "error"]},
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": {"type": "object"}},
    },
}
EVENTS = {
    "description": "Server-Sent Events: `progress` with the job (as GET /jobs/{job} answers it) each time it "
    "changes, then `done` with its last state (or `error`)",
    "content": {"text/event-stream": {"schema": _EVENT}},
}
STATUS = {
    "description": "The job; with Accept: text/event-stream, its progress as Server-Sent Events",
    "content": {
        "application/json": {"schema": {"type": "object", "required": ["id", "state"]}},
        "text/event-stream": {"schema": _EVENT},
    },
}


def no_job(job: str) -> NotFoundError:
    return NotFoundError(
        f"no job {job!r} that this key may see: POST /kb/{{name}}/documents (an upload) and POST "
        "/kb/{name}/sources/{source}/sync answer with the id of the job they made"
    )


class Documents:
    def __init__(self, ready: Ready, settings: Settings, runner: JobRunner):
        self.ready, self.settings, self.runner = ready, settings, runner
        self.timeout = float(settings.serve.request_timeout)

    async def app_for(self, request: Request, name: str, role: Role) -> App:
        principal = principal_of(request)
        return await in_thread(lambda: self.ready.kb(name, principal, role), self.timeout)

    async def job_app(self, request: Request, job: str, role: Role) -> App:
        """The App of the knowledge base a job belongs to, if this key may use it with `role`."""
        kb_id = job_kb(job)
        if kb_id is None:
            raise no_job(job)
        principal = principal_of(request)

        def find() -> App:
            library = self.ready.library
            assert library is not None
            names = [n for n, i in library.catalog().items() if i == kb_id]
            if not names:
                raise no_job(job)
            try:
                return self.ready.kb(names[0], principal, role)
            except NotFoundError:
                raise no_job(job) from None

        self.ready.get()
        return await in_thread(find, self.timeout)

    async def upload(self, request: Request, name: str) -> JSONResponse:
        app = await self.app_for(request, name, "write")  # before a byte is stored
        job = new_job_id(app)
        kb_dir = app.settings.database.kb_dir
        try:
            files = await uploads.receive(request, kb_dir, job, self.settings.serve)
        except uploads.ClientGone:
            return JSONResponse({"error": "the client went away", "kind": "usage"}, status_code=400)
        try:
            await in_thread(lambda: submit(app, job, files), self.timeout)
        except BaseException:
            discard(kb_dir, job)
            raise
        self.runner.kick(app)
        return JSONResponse(
            {
                "job": job,
                "status_url": f"/jobs/{job}",
                "events_url": f"/jobs/{job}/events",
                "files": [{"name": f.name, "size": f.size} for f in files],
            },
            status_code=202,
            headers={"Location": f"/jobs/{job}"},
        )

    async def status(self, request: Request, job: str) -> StreamingResponse | dict[str, object]:
        app = await self.job_app(request, job, "read")
        if "text/event-stream" in request.headers.get("accept", ""):
            return self.events_response(app, job)
        try:
            return json_object(await in_thread(lambda: job_status(app, job), self.timeout))
        except NotFoundError:
            raise no_job(job) from None

    async def events(self, request: Request, job: str) -> StreamingResponse:
        app = await self.job_app(request, job, "read")
        try:
            await in_thread(lambda: job_status(app, job), self.timeout)
        except NotFoundError:
            raise no_job(job) from None
        return self.events_response(app, job)

    def events_response(self, app: App, job: str) -> StreamingResponse:
        return StreamingResponse(self._events(app, job), media_type="text/event-stream", headers=SSE_HEADERS)

    async def _events(self, app: App, job: str) -> AsyncIterator[bytes]:
        """`progress` each time the job changes, then `done` with its last state (or `error`)."""
        last, quiet = "", 0.0
        while True:
            try:
                status = await in_thread(lambda: job_status(app, job), self.timeout)
            except Exception as exc:
                f = failure(exc)
                yield sse("error", f.body() | {"status": f.status})
                return
            body = json_object(status)
            shown = json.dumps(body, sort_keys=True)
            if status.ended:
                yield sse("done", body)
                return
            if shown != last:
                yield sse("progress", body)
                last, quiet = shown, 0.0
            elif quiet >= KEEPALIVE_S:
                yield b": keep-alive\n\n"
                quiet = 0.0
            await asyncio.sleep(EVENTS_EVERY_S)
            quiet += EVENTS_EVERY_S

    async def cancel(self, request: Request, job: str) -> dict[str, object]:
        app = await self.job_app(request, job, "write")
        admin = principal_of(request).can(app.kb_name, "admin")
        try:
            return json_object(await in_thread(lambda: cancel_job(app, job, admin), self.timeout))
        except NotFoundError:
            raise no_job(job) from None

    async def listing(self, request: Request, name: str, limit: int, cursor: str | None) -> dict[str, object]:
        app = await self.app_for(request, name, "read")
        return json_object(await in_thread(lambda: list_documents(app, limit, cursor), self.timeout))

    async def delete(self, request: Request, name: str, doc: int) -> dict[str, object]:
        app = await self.app_for(request, name, "write")
        return json_object(await in_thread(lambda: delete_document(app, doc), self.timeout))


UPLOAD_BODY = {
    "requestBody": {
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {"files": {"type": "array", "items": {"type": "string", "format": "binary"}}},
                }
            },
            "application/json": {
                "schema": {
                    "oneOf": [
                        {
                            "type": "object",
                            "required": ["path", "text"],
                            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                        },
                        {"type": "array", "items": {"type": "object", "required": ["path", "text"]}},
                    ]
                }
            },
        }
    }
}  # the upload's request body, for /openapi.json


def add_document_routes(
    api: FastAPI, ready: Ready, settings: Settings, runner: JobRunner, errors: dict[int | str, dict[str, object]]
) -> None:
    """The routes above; `errors` are the error answers they document (those of every knowledge base route)."""
    do = Documents(ready, settings, runner)
    _add_documents(api, do, errors)
    _add_jobs(api, do, errors)


def _add_documents(api: FastAPI, do: Documents, errors: dict[int | str, dict[str, object]]) -> None:
    """POST and GET /kb/{name}/documents (an upload, a page of the documents), DELETE /kb/{name}/documents/{doc}."""
    tags: list[str | Enum] = ["documents"]  # the routes answer `object`: no response model, any JSON

    @api.post(
        "/kb/{name}/documents",
        status_code=202,
        responses=errors,
        tags=tags,
        openapi_extra=UPLOAD_BODY,
        summary="Add documents (multipart files, or JSON path+text): 202 with the job that ingests them",
    )
    @guarded
    async def upload(request: Request, name: str) -> object:
        return await do.upload(request, name)

    @api.get(
        "/kb/{name}/documents",
        responses=errors,
        tags=tags,
        summary="The documents stored: path, title, format, size, chunks, ingested_at, status; by pages",
    )
    @guarded
    async def listing(
        request: Request, name: str, limit: int = Query(100, ge=1, le=1000), cursor: str | None = None
    ) -> object:
        return await do.listing(request, name, limit, cursor)

    @api.delete(
        "/kb/{name}/documents/{doc}",
        responses=errors,
        tags=tags,
        summary="Remove a document: its chunks, vectors, cached answers and files",
    )
    @guarded
    async def delete(request: Request, name: str, doc: int = Path(ge=1, le=MAX_ID)) -> object:
        return await do.delete(request, name, doc)


def _add_jobs(api: FastAPI, do: Documents, errors: dict[int | str, dict[str, object]]) -> None:
    """GET /jobs/{job} (its progress, or Server-Sent Events of it), GET /jobs/{job}/events, DELETE /jobs/{job}."""
    tags: list[str | Enum] = ["documents"]

    @api.get(
        "/jobs/{job}",
        responses=errors | {200: STATUS},
        tags=tags,
        summary="A job's progress (files done of total, chunks embedded, rate, ETA, errors per file); "
        "with Accept: text/event-stream, the same as Server-Sent Events",
    )
    @guarded
    async def job_status(request: Request, job: str) -> object:
        return await do.status(request, job)

    @api.get(
        "/jobs/{job}/events",
        responses=errors | {200: EVENTS},
        tags=tags,
        summary="A job's progress as Server-Sent Events: `progress`..., then `done`",
    )
    @guarded
    async def job_events(request: Request, job: str) -> object:
        return await do.events(request, job)

    @api.delete(
        "/jobs/{job}",
        responses=errors,
        tags=tags,
        summary="Cancel a job: files stored stay stored; the rest is not ingested",
    )
    @guarded
    async def job_cancel(request: Request, job: str) -> object:
        return await do.cancel(request, job)
