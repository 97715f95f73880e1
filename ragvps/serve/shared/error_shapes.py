"""Error answers in the shape each protocol's clients read: the server's own `{error, kind}` (from a route or any
middleware: keys, body limit, Host checks) rewritten, by path, into OpenAI's `{"error": {message, type, param,
code}}` on /v1 (serve.openai.shapes.translate) and into a JSON-RPC error on /mcp. One ASGI wrapper for both,
outside every other layer, so whichever layer answered, the client's SDK shows the message (the mcp SDK's
client reports a non-2xx answer as a bare "Server returned an error response" unless its body is JSON-RPC).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

Translate = Callable[[int, object], tuple[int, dict[str, object]]]
MCP_PATH = "/mcp"
# JSON-RPC's "invalid request" for a request the server refuses as sent (a key, a Host), its "internal error"
# for a failure of the server's own; the status and kind go in `data`.
INVALID_REQUEST, INTERNAL_ERROR = -32600, -32603


def mcp_path(path: str) -> bool:
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


def mcp_error(status: int, body: object) -> tuple[int, dict[str, object]]:
    """A `{error, kind}` answer as a JSON-RPC error (`id: null`: the request was refused before it was read);
    one that is JSON-RPC already is kept. The status stays (401 keeps its WWW-Authenticate)."""
    if isinstance(body, dict) and body.get("jsonrpc"):
        return status, body
    message = body.get("error") if isinstance(body, dict) else None
    kind = body.get("kind") if isinstance(body, dict) else None
    error = {
        "code": INTERNAL_ERROR if status >= 500 else INVALID_REQUEST,
        "message": f"ragvps at /mcp answered HTTP {status}: {message or 'request failed'}",
        "data": {"status": status, "kind": kind},
    }
    return status, {"jsonrpc": "2.0", "id": None, "error": error}


class ShapedErrors:
    """ASGI wrapper: an error answer (status >= 400) on a path one of `shapes` claims is rewritten by its
    translation, with its status and headers (but its length and type) kept."""

    def __init__(self, app: ASGIApp, shapes: tuple[tuple[Callable[[str], bool], Translate], ...]):
        self.app, self.shapes = app, shapes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        translate = None
        if scope["type"] == "http":
            translate = next((t for claims, t in self.shapes if claims(scope["path"])), None)
        if translate is None:
            await self.app(scope, receive, send)
            return
        held: Message = {}
        parts: list[bytes] = []

        async def rewrite(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held.update(message)
                return
            if not held or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            try:
                body: object = json.loads(b"".join(parts) or b"{}")
            except ValueError:
                body = {"error": b"".join(parts).decode("utf-8", "replace")[:500] or "request failed"}
            status, out = translate(held["status"], body)
            data = json.dumps(out).encode()
            headers = [
                (k, v) for k, v in held.get("headers", []) if k.lower() not in (b"content-length", b"content-type")
            ]
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        *headers,
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(data)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": data})

        await self.app(scope, receive, rewrite)
