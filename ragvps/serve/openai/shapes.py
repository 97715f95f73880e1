"""OpenAI's chat API shapes for /v1: the request body, the completion and its chunks, the error object, and
`translate`, which serve.shared.error_shapes applies to every error on /v1 (so OpenAI's SDKs raise their typed
errors)."""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragvps.serve.shared.chat import MODEL, extra

if TYPE_CHECKING:
    from ragvps.app.requests import ChatAnswer, Usage

PREFIX = "/v1/"
# OpenAI's paths as a client sends them when its base URL lacks /v1 (POST /chat/completions, GET /models)
BARE_PATHS = ("/chat/completions", "/completions", "/models", "/embeddings", "/responses")


def base_url(base: str) -> str:
    """What an OpenAI client's base URL should be, on the address it reached this server at."""
    return f"set the client's base URL to this server's address followed by /v1 ({base}/v1)"


# (type, code) by status, as OpenAI answers them. A too-long request is a 400 there (context_length_exceeded),
# which the SDK raises as BadRequestError; the ragvps routes answer 413 for a body over max_body_bytes.
ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "context_length_exceeded"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    503: ("server_error", "service_unavailable"),
}
KIND_CODES = {
    "too_long": "context_length_exceeded",
    "config": "server_misconfigured",
    "unavailable": "service_unavailable",
}


JsonObject = dict[str, object]  # a JSON object (CompletionOut's field `object` hides the builtin inside it)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    type: str
    text: str | None = None  # an attached file's text may be long: the question is checked once taken out


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = Field(
        None, description="Text, or content parts (only text is read); a tool's result reads as conversation."
    )

    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(p.text for p in self.content if p.type in ("text", "input_text") and p.text)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool = False


class ChatIn(BaseModel):
    """OpenAI's chat completion request; fields it has and ragvps does not use (top_p, stop, user, ...) are
    accepted and ignored."""

    model_config = ConfigDict(
        extra="allow",
        strict=True,
        json_schema_extra={
            "examples": [
                {"model": MODEL, "messages": [{"role": "user", "content": "how do I stop the embedded database?"}]}
            ]
        },
    )
    model: str = Field(
        description=f"The knowledge base: {MODEL!r} for the server's own, or another's name "
        "(GET /v1/models lists those the key may read).",
        examples=[MODEL],
    )
    messages: list[MessageIn] = Field(
        min_length=1, max_length=1000, description="The whole conversation so far; the last is the user's question."
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0, le=2, description="Passed to the configured LLM.")
    max_tokens: int | None = Field(None, ge=1, le=1_000_000, description="The answer's length at most.")
    max_completion_tokens: int | None = Field(None, ge=1, le=1_000_000, description="The same as max_tokens.")
    n: int | None = Field(None, ge=1, le=1, description="One answer per request.")
    tools: list[dict[str, object]] | None = Field(
        None, description="Passed to the LLM; without one, offered tools are ignored unless tool_choice requires one."
    )
    tool_choice: str | dict[str, object] | None = Field(
        None, description="`required` or a named function needs an LLM (400 unsupported_parameter without)."
    )
    response_format: dict[str, object] | None = Field(None, description="json_object and json_schema need an LLM.")
    parallel_tool_calls: bool | None = None

    def passed(self) -> str:
        """tools, tool_choice, response_format, parallel_tool_calls as sent (JSON text), for the LLM."""
        fields = {k: getattr(self, k) for k in ("tools", "tool_choice", "response_format", "parallel_tool_calls")}
        chosen = {k: v for k, v in fields.items() if v is not None}
        if not self.tools:
            chosen.pop("tool_choice", None)
            chosen.pop("parallel_tool_calls", None)
        return json.dumps(chosen) if chosen else ""


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorOut(BaseModel):
    error: ErrorDetail


class ModelOut(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelListOut(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelOut]


class CompletionOut(BaseModel):
    """OpenAI's chat completion, plus `ragvps`: citations, sources and what was retrieved (clients ignore it)."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[JsonObject]
    usage: JsonObject
    ragvps: JsonObject


def openai_path(path: str) -> bool:
    """A path an OpenAI client sends, with /v1 or (a base URL without it) without: its errors take OpenAI's shape."""
    return path.startswith(PREFIX) or path.rstrip("/") in BARE_PATHS or path.startswith("/models/")


def wrong_turn(path: str, base: str = "http://127.0.0.1:8765") -> str | None:
    """What to do when an OpenAI client's base URL lacks /v1, or has it twice; None for any other path."""
    if path.startswith("/v1/v1/"):
        return f"there is no {path} here: the client added /v1 to a base URL that ends in /v1 already: {base_url(base)}"
    if openai_path(path) and not path.startswith(PREFIX):
        return (
            f"there is no {path} here: the OpenAI-compatible API is under /v1 (/v1/chat/completions, "
            f"/v1/models): {base_url(base)}"
        )
    if path.startswith(PREFIX):
        return f"there is no {path} here: the OpenAI-compatible API is /v1/chat/completions and /v1/models"
    return None


def error(status: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, object]:
    kind, default = ERROR_TYPES.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default}}


def translate(status: int, body: object) -> tuple[int, dict[str, object]]:
    """A ragvps `{error, kind}` answer as OpenAI's (status, body); one already in OpenAI's shape is kept."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return status, body
    message = body.get("error") if isinstance(body, dict) else None
    kind = body.get("kind") if isinstance(body, dict) else None
    code = KIND_CODES.get(str(kind)) if kind else None
    if status == 413:
        status = 400
    return status, error(status, str(message or "request failed"), code)


def model_card(model: str, created: int) -> dict[str, object]:
    return {"id": model, "object": "model", "created": created, "owned_by": "ragvps"}


def new_id() -> tuple[str, int]:
    return "chatcmpl-" + uuid.uuid4().hex[:24], int(time.time())


def usage_of(usage: Usage) -> dict[str, object]:
    p, c = usage.prompt_tokens, usage.completion_tokens
    return {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def message(chat: ChatAnswer) -> tuple[dict[str, object], str]:
    """The assistant's message (with its tool calls, if the LLM called any) and the finish reason."""
    calls = [t.to_json() for t in chat.answer.tool_calls]
    if not calls:
        return {"role": "assistant", "content": chat.content, "refusal": None}, "stop"
    return {"role": "assistant", "content": chat.content or None, "refusal": None, "tool_calls": calls}, "tool_calls"


def completion(chat: ChatAnswer, cid: str, created: int, model: str = MODEL) -> dict[str, object]:
    said, finish = message(chat)
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": said, "logprobs": None, "finish_reason": finish}],
        "usage": usage_of(chat.usage),
        "ragvps": extra(chat),
    }


def chunk(
    cid: str,
    created: int,
    model: str,
    delta: dict[str, object] | None,
    finish: str | None = None,
    include_usage: bool = False,
    **more: object,
) -> bytes:
    """One `data:` line of a streamed completion; `delta=None` is the usage chunk (no choices)."""
    body: dict[str, object] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if include_usage:
        body["usage"] = None
    body.update(more)
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
