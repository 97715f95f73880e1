"""Ollama's API, emulated: GET /api/version, GET /api/tags, POST /api/show and POST /api/chat (NDJSON lines,
streamed unless `stream: false`), which is what Open WebUI's Ollama connection and the `ollama` clients speak.
Each knowledge base the key may read is a model (`ragvps:latest` for the server's own, the others by name);
the chat use case is the one /v1/chat/completions uses. Errors are Ollama's `{"error": "..."}` (the server's
`{error, kind}` reads the same), and whatever fails before an answer's first piece gets its status before the
stream starts.
"""

# No `from __future__ import annotations` here: FastAPI reads the request models from the annotations.

import dataclasses
import datetime
import hashlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ragvps.app import ChatRequest, Overrides
from ragvps.app.chat import check_conversation
from ragvps.config import Settings
from ragvps.errors import InputTooLongError
from ragvps.serve.gate.principal import denial, model_lister, principal_of
from ragvps.serve.ollama.shapes import (
    OllamaChatIn,
    OllamaErrorOut,
    OllamaOptions,
    OllamaShowIn,
    PsOut,
    ShowOut,
    TagsOut,
    VersionOut,
)
from ragvps.serve.shared.chat import extra, kb_of, model_of, open_chat
from ragvps.serve.shared.failures import error_body, guarded
from ragvps.serve.shared.threads import Emitted, in_thread

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ragvps.app import App, ChatAnswer
    from ragvps.serve.shared.chat import Opened
    from ragvps.serve.shared.lifecycle import Ready

    Resolve = Callable[[Request, str], Awaitable[App | JSONResponse]]  # a model name's App, or the 404 to answer

VERSION = "0.9.0"  # the Ollama API these routes follow
FOREVER = "2318-01-01T00:00:00Z"  # /api/ps's expires_at for a model that stays loaded (Ollama's keep_alive -1)
TAG = ":latest"


ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": OllamaErrorOut, "description": text}
    for code, text in (
        (400, "The request is not valid, or too long."),
        (401, "An API key is needed, or the one sent is not valid."),
        (404, "No such model: /api/tags lists the knowledge bases."),
        (413, "The body is over max_body_bytes."),
        (503, "Not ready, the database or the LLM is unreachable, or request_timeout passed."),
    )
}
DETAILS = {
    "format": "ragvps",
    "family": "ragvps",
    "families": ["ragvps"],
    "parameter_size": "",
    "quantization_level": "",
}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def _line(body: Mapping[str, object]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


def add_ollama_routes(api: "FastAPI", ready: "Ready", settings: Settings) -> None:
    """/api/version, /api/tags, /api/ps, /api/show and /api/chat."""
    timeout = float(settings.serve.request_timeout)
    started = _now()
    own = settings.database.kb

    async def readable(request: Request, listed: bool = False) -> list[str]:
        """This key's knowledge bases as Ollama model names; `listed`: those with documents (Ready.listed)."""
        principal = model_lister(principal_of(request))
        names = await in_thread(lambda: (ready.listed if listed else ready.visible)(principal), timeout)
        return [model_of(n, own) + TAG for n in names]

    async def resolve(request: Request, model: str) -> "App | JSONResponse":
        served = await readable(request)
        name = model if model.endswith(TAG) or ":" in model else model + TAG
        if name not in served:
            return JSONResponse(
                {
                    "error": f"model {model!r} not found: the knowledge bases this key may read are "
                    f"{', '.join(served) or 'none'} (GET /api/tags)",
                    "kind": "not_found",
                },
                status_code=404,
            )
        kb = kb_of(name.removesuffix(TAG), own)
        return await in_thread(lambda: ready.kb(kb, model_lister(principal_of(request))), timeout)

    _add_lists(api, readable, started)
    _add_show(api, resolve, started)
    _add_chat(api, resolve, timeout)


def _add_show(api: "FastAPI", resolve: "Resolve", started: str) -> None:
    """/api/show: one knowledge base the key may read, as Ollama's model description."""

    @api.post(
        "/api/show",
        response_model=ShowOut,
        responses=ERRORS,
        tags=["ollama"],
        summary="One knowledge base, as Ollama's model description",
    )
    @guarded
    async def show(request: Request, body: OllamaShowIn) -> JSONResponse | dict[str, object]:
        found = await resolve(request, body.model or body.name or "")
        if isinstance(found, JSONResponse):
            return found
        return {
            "modified_at": started,
            "modelfile": "",
            "parameters": "",
            "template": "",
            "details": DETAILS,
            "model_info": {"general.architecture": "ragvps", "ragvps.generator": found.generator.name},
            "capabilities": ["completion", "tools"] if not found.generator.extractive else ["completion"],
        }


def _add_chat(api: "FastAPI", resolve: "Resolve", timeout: float) -> None:
    """/api/chat: the chat use case, answered as NDJSON lines or one JSON object."""
    answers: dict[int | str, dict[str, object]] = {
        200: {
            "description": "NDJSON lines (stream, the default), or one JSON object, as Ollama's.",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        }
    }

    @api.post(
        "/api/chat",
        responses=ERRORS | answers,
        tags=["ollama"],
        summary="Ollama-compatible chat: an answer to the last message, retrieved with the conversation",
    )
    @guarded
    async def chat(request: Request, body: OllamaChatIn) -> object:  # no response model: FastAPI documents any JSON
        found = await resolve(request, body.model)
        try:
            if isinstance(found, JSONResponse):
                return found
            return await _chat(found, body, timeout, denial(principal_of(request), found.settings.database.kb))
        except InputTooLongError as exc:  # 400, as Ollama answers an over-long input (and /v1 does)
            return JSONResponse({"error": str(exc), "kind": exc.kind}, status_code=400)


def _add_lists(api: "FastAPI", readable: "Callable[[Request, bool], Awaitable[list[str]]]", started: str) -> None:
    """/api/version, and /api/tags and /api/ps: the knowledge bases this key may read that hold documents."""

    @api.get(
        "/api/version",
        response_model=VersionOut,
        responses=ERRORS,
        tags=["ollama"],
        summary="The Ollama API version these routes follow",
    )
    async def version() -> dict[str, str]:
        return {"version": VERSION}

    @api.get(
        "/api/tags",
        response_model=TagsOut,
        responses=ERRORS,
        tags=["ollama"],
        summary="The knowledge bases this key may read, as Ollama's model list",
    )
    @guarded
    async def tags(request: Request) -> dict[str, object]:
        return {"models": [_entry(name, started) for name in await readable(request, True)]}

    @api.get(
        "/api/ps",
        response_model=PsOut,
        responses=ERRORS,
        tags=["ollama"],
        summary="The knowledge bases loaded, as Ollama's running models: all of /api/tags (a server keeps "
        "them ready while it runs)",
    )
    @guarded
    async def ps(request: Request) -> dict[str, object]:
        return {
            "models": [
                _entry(name, started) | {"expires_at": FOREVER, "size_vram": 0}
                for name in await readable(request, True)
            ]
        }


async def _chat(
    app: "App", body: OllamaChatIn, timeout: float, denied: str = ""
) -> "JSONResponse | StreamingResponse | dict[str, object]":
    """The answer, whole or as NDJSON lines; `format` (JSON) needs an LLM, and `tools` one that takes them. A
    forwarded user who may not read the knowledge base is `denied`: the answer says why."""
    asked = dataclasses.replace(_request(body, not app.generator.extractive), denied=denied)
    problem = app.generator.unsupported(asked.tools)
    if problem is not None:  # Ollama's `format` is response_format here
        said = problem.message.replace("response_format", "format") if body.format else problem.message
        return JSONResponse({"error": said, "kind": "usage"}, status_code=400)
    if body.stream:
        return await _stream(app, asked, timeout, body.model)
    start = time.perf_counter_ns()
    answer = await in_thread(lambda: app.chat(asked), timeout)
    return _final(answer, answer.content, body.model, start)


def _entry(name: str, started: str) -> dict[str, object]:
    digest = hashlib.sha256(name.encode()).hexdigest()
    return {"name": name, "model": name, "modified_at": started, "size": 0, "digest": digest, "details": DETAILS}


def _request(body: OllamaChatIn, llm: bool) -> "ChatRequest":
    messages = tuple((m.role, m.content) for m in body.messages)
    check_conversation(messages, llm)
    options = body.options or OllamaOptions(temperature=None, num_predict=None)
    passed: dict[str, object] = {}
    if body.tools:
        passed["tools"] = body.tools
    if body.format == "json":
        passed["response_format"] = {"type": "json_object"}
    elif isinstance(body.format, dict):
        passed["response_format"] = {"type": "json_schema", "json_schema": {"name": "format", "schema": body.format}}
    return ChatRequest(
        messages,
        Overrides(temperature=options.temperature, max_tokens=options.num_predict),
        tools=json.dumps(passed) if passed else "",
    )


def _message(answer: "ChatAnswer", content: str) -> dict[str, object]:
    said: dict[str, object] = {"role": "assistant", "content": content}
    if answer.answer.tool_calls:
        said["tool_calls"] = [
            {"function": {"name": t.name, "arguments": _arguments(t.arguments)}} for t in answer.answer.tool_calls
        ]
    return said


def _arguments(text: str) -> object:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {}


def _final(answer: "ChatAnswer", content: str, model: str, start: int) -> dict[str, object]:
    u = answer.usage
    return {
        "model": model,
        "created_at": _now(),
        "message": _message(answer, content),
        "done": True,
        "done_reason": "stop",
        "total_duration": time.perf_counter_ns() - start,
        "prompt_eval_count": u.prompt_tokens,
        "eval_count": u.completion_tokens,
        "ragvps": extra(answer),
    }


async def _stream(app: "App", request: "ChatRequest", timeout: float, model: str) -> "JSONResponse | StreamingResponse":
    """NDJSON lines once the answer's first piece is there (serve.shared.chat: what fails before it is an error
    status)."""
    opened = await open_chat(app, request, timeout, "ragvps-ollama-chat")
    if isinstance(opened, BaseException):
        status, body = error_body(opened)
        return JSONResponse(body, status_code=status)
    return StreamingResponse(_lines(opened, model), media_type="application/x-ndjson")


async def _lines(opened: "Opened[ChatAnswer]", model: str) -> AsyncIterator[bytes]:
    """One line per piece of the answer, then the `done: true` line; an error after the start is one line."""
    start = time.perf_counter_ns()
    async for event in opened.events():
        if isinstance(event, Emitted):
            yield _line(
                {
                    "model": model,
                    "created_at": _now(),
                    "message": {"role": "assistant", "content": event.value},
                    "done": False,
                }
            )
        elif isinstance(event, BaseException):
            yield _line(error_body(event)[1])
        else:
            yield _line(_final(event.value, "", model, start))


class JsonBodies:
    """Ollama reads every /api body as JSON whatever its Content-Type, and its own examples use `curl -d`, which sends
    application/x-www-form-urlencoded: under /api a body is read as JSON too (elsewhere the wrong type is a 415)."""

    def __init__(self, app: "ASGIApp"):
        self.app = app

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/") and scope.get("method") == "POST":
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = dict(scope, headers=[*headers, (b"content-type", b"application/json")])
        await self.app(scope, receive, send)
