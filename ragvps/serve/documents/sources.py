"""Connected sources over HTTP (issue 46): `GET /kb/{name}/sources` (read), and with the `admin` role
`POST /kb/{name}/sources` (add one), `DELETE /kb/{name}/sources/{source}` and `POST /kb/{name}/sources/{source}/sync`
(a sync queued as a job, answered 202 at once: `GET /jobs/{id}` shows its progress and failed items, `DELETE
/jobs/{id}` cancels it; a sync of the source already open is answered with that job). A git source added over
HTTP must be a URL: a path on the server's disk is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse
from starlette.requests import Request  # at run time: FastAPI reads the routes' annotations

from ragvps.app import jsonable
from ragvps.app.sources import SourceSpec, add_source, list_sources, queue_sync, remove_source
from ragvps.config import Settings
from ragvps.errors import UsageError
from ragvps.serve.gate.principal import principal_of
from ragvps.serve.shared.failures import guarded
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from enum import Enum

    from fastapi import FastAPI

    from ragvps.app import App
    from ragvps.app.keys import Role
    from ragvps.serve.documents.runner import JobRunner
    from ragvps.serve.shared.lifecycle import Ready

REMOTE = ("http://", "https://", "ssh://", "git://", "git@")


SOURCE_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["kind", "name", "location"],
                    "properties": {
                        "kind": {"enum": ["git", "web", "s3"]},
                        "name": {"type": "string"},
                        "location": {"type": "string"},
                        "options": {"type": "object"},
                    },
                }
            }
        },
    }
}  # the request body of POST /kb/{name}/sources, for /openapi.json


def spec_of(body: object) -> SourceSpec:
    """The JSON body `{"kind", "name", "location", "options": {...}}` as a SourceSpec, or a UsageError."""
    if not isinstance(body, dict):
        raise UsageError('the body must be a JSON object: {"kind": "git|web|s3", "name": ..., "location": ...}')
    missing = [k for k in ("kind", "name", "location") if not isinstance(body.get(k), str)]
    if missing:
        raise UsageError(f"the body needs {', '.join(missing)} (strings)")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise UsageError("options must be a JSON object")
    kind, location = str(body["kind"]), str(body["location"]).strip()
    if kind == "git" and not location.startswith(REMOTE):
        raise UsageError(
            "a git source added over HTTP must be a repository URL (http, https, ssh, git), not a "
            "path on the server: add a local repository with `ragvps source add git` on the server"
        )
    return SourceSpec(kind, str(body["name"]), location, {str(k): v for k, v in options.items()})


class Sources:
    def __init__(self, ready: Ready, settings: Settings, runner: JobRunner):
        self.ready, self.runner = ready, runner
        self.timeout = float(settings.serve.request_timeout)

    async def app_for(self, request: Request, name: str, role: Role) -> App:
        principal = principal_of(request)
        return await in_thread(lambda: self.ready.kb(name, principal, role), self.timeout)

    async def listing(self, request: Request, name: str) -> object:
        app = await self.app_for(request, name, "read")
        return jsonable(await in_thread(lambda: list_sources(app), self.timeout))

    async def add(self, request: Request, name: str) -> object:
        try:
            body = await request.json()
        except ValueError as exc:  # no body, or not JSON
            raise UsageError(f"the body must be JSON ({exc})") from None
        spec = spec_of(body)
        app = await self.app_for(request, name, "admin")
        return jsonable(await in_thread(lambda: add_source(app, spec), self.timeout))

    async def remove(self, request: Request, name: str, source: str) -> object:
        app = await self.app_for(request, name, "admin")
        return jsonable(await in_thread(lambda: remove_source(app, source), self.timeout))

    async def sync(self, request: Request, name: str, source: str) -> JSONResponse:
        app = await self.app_for(request, name, "admin")
        queued = await in_thread(lambda: queue_sync(app, source), self.timeout)
        self.runner.kick(app)
        job = queued.job
        return JSONResponse(
            {
                "job": job,
                "source": queued.source,
                "created": queued.created,
                "status_url": f"/jobs/{job}",
                "events_url": f"/jobs/{job}/events",
            },
            status_code=202,
            headers={"Location": f"/jobs/{job}"},
        )


def add_source_routes(
    api: FastAPI, ready: Ready, settings: Settings, runner: JobRunner, errors: dict[int | str, dict[str, object]]
) -> None:
    """The routes above; `errors` are the error answers they document."""
    do = Sources(ready, settings, runner)
    tags: list[str | Enum] = ["sources"]

    @api.get("/kb/{name}/sources", responses=errors, tags=tags, summary="The connected sources and their last sync")
    @guarded
    async def listing(request: Request, name: str) -> object:
        return await do.listing(request, name)

    @api.post(
        "/kb/{name}/sources",
        status_code=201,
        responses=errors,
        tags=tags,
        openapi_extra=SOURCE_BODY,
        summary="Connect a git repository (URL), web site or S3 bucket (admin)",
    )
    @guarded
    async def add(request: Request, name: str) -> object:
        return await do.add(request, name)

    @api.delete(
        "/kb/{name}/sources/{source}",
        responses=errors,
        tags=tags,
        summary="Disconnect a source: its documents are deleted (admin)",
    )
    @guarded
    async def remove(request: Request, name: str, source: str) -> object:
        return await do.remove(request, name, source)

    @api.post(
        "/kb/{name}/sources/{source}/sync",
        status_code=202,
        responses=errors,
        tags=tags,
        summary="Sync one source: 202 with the job that runs it (GET /jobs/{job}), the open one if any (admin)",
    )
    @guarded
    async def sync(request: Request, name: str, source: str) -> object:
        return await do.sync(request, name, source)
