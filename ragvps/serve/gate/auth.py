"""API keys: where they come from, how a request presents them, and the rule for binding beyond loopback.

Keys come from the setting `api_keys` (RAGVPS_API_KEYS, comma-separated) and from `api_key_file` (one key a
line, `#` comments). A request presents one as `Authorization: Bearer KEY` or `X-API-Key: KEY`; it is
compared in constant time against every key. Keys are never logged or echoed.
"""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING

from ragvps.errors import RagvpsError
from ragvps.serve.gate.bind import MIN_KEY_CHARS as MIN_KEY_CHARS
from ragvps.serve.gate.bind import check_bind as check_bind
from ragvps.serve.gate.bind import is_loopback as is_loopback
from ragvps.serve.gate.bind import load_keys as load_keys
from ragvps.serve.gate.signin import OPEN_AUTH_PATHS
from ragvps.serve.shared.docs import OPEN_PATHS as DOCS_PATHS

if TYPE_CHECKING:
    from starlette.types import Send


# Paths anyone may fetch: the health check, the page (static; it holds no data and asks for the key), and the
# API's description (the OpenAPI document, /docs and its assets).
OPEN_PATHS = frozenset({"/health", "/", "/favicon.ico"}) | DOCS_PATHS | OPEN_AUTH_PATHS


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key a request presents, from `Authorization: Bearer` or `X-API-Key`."""
    for name, value in headers:
        if name == b"x-api-key":
            return value.decode("latin-1").strip()
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def key_matches(given: str | None, keys: tuple[str, ...]) -> bool:
    """Constant-time comparison against every key (no early exit, so timing says nothing about which)."""
    if given is None:
        return False
    candidate = given.encode("utf-8", "replace")
    found = False
    for key in keys:
        found |= hmac.compare_digest(candidate, key.encode("utf-8"))
    return found


async def send_error(send: Send, error: RagvpsError, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """One JSON error answer `{error, kind}`, with its kind's status, straight on the ASGI channel (middleware)."""
    body = json.dumps({"error": str(error), "kind": error.kind}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.http_status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
