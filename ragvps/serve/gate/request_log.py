"""The request log: one line per request, which a person can follow from a client's report to the stages
that answered it.

Each request gets an id: the `X-Request-Id` a proxy sent (letters, digits, `.` `_` `:` `-`, at most 128), or
a new one; the response carries it back in `X-Request-Id`. The line has the id, method, path (no query
string), route template, knowledge base, status, duration, stage timings, and for an answer its outcome and
evidence; the question only when the setting log_questions is on. Keys, headers and bodies never appear.
`log_format`: `text` (`POST /search 200 12.3ms`, then key=value, values quoted when they hold anything but
safe characters) or `json` (one
object a line). The same middleware counts each request for /metrics (`count`), by route template.

What the use cases report (ragvps.app.observe) reaches the request's record through a context variable: the
request's threads run in a copy of its context (serve/shared/threads.py), which holds the same record.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.routing import Match

from ragvps.app.observe import ANSWER_STAGES, STAGES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from ragvps.app.observe import Outcome
    from ragvps.app.requests import Answer, SearchResult

log = logging.getLogger("ragvps.requests")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
SAFE = re.compile(r"[A-Za-z0-9._:/{}@,+-]*")
_current: ContextVar[RequestRecord | None] = ContextVar("ragvps_request", default=None)


def current() -> RequestRecord | None:
    """The record of the request this code runs for, or None outside a request (a command)."""
    return _current.get()


@dataclass
class RequestRecord:
    """What one request's log line says; filled as the request runs."""

    id: str
    method: str
    path: str
    route: str = "unmatched"
    kbs: list[str] = field(default_factory=list)
    status: int = 0
    ms: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)
    outcome: Outcome | None = None
    evidence: float | None = None
    question: str | None = None

    def searched(self, kb: str, result: SearchResult) -> None:
        self._kb(kb)
        for key, ms in result.timings.items():
            if key in STAGES:
                self.stages[STAGES[key]] = round(self.stages.get(STAGES[key], 0.0) + ms, 2)
        self.question = result.query

    def answered(self, kb: str, answer: Answer, outcome: Outcome) -> None:
        self._kb(kb)
        self.outcome, self.evidence = outcome, round(answer.evidence, 4)
        for key in ANSWER_STAGES:
            if key in answer.timings:
                self.stages[STAGES[key]] = answer.timings[key]

    def used(self, kb: str) -> None:
        self._kb(kb)

    def _kb(self, kb: str) -> None:
        if kb not in self.kbs:
            self.kbs.append(kb)

    def fields(self, with_question: bool) -> dict[str, object]:
        out: dict[str, object] = {
            "request_id": self.id,
            "method": self.method,
            "path": self.path,
            "route": self.route,
            "kb": ",".join(self.kbs) or None,
            "status": self.status,
            "ms": self.ms,
            "stages": self.stages or None,
            "outcome": self.outcome,
            "evidence": self.evidence,
        }
        if with_question and self.question is not None:
            out["question"] = self.question
        return {k: v for k, v in out.items() if v is not None}


def text_line(fields: dict[str, object]) -> str:
    """`POST /search 200 12.3ms request_id=... route=...`: an access line's head, then `key=value`s; a value with
    anything but safe characters is JSON-quoted (no line breaks, no forged fields from a path or a question)."""

    def value(v: object) -> str:
        if isinstance(v, dict):
            v = ",".join(f"{k}:{x}" for k, x in v.items())
        text = str(v)
        return text if SAFE.fullmatch(text) else json.dumps(text)

    head = ("method", "path", "status", "ms")
    rest = " ".join(f"{k}={value(v)}" for k, v in fields.items() if k not in head)
    return f"{fields['method']} {value(fields['path'])} {fields['status']} {fields['ms']}ms {rest}"


class JsonLines(logging.Formatter):
    """The json log_format: each request's fields as one object (other records: their message)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "request", None)
        body = fields if isinstance(fields, dict) else {"message": record.getMessage()}
        return json.dumps({"time": self.formatTime(record), "level": record.levelname.lower(), **body})


class RequestLog:
    """ASGI middleware, outermost: the request id, the log line, the request's count and duration, and its row in
    the audit log (serve/gate/audit_log.py)."""

    def __init__(
        self,
        app: ASGIApp,
        routes: Sequence[BaseRoute],
        count: Callable[[str, str, int, float], None] | None,
        logs: bool,
        log_questions: bool,
        audit: Callable[[RequestRecord, Scope], None] | None = None,
    ) -> None:
        self.app, self.routes, self.count, self.audit = app, routes, count, audit
        self.logs, self.log_questions = logs, log_questions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        record = RequestRecord(
            given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex, scope["method"], scope["path"]
        )
        token = _current.set(record)
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", record.id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _current.reset(token)
            record.ms = round((time.perf_counter() - start) * 1000, 2)
            record.route = self._route(scope)
            if not record.kbs and isinstance(name := scope.get("path_params", {}).get("name"), str):
                record.kbs.append(name if name.isprintable() else name.encode("unicode_escape").decode("ascii"))
            if self.count is not None:
                self.count(record.route, record.method, record.status or 500, record.ms / 1000)
            if self.audit is not None:
                self.audit(record, scope)
            if self.logs:
                fields = record.fields(self.log_questions)
                log.info(text_line(fields), extra={"request": fields})

    def _route(self, scope: Scope) -> str:
        """The route template (`/kb/{name}/search`): bounded, whatever the path; "unmatched" for none."""
        route = scope.get("route")
        if route is None:  # refused before routing (a key, a Host): match it as the router would have
            route = next((r for r in self.routes if r.matches(scope)[0] == Match.FULL), None)
        path = getattr(route, "path", None)
        return path if isinstance(path, str) and path else "unmatched"
