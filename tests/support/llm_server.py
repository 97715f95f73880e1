"""A stand-in LLM server on 127.0.0.1: OpenAI chat completions (SSE), Anthropic messages (SSE events),
Ollama /api/chat (NDJSON), streaming and usage with cached tokens, every fault `ragvps ask` must handle
(401, 404, 429 with Retry-After, 5xx, slow, context-length 400, a stream cut mid-answer), and a
stand-in reranker in both API shapes (a lexical-overlap scorer).

The default reply quotes the first sentence of the source sharing most words with the question, cited
`[n]`; with no word in common it answers the refusal sentence. A question-rewriting request (ragvps chat's
follow-ups) gets the last question followed by the conversation's first user turn. The prompt is counted again here with
tiktoken (`prompt_tokens` of each request), so tests can check the client's budget.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

REFUSAL = "I cannot answer this from the provided sources."
_SOURCE = re.compile(r"^\[(\d+)\] [^\n]*\n(.*?)(?=\n\n\[\d+\] |\n\nQuestion: )", re.MULTILINE | re.DOTALL)
_WORD = re.compile(r"[a-z0-9]{3,}")
CONTEXT_MESSAGES = {
    "openai": {
        "error": {
            "message": "This model's maximum context length is {limit} tokens. However, your "
            "messages resulted in {n} tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    },
    "anthropic": {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: {n} tokens > {limit} maximum"},
    },
    "ollama": {"error": "the input length exceeds the context length"},
}


@dataclass
class Fault:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def sources_of(user: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(2).strip() for m in _SOURCE.finditer(user + "\n\n")}


def question_of(user: str) -> str:
    return user.rsplit("\n\nQuestion: ", 1)[-1]


REWRITE_SYSTEM = "You rewrite the last question of a conversation"


def rewrite_reply(user: str) -> str:
    """The stand-in's standalone question: the last question, then the first user turn it follows."""
    first = next((line[6:] for line in user.splitlines() if line.startswith("User: ")), "")
    last = user.rsplit("Last question: ", 1)[-1].strip()
    return f"{last} (following: {first})" if first else last


def default_reply(system: str, user: str) -> str:
    if system.startswith(REWRITE_SYSTEM):
        return rewrite_reply(user)
    question, found = words(question_of(user)), sources_of(user)
    best = max(found, key=lambda n: (len(words(found[n]) & question), -n), default=None)
    if best is None or not words(found[best]) & question:
        return REFUSAL
    sentence = re.split(r"(?<=[.!?])\s+", found[best])[0]
    return f"{sentence} [{best}]"


def count(text: str) -> int:
    from ragvps import tokens

    return tokens.count_llm(text, "cl100k_base")


@dataclass
class FakeLLM:
    reply: Callable[[str, str], str] | str = default_reply
    faults: list[Fault] = field(default_factory=list)  # answered to the next LLM requests, in order
    slow: float = 0.0  # seconds before answering
    piece_delay: float = 0.0  # seconds between streamed pieces
    cut_after: int | None = None  # stream this many pieces, then drop the connection
    stall_after: int | None = None  # stream this many pieces, then stall (stall_s) with the connection open
    stall_s: float = 60.0
    context_limit: int | None = None  # prompt tokens above this: the provider's context-length 400
    tool_call: tuple[str, str] | None = None  # (name, JSON arguments): called when a request offers tools
    no_usage: bool = False  # as llama.cpp's server: no usage in the stream, whatever stream_options asks
    requests: list[dict[str, Any]] = field(default_factory=list)  # path, headers, body, prompt_tokens
    pieces_sent: int = 0
    disconnected: bool = False
    _seen_systems: set[str] = field(default_factory=set)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def llm_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if "rerank" not in r["path"]]

    def reset(self) -> None:
        with self._lock:
            self.reply, self.faults, self.slow, self.piece_delay = default_reply, [], 0.0, 0.0
            self.cut_after, self.context_limit, self.stall_after, self.tool_call = None, None, None, None
            self.no_usage = False
            self.requests.clear()
            self._seen_systems.clear()
            self.pieces_sent, self.disconnected = 0, False

    def fail(self, status: int, message: str = "injected failure", **headers: str) -> None:
        self.faults.append(
            Fault(
                status,
                {"error": {"message": message, "type": "error"}},
                {k.replace("_", "-"): v for k, v in headers.items()},
            )
        )

    def start(self) -> FakeLLM:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.handle(self, self.path, {k.lower(): v for k, v in self.headers.items()}, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # --- protocol ------------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        if path in ("/v1/rerank", "/v2/rerank", "/rerank"):
            self._rerank(h, path, headers, body)
            return
        kind = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic", "/api/chat": "ollama"}.get(path)
        if kind is None:
            _send_json(h, 404, {"error": "404 page not found"})
            return
        system, user = _messages(kind, body)
        n = count(system) + count(user)
        with self._lock:
            self.requests.append(
                {"path": path, "headers": headers, "body": body, "prompt_tokens": n, "system": system, "user": user}
            )
            fault = self.faults.pop(0) if self.faults else None
            cached = count(system) if system in self._seen_systems else 0
            self._seen_systems.add(system)
        if self.slow:
            time.sleep(self.slow)
        if fault is not None:
            _send_json(h, fault.status, fault.body, fault.headers)
            return
        if self.context_limit is not None and n > self.context_limit:
            message = json.loads(
                json.dumps(CONTEXT_MESSAGES[kind]).replace("{limit}", str(self.context_limit)).replace("{n}", str(n))
            )
            _send_json(h, 400, message)
            return
        text = self.reply if isinstance(self.reply, str) else self.reply(system, user)
        pieces = re.findall(r"\S+\s*|\s+", text) or [""]
        if self.tool_call is not None and body.get("tools"):
            out = {"openai": _openai_tool_call, "anthropic": _anthropic_tool_call, "ollama": _ollama_tool_call}[kind](
                *self.tool_call, n
            )
        else:
            out = {"openai": _openai, "anthropic": _anthropic, "ollama": _ollama}[kind](pieces, n, cached)
        if self.no_usage and kind == "openai":
            out = (sent for sent in out if '"usage"' not in sent[1])
        self._stream(h, kind, out, len(pieces))

    def _stream(self, h: BaseHTTPRequestHandler, kind: str, out: Iterator[tuple[bool, str]], total: int) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson" if kind == "ollama" else "text/event-stream")
        h.end_headers()
        sent = 0
        try:
            for is_piece, data in out:
                if is_piece:
                    if self.cut_after is not None and sent >= self.cut_after:
                        h.wfile.flush()
                        h.close_connection = True
                        return  # the connection drops: no final event
                    if self.stall_after is not None and sent == self.stall_after:
                        time.sleep(self.stall_s)  # mid-answer, nothing more comes for a while
                    sent += 1
                    if self.piece_delay:
                        time.sleep(self.piece_delay)
                h.wfile.write(data.encode())
                h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.disconnected = True
        finally:
            with self._lock:
                self.pieces_sent += sent

    def _rerank(self, h: BaseHTTPRequestHandler, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
        query = words(body.get("query", ""))
        texts = body.get("texts") if path == "/rerank" else body.get("documents")
        scored = []
        for i, text in enumerate(texts or []):
            w = words(text if isinstance(text, str) else str(text.get("text", "")))
            scored.append((i, len(w & query) / math.sqrt(len(w) + 1)))
        scored.sort(key=lambda t: (-t[1], t[0]))
        if path == "/rerank":
            _send_json(h, 200, [{"index": i, "score": s} for i, s in scored])
        else:
            top = scored[: int(body.get("top_n") or len(scored))]
            _send_json(h, 200, {"results": [{"index": i, "relevance_score": s} for i, s in top]})


def _messages(kind: str, body: dict[str, Any]) -> tuple[str, str]:
    if kind == "anthropic":
        system = "".join(b["text"] for b in body.get("system", []))
        return system, _text(body["messages"][-1]["content"])
    by_role = {m["role"]: _text(m.get("content")) for m in body.get("messages", [])}
    return by_role.get("system", ""), by_role.get("user", "")


def _text(content: Any) -> str:
    """A message's text: a string, content parts (their text), or none (an assistant's tool calls)."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or p.get("content") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def _sse(data: Any, event: str | None = None) -> str:
    return (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"


def _openai(pieces: list[str], n: int, cached: int) -> Iterator[tuple[bool, str]]:
    for p in pieces:
        yield True, _sse({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]})
    yield False, _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield (
        False,
        _sse(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": n,
                    "completion_tokens": len(pieces),
                    "total_tokens": n + len(pieces),
                    "prompt_tokens_details": {"cached_tokens": cached},
                },
            }
        ),
    )
    yield False, "data: [DONE]\n\n"


def _openai_tool_call(name: str, arguments: str, n: int) -> Iterator[tuple[bool, str]]:
    """A streamed tool call as OpenAI sends it: id and name first, then the arguments in two pieces."""
    half = len(arguments) // 2
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}
    yield (
        False,
        _sse(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": None, "tool_calls": [first]},
                        "finish_reason": None,
                    }
                ]
            }
        ),
    )
    for part in (arguments[:half], arguments[half:]):
        yield (
            True,
            _sse(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]},
                            "finish_reason": None,
                        }
                    ]
                }
            ),
        )
    yield False, _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    yield False, _sse({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 9, "total_tokens": n + 9}})
    yield False, "data: [DONE]\n\n"


def _anthropic_tool_call(name: str, arguments: str, n: int) -> Iterator[tuple[bool, str]]:
    """A streamed tool_use block as Anthropic sends it: id and name at the block's start, the input as
    input_json_delta pieces, stop_reason tool_use."""
    half = len(arguments) // 2
    yield (
        False,
        _sse(
            {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": n, "output_tokens": 1}}},
            "message_start",
        ),
    )
    yield (
        False,
        _sse(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}},
            },
            "content_block_start",
        ),
    )
    for part in (arguments[:half], arguments[half:]):
        yield (
            True,
            _sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": part},
                },
                "content_block_delta",
            ),
        )
    yield False, _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield (
        False,
        _sse(
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
            "message_delta",
        ),
    )
    yield False, _sse({"type": "message_stop"}, "message_stop")


def _ollama_tool_call(name: str, arguments: str, n: int) -> Iterator[tuple[bool, str]]:
    """A tool call as Ollama streams it: whole, in one message, its arguments an object; then the done line."""
    call = {"function": {"name": name, "arguments": json.loads(arguments)}}
    yield (
        True,
        json.dumps({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [call]}, "done": False})
        + "\n",
    )
    yield (
        False,
        json.dumps(
            {
                "model": "m",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": n,
                "eval_count": 9,
            }
        )
        + "\n",
    )


def _anthropic(pieces: list[str], n: int, cached: int) -> Iterator[tuple[bool, str]]:
    created = 0 if cached else n // 2
    usage = {
        "input_tokens": n - cached - created,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": created,
        "output_tokens": 1,
    }
    yield False, _sse({"type": "message_start", "message": {"id": "msg_1", "usage": usage}}, "message_start")
    yield (
        False,
        _sse(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        ),
    )
    yield False, _sse({"type": "ping"}, "ping")
    for p in pieces:
        yield (
            True,
            _sse(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
                "content_block_delta",
            ),
        )
    yield False, _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    yield (
        False,
        _sse(
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": len(pieces)}},
            "message_delta",
        ),
    )
    yield False, _sse({"type": "message_stop"}, "message_stop")


def _ollama(pieces: list[str], n: int, cached: int) -> Iterator[tuple[bool, str]]:
    for p in pieces:
        yield True, json.dumps({"model": "m", "message": {"role": "assistant", "content": p}, "done": False}) + "\n"
    yield (
        False,
        json.dumps(
            {
                "model": "m",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": n,
                "eval_count": len(pieces),
            }
        )
        + "\n",
    )


def _send_json(h: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


@pytest.fixture(scope="module")
def llm_server() -> Iterator[FakeLLM]:
    fake = FakeLLM().start()
    yield fake
    fake.stop()


@pytest.fixture
def llm(llm_server: FakeLLM) -> FakeLLM:
    """The module's stand-in LLM with fresh counters and no faults."""
    llm_server.reset()
    return llm_server
