"""Anthropic's native Messages API, with `cache_control` on the stable system block (its OpenAI-compatible
layer ignores it); usage `cache_read_input_tokens` / `cache_creation_input_tokens`; SSE events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ragvps.config import GenerateSettings
from ragvps.errors import GeneratorError
from ragvps.generate.llm.base import Request, Stream, StreamError, sse_data
from ragvps.generate.llm.tools import Unsupported, anthropic_fields, anthropic_messages, anthropic_unsupported, passed

if TYPE_CHECKING:
    from ragvps.generate.budget import Fit

API_VERSION = "2023-06-01"


class AnthropicMessages:
    name = "anthropic"
    default_url = "https://api.anthropic.com"

    def unsupported(self, tools: str) -> Unsupported | None:
        return anthropic_unsupported(passed(tools))

    def request(self, fit: Fit, settings: GenerateSettings) -> Request:
        fields = passed(fit.prompt.tools)
        if (problem := anthropic_unsupported(fields)) is not None:
            raise GeneratorError(problem.message, kind="usage", settings=("generator",))
        if fit.prompt.sent:  # a client's messages as sent: its tool calls and results in Anthropic's blocks
            system, messages = anthropic_messages(json.loads(fit.prompt.sent))
        else:
            system, messages = fit.prompt.system, _messages(fit)
        body = {
            "model": settings.model,
            "max_tokens": settings.answer_reserve,
            "temperature": settings.temperature,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}] if system else [],
            "messages": messages,
            "stream": True,
            **anthropic_fields(fields),
        }
        headers = {"anthropic-version": API_VERSION}
        if settings.api_key:
            headers["x-api-key"] = settings.api_key
        return Request("/v1/messages", body, headers)

    def read(self, lines: Iterator[str], stream: Stream) -> Iterator[str]:
        u = stream.usage
        for event in sse_data(lines):
            kind = event.get("type")
            if kind == "message_start":
                usage = (event.get("message") or {}).get("usage") or {}
                u.cached_tokens = int(usage.get("cache_read_input_tokens") or 0)
                u.cache_creation_tokens = int(usage.get("cache_creation_input_tokens") or 0)
                # input_tokens counts only what was neither read from nor written to the cache
                u.prompt_tokens = int(usage.get("input_tokens") or 0) + u.cached_tokens + u.cache_creation_tokens
                u.completion_tokens = int(usage.get("output_tokens") or 0)
            elif kind == "content_block_start":
                block = event.get("content_block") or {}
                if block.get("type") == "tool_use":  # a tool call: its id and name now, its input in pieces
                    stream.calls[int(event.get("index") or 0)] = {
                        "id": str(block.get("id") or ""),
                        "name": str(block.get("name") or ""),
                        "arguments": "",
                    }
            elif kind == "content_block_delta":
                delta = event.get("delta") or {}
                if delta.get("type") == "text_delta" and delta.get("text"):
                    yield str(delta["text"])
                elif delta.get("type") == "input_json_delta" and int(event.get("index") or 0) in stream.calls:
                    stream.calls[int(event.get("index") or 0)]["arguments"] += str(delta.get("partial_json") or "")
            elif kind == "message_delta":
                if (event.get("usage") or {}).get("output_tokens") is not None:
                    u.completion_tokens = int(event["usage"]["output_tokens"])
                stream.finish = str((event.get("delta") or {}).get("stop_reason") or stream.finish)
            elif kind == "message_stop":
                for call in stream.calls.values():
                    call["arguments"] = call["arguments"] or "{}"  # a tool without arguments streams no input
                stream.done = True
                return
            elif kind == "error":
                err = event.get("error") or {}
                raise StreamError(f"{err.get('type', 'error')}: {err.get('message', '')}")


def _messages(fit: Fit) -> list[dict[str, Any]]:
    """The earlier turns, then the sources and the question; a second cache breakpoint ends the turns, so a
    conversation's growing prefix is read from the cache on the next turn."""
    messages: list[dict[str, Any]] = list(fit.prompt.messages())
    if fit.prompt.raw:  # a client's own messages: the system text went to `system`; a lone one is the question
        return messages
    if len(messages) > 1:
        last = messages[-2]
        messages[-2] = {
            "role": last["role"],
            "content": [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}],
        }
    return messages
