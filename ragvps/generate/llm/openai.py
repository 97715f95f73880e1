"""Any OpenAI-compatible `/v1/chat/completions` (OpenAI, llama.cpp server, vLLM, OpenRouter, LiteLLM):
streaming SSE with `stream_options.include_usage`, cached tokens from `usage.prompt_tokens_details`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ragvps.config import GenerateSettings
from ragvps.generate.llm.base import Request, Stream, StreamError, sse_data
from ragvps.generate.llm.tools import Unsupported

if TYPE_CHECKING:
    from ragvps.generate.budget import Fit

# Reasoning models refuse max_tokens and a temperature other than 1.
_REASONING = ("o1", "o3", "o4", "gpt-5")


class OpenAIChat:
    name = "openai"
    default_url = "https://api.openai.com/v1"

    def unsupported(self, tools: str) -> Unsupported | None:
        return None  # tools, tool_choice and response_format are this API's own: passed through as sent

    def request(self, fit: Fit, settings: GenerateSettings) -> Request:
        reasoning = settings.model.lower().rsplit("/", 1)[-1].startswith(_REASONING)
        body: dict[str, Any] = {
            "model": settings.model,
            "messages": fit.prompt.chat(),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if reasoning:
            body["max_completion_tokens"] = settings.answer_reserve
        else:
            body["max_tokens"] = settings.answer_reserve
            body["temperature"] = settings.temperature
        if fit.prompt.tools:
            body.update(json.loads(fit.prompt.tools))
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        return Request("/chat/completions", body, headers)

    def read(self, lines: Iterator[str], stream: Stream) -> Iterator[str]:
        for event in sse_data(lines):
            if "[DONE]" in event:
                stream.done = True
                return
            if event.get("error"):
                err = event["error"]
                raise StreamError(str(err.get("message") if isinstance(err, dict) else err))
            usage = event.get("usage")
            if usage:
                u = stream.usage
                u.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                u.completion_tokens = int(usage.get("completion_tokens") or 0)
                u.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                if piece:
                    yield piece
                for call in delta.get("tool_calls") or []:
                    _add_call(stream, call)
                if choice.get("finish_reason"):
                    stream.finish = str(choice["finish_reason"])
        # Some compatible servers end without [DONE]; a stop reason is as good an ending.
        stream.done = bool(stream.finish)


def _add_call(stream: Stream, call: dict[str, Any]) -> None:
    """One streamed piece of a tool call: its id and name come first, its arguments in pieces."""
    held = stream.calls.setdefault(int(call.get("index") or 0), {"id": "", "name": "", "arguments": ""})
    function = call.get("function") or {}
    held["id"] = call.get("id") or held["id"]
    held["name"] = function.get("name") or held["name"]
    held["arguments"] += function.get("arguments") or ""
