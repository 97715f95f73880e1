"""Ollama's native `/api/chat`, NDJSON streaming, `options.num_ctx` from the budget and `keep_alive`.

Never Ollama's `/v1`: it ignores num_ctx and silently cuts prompts at 2,048/4,096 tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ragvps.config import GenerateSettings
from ragvps.errors import GeneratorError
from ragvps.generate.llm.base import Request, Stream, StreamError
from ragvps.generate.llm.tools import Unsupported, ollama_fields, ollama_messages, ollama_unsupported, passed

if TYPE_CHECKING:
    from ragvps.generate.budget import Fit


class OllamaChat:
    name = "ollama"
    default_url = "http://127.0.0.1:11434"

    def __init__(self, keep_alive: str = "30m"):
        self.keep_alive = keep_alive

    def unsupported(self, tools: str) -> Unsupported | None:
        return ollama_unsupported(passed(tools))

    def request(self, fit: Fit, settings: GenerateSettings) -> Request:
        fields = passed(fit.prompt.tools)
        if (problem := ollama_unsupported(fields)) is not None:
            raise GeneratorError(problem.message, kind="usage", settings=("generator",))
        body = {
            "model": settings.model,
            # a client's messages as sent: text content, tool calls' arguments as objects
            "messages": ollama_messages(json.loads(fit.prompt.sent)) if fit.prompt.sent else fit.prompt.chat(),
            "stream": True,
            "keep_alive": self.keep_alive,
            # num_ctx is the budget's window, the same for every question: a changed num_ctx reloads the model
            "options": {
                "num_ctx": fit.window,
                "num_predict": settings.answer_reserve,
                "temperature": settings.temperature,
            },
            **ollama_fields(fields),
        }
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        return Request("/api/chat", body, headers)

    def read(self, lines: Iterator[str], stream: Stream) -> Iterator[str]:
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("error"):
                raise StreamError(str(event["error"]))
            message = event.get("message") or {}
            if message.get("content"):
                yield str(message["content"])
            for call in message.get("tool_calls") or ():  # whole, with its arguments as an object
                function = call.get("function") or {}
                n = len(stream.calls)
                stream.calls[n] = {
                    "id": str(call.get("id") or f"call_{n + 1}"),
                    "name": str(function.get("name", "")),
                    "arguments": json.dumps(function.get("arguments") or {}),
                }
            if event.get("done"):
                stream.usage.prompt_tokens = int(event.get("prompt_eval_count") or 0)
                stream.usage.completion_tokens = int(event.get("eval_count") or 0)
                stream.finish = str(event.get("done_reason") or "stop")
                stream.done = True
                return
