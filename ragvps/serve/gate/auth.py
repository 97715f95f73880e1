"""API keys: where they come from, how a request presents them, and the rule for binding beyond loopback.

Keys come from the setting `api_keys` (RAGVPS_API_KEYS, comma-separated) and from `api_key_file` (one key a
line, `#` comments). A request presents one as `Authorization: Bearer KEY` or `X-API-Key: KEY`; it is
compared in constant time against every key. Keys are never logged or echoed.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ragvps.config import Settings
from ragvps.errors import ConfigError, RagvpsError
from ragvps.serve.gate.signin import OPEN_AUTH_PATHS
from ragvps.serve.shared.docs import OPEN_PATHS as DOCS_PATHS

if TYPE_CHECKING:
    from starlette.types import Send


# Paths anyone may fetch: the health check, the page (static; it holds no data and asks for the key), and the
# API's description (the OpenAPI document, /docs and its assets).
OPEN_PATHS = frozenset({"/health", "/", "/favicon.ico"}) | DOCS_PATHS | OPEN_AUTH_PATHS
MIN_KEY_CHARS = 16


def load_keys(settings: Settings) -> tuple[str, ...]:
    """Every configured key: `api_keys` plus the lines of `api_key_file`."""
    keys = list(settings.serve.api_keys)
    if settings.serve.api_key_file:
        path = Path(settings.serve.api_key_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read api_key_file {path}: {exc.__class__.__name__}; point the setting "
                "api_key_file at a readable file with one key a line",
                settings=("api_key_file",),
            ) from None
        file_keys = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        if not file_keys:
            raise ConfigError(
                f"api_key_file {path} holds no key: write one key a line (make one with `openssl rand -hex 32`)",
                settings=("api_key_file",),
            )
        keys += file_keys
    for key in keys:
        if len(key) < MIN_KEY_CHARS or any(c.isspace() or not c.isprintable() for c in key):
            raise ConfigError(
                f"an API key is too short or has spaces: use at least {MIN_KEY_CHARS} printable "
                "characters (make one with `openssl rand -hex 32`)",
                settings=("api_keys", "api_key_file"),
            )
    return tuple(dict.fromkeys(keys))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`: addresses only this machine can reach."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: tuple[str, ...], people: bool = False) -> None:
    """Refuse to listen beyond loopback without a key or sign-in: anyone who can reach the port could read
    everything."""
    if not keys and not people and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without an API key: anyone who can reach it could read the knowledge "
            "base. Set RAGVPS_API_KEYS (setting api_keys; make one with `openssl rand -hex 32`) or api_key_file, "
            "or listen on 127.0.0.1 behind a reverse proxy",
            settings=("api_keys", "api_key_file", "host"),
        )


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
