"""The Ollama-compatible API: GET /api/tags, GET /api/version and POST /api/chat (NDJSON, streaming by
default, as Ollama answers), which is what Open WebUI's Ollama connection speaks. The same chat use case as
/v1/chat/completions; errors are Ollama's `{"error": "..."}` (the server's `{error, kind}` reads the same).
"""

# No `from __future__ import annotations` here: FastAPI reads the request model from the annotations.

import asyncio
import datetime
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragvps.config import Settings
from ragvps.serve.openai_shapes import MODEL

NAMES = (MODEL, MODEL + ":latest")
VERSION = "0.6.0"  # the Ollama API version these routes follow
_END = object()


class OllamaMessage(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "user", "assistant"]
    content: str = Field("", max_length=20_000)


class OllamaOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    temperature: float | None = Field(None, ge=0, le=2)
    num_predict: int | None = Field(None, ge=1, le=1_000_000)


class OllamaChatIn(BaseModel):
    """Ollama's /api/chat request; fields ragvps does not use (format, keep_alive, tools, ...) are ignored."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str
    messages: list[OllamaMessage] = Field(min_length=1, max_length=1000)
    stream: bool = True
    options: OllamaOptions | None = None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


def add_ollama_routes(api: Any, ready: Any, settings: Settings) -> None:
    from fastapi.responses import JSONResponse

    from ragvps.serve.common import guarded, in_thread
    from ragvps.serve.convert import jsonable

    timeout = float(settings.serve.request_timeout)
    started = _now()

    @api.get("/api/version", tags=["ollama"], summary="The Ollama API version these routes follow")
    async def version() -> Any:
        return {"version": VERSION}

    @api.get("/api/tags", tags=["ollama"], summary="The knowledge bases served, as Ollama's model list")
    async def tags() -> Any:
        return {"models": [{"name": NAMES[1], "model": NAMES[1], "modified_at": started, "size": 0,
                            "digest": "", "details": {"format": "ragvps", "family": "ragvps", "families": ["ragvps"],
                                                      "parameter_size": "", "quantization_level": ""}}]}

    from ragvps.serve.routes import ERRORS

    answers = {200: {"description": "NDJSON lines (stream, the default) or one JSON object, as Ollama's.",
                     "content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
               404: {"model": ERRORS[400]["model"], "description": "No such model: /api/tags lists it."}}

    @api.post("/api/chat", tags=["ollama"], responses=ERRORS | answers,
              summary="Ollama-compatible chat: an answer to the last message, retrieved with the conversation")
    @guarded
    async def chat(body: OllamaChatIn) -> Any:
        if body.model not in NAMES:
            return JSONResponse({"error": f"model {body.model!r} not found: this server serves {NAMES[1]!r}",
                                 "kind": "not_found"}, status_code=404)
        app = ready.get()
        request = _request(body)
        if not body.stream:
            start = time.perf_counter_ns()
            answer = await in_thread(lambda: app.chat(request), timeout)
            return _final(answer, answer.content, start, jsonable)
        from starlette.responses import StreamingResponse

        return StreamingResponse(_lines(app, request, timeout, jsonable), media_type="application/x-ndjson")


def _request(body: OllamaChatIn) -> Any:
    from ragvps.app import ChatRequest

    options = body.options or OllamaOptions(temperature=None, num_predict=None)
    return ChatRequest(tuple((m.role, m.content) for m in body.messages), temperature=options.temperature,
                       max_tokens=options.num_predict)


def _final(answer: Any, content: str, start: int, jsonable: Any) -> dict[str, Any]:
    u = answer.usage
    from ragvps.serve.openai_shapes import extra

    return {"model": NAMES[1], "created_at": _now(), "message": {"role": "assistant", "content": content},
            "done": True, "done_reason": "stop", "total_duration": time.perf_counter_ns() - start,
            "prompt_eval_count": u.get("prompt_tokens", 0), "eval_count": u.get("completion_tokens", 0),
            "ragvps": extra(answer, jsonable)}


async def _lines(app: Any, request: Any, timeout: float, jsonable: Any) -> AsyncIterator[bytes]:
    """One NDJSON line per piece of the answer, then the `done: true` line (or one `{"error"}` line)."""
    from ragvps.serve.common import error_body
    from ragvps.serve.stream import ClientGone

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    gone = threading.Event()
    start = time.perf_counter_ns()

    def on_token(text: str) -> None:
        if gone.is_set():
            raise ClientGone
        loop.call_soon_threadsafe(queue.put_nowait, ("token", text))

    def work() -> None:
        try:
            item: Any = ("done", app.chat(request, on_token=on_token))
        except ClientGone:
            item = ("error", "the client left")
        except BaseException as exc:  # noqa: BLE001  (reported as one error line)
            item = ("error", error_body(exc)[1]["error"])
        loop.call_soon_threadsafe(queue.put_nowait, item)
        loop.call_soon_threadsafe(queue.put_nowait, _END)

    threading.Thread(target=work, name="ragvps-ollama-chat", daemon=True).start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                yield _line({"error": f"the answer took longer than {timeout:g} s (setting request_timeout)"})
                return
            if item is _END:
                return
            what, value = item
            if what == "token":
                yield _line({"model": NAMES[1], "created_at": _now(),
                             "message": {"role": "assistant", "content": value}, "done": False})
            elif what == "error":
                yield _line({"error": value})
            else:
                yield _line(_final(value, "", start, jsonable))
    finally:
        gone.set()
