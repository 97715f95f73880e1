"""The OpenAI-compatible API: GET /v1/models and POST /v1/chat/completions (JSON, or SSE chunks with
`stream: true`), so Open WebUI, LibreChat, Continue or the OpenAI SDK can use the knowledge base with a base
URL and a key. The request's `messages` are the whole conversation; the chat use case answers its last turn.
Keys, body limits and Host/Origin rules are the server's middleware, as for every route; errors come back in
OpenAI's shape (serve.shared.error_shapes).
"""

# No `from __future__ import annotations` here: FastAPI reads the request model from the annotations.

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse, Response
from starlette.requests import Request
from starlette.responses import StreamingResponse

from ragvps.app import ChatRequest, Overrides
from ragvps.app.chat import check_conversation
from ragvps.config import Settings
from ragvps.serve.gate.principal import denial, model_lister, principal_of
from ragvps.serve.openai import shapes as oa
from ragvps.serve.shared.chat import extra, kb_of, model_of, open_chat
from ragvps.serve.shared.failures import error_body, guarded
from ragvps.serve.shared.stream import SSE_HEADERS
from ragvps.serve.shared.threads import Emitted, in_thread

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.responses import Response

    from ragvps.app import App, ChatAnswer
    from ragvps.serve.shared.chat import Opened
    from ragvps.serve.shared.lifecycle import Ready

ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": oa.OpenAIErrorOut, "description": "The request is not valid, or too long."},
    401: {"model": oa.OpenAIErrorOut, "description": "An API key is needed, or the one sent is not valid."},
    404: {"model": oa.OpenAIErrorOut, "description": "No such model: /v1/models lists the knowledge base."},
    409: {"model": oa.OpenAIErrorOut, "description": "The index was built with another embedding model."},
    500: {"model": oa.OpenAIErrorOut, "description": "A setting is wrong, or an unexpected failure (server_error)."},
    503: {
        "model": oa.OpenAIErrorOut,
        "description": "Not ready, the database or the LLM is unreachable, or request_timeout passed.",
    },
}


# The 200 answer of /v1/chat/completions: JSON, or with stream: true, Server-Sent Events.
COMPLETION_OK: dict[int | str, dict[str, object]] = {
    200: {
        "description": "The completion; with stream: true, Server-Sent Events of "
        "chat.completion.chunk objects, then `data: [DONE]`.",
        "content": {
            "text/event-stream": {
                "schema": {"type": "object", "required": ["data"], "properties": {"data": {"type": "string"}}}
            }
        },
    }
}

Readable = Callable[[Request, bool], Awaitable[list[str]]]  # the models a request's key may use; True: listed only


def add_openai_routes(api: "FastAPI", ready: "Ready", settings: Settings) -> None:
    """/v1/models, /v1/models/{model} and /v1/chat/completions."""
    timeout = float(settings.serve.request_timeout)

    async def readable(request: Request, listed: bool = False) -> list[str]:
        """The models this key may use: the server's own knowledge base as `ragvps`, the others by name; `listed`:
        those with documents (Ready.listed)."""
        principal = model_lister(principal_of(request))
        names = await in_thread(lambda: (ready.listed if listed else ready.visible)(principal), timeout)
        return [model_of(n, settings.database.kb) for n in names]

    _add_models(api, readable)
    _add_completions(api, readable, ready, settings)


def _add_models(api: "FastAPI", readable: Readable) -> None:
    """/v1/models (the knowledge bases that hold documents) and /v1/models/{model}."""
    started = int(time.time())

    @api.get(
        "/v1/models",
        response_model=oa.ModelListOut,
        responses=ERRORS,
        tags=["openai"],
        summary="The knowledge bases this key may read and that hold documents, as OpenAI's model list",
    )
    @guarded
    async def models(request: Request) -> dict[str, object]:
        return {"object": "list", "data": [oa.model_card(m, started) for m in await readable(request, True)]}

    @api.get(
        "/v1/models/{model}",
        response_model=oa.ModelOut,
        responses=ERRORS,
        tags=["openai"],
        summary="One knowledge base, as OpenAI's model object",
    )
    @guarded
    async def one_model(request: Request, model: str) -> JSONResponse | dict[str, object]:
        served = await readable(request, False)
        if model not in served:
            return JSONResponse(_no_model(model, served), status_code=404)
        return oa.model_card(model, started)


def _add_completions(api: "FastAPI", readable: Readable, ready: "Ready", settings: Settings) -> None:
    """/v1/chat/completions: the chat use case answers the conversation's last turn."""
    timeout = float(settings.serve.request_timeout)

    @api.post(
        "/v1/chat/completions",
        response_model=oa.CompletionOut,
        tags=["openai"],
        responses=ERRORS | COMPLETION_OK,
        summary="OpenAI-compatible chat: an answer to the last message, retrieved with the conversation",
    )
    @guarded
    async def chat_completions(request: Request, body: oa.ChatIn) -> Response:
        served = await readable(request, False)
        if body.model not in served:
            return JSONResponse(_no_model(body.model, served), status_code=404)
        principal = principal_of(request)
        name = kb_of(body.model, settings.database.kb)
        app = await in_thread(lambda: ready.kb(name, model_lister(principal)), timeout)
        # checked: a conversation that cannot be answered, or a field the generator cannot honour, is a 400 at once
        asked = dataclasses.replace(_request(body, not app.generator.extractive), denied=denial(principal, name))
        problem = app.generator.unsupported(asked.tools)
        if problem is not None:
            return JSONResponse(oa.error(400, problem.message, "unsupported_parameter", problem.field), status_code=400)
        if body.stream:
            include = bool(body.stream_options and body.stream_options.include_usage)
            return await _stream(app, asked, timeout, include, body.model)
        answer = await in_thread(lambda: app.chat(asked), timeout)
        cid, created = oa.new_id()
        return JSONResponse(oa.completion(answer, cid, created, body.model))


def _no_model(model: str, served: list[str]) -> dict[str, object]:
    return oa.error(
        404,
        f"The model {model!r} does not exist: each knowledge base this key may read is a model: "
        f"{', '.join(served) or 'none'} (GET /v1/models)",
        "model_not_found",
        "model",
    )


def _request(body: oa.ChatIn, llm: bool) -> "ChatRequest":
    """The chat request, its conversation checked before anything is answered (or streamed)."""
    max_tokens = body.max_completion_tokens or body.max_tokens
    messages = tuple((m.role, m.text()) for m in body.messages)
    check_conversation(messages, llm)
    sent = json.dumps([m.model_dump(exclude_unset=True) for m in body.messages])
    return ChatRequest(
        messages, Overrides(temperature=body.temperature, max_tokens=max_tokens), tools=body.passed(), sent=sent
    )


async def _stream(app: "App", request: "ChatRequest", timeout: float, include_usage: bool, model: str) -> "Response":
    """The streamed answer, once its first piece is there (serve.shared.chat): what fails before it is answered
    with its status and OpenAI's error `code`, as the same request not streamed."""
    opened = await open_chat(app, request, timeout, "ragvps-chat")
    if isinstance(opened, BaseException):
        status, body = oa.translate(*error_body(opened))
        return JSONResponse(body, status_code=status)
    return StreamingResponse(_chunks(opened, include_usage, model), media_type="text/event-stream", headers=SSE_HEADERS)


async def _chunks(opened: "Opened[ChatAnswer]", include_usage: bool, model: str) -> AsyncIterator[bytes]:
    """The answer as chat.completion.chunk events: the role, the text as it comes, the end with the
    `ragvps` field, the usage (on request), `[DONE]`; an error after the start is one `error` event."""
    cid, created = oa.new_id()
    yield oa.chunk(cid, created, model, {"role": "assistant", "content": ""}, include_usage=include_usage)
    async for event in opened.events():
        if isinstance(event, Emitted):
            yield oa.chunk(cid, created, model, {"content": event.value}, include_usage=include_usage)
        elif isinstance(event, BaseException):
            yield _event(oa.translate(*error_body(event))[1])
        else:
            answer = event.value
            _, finish = oa.message(answer)
            if answer.answer.tool_calls:
                calls = [{"index": i, **call.to_json()} for i, call in enumerate(answer.answer.tool_calls)]
                yield oa.chunk(cid, created, model, {"tool_calls": calls}, include_usage=include_usage)
            yield oa.chunk(cid, created, model, {}, finish, include_usage=include_usage, ragvps=extra(answer))
            if include_usage:
                yield oa.chunk(cid, created, model, None, usage=oa.usage_of(answer.usage))
            yield b"data: [DONE]\n\n"


def _event(body: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"
