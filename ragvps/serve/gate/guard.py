"""What a browser must not be able to do to the server: reach it under another name (DNS rebinding) or post
to it from another site's page. One ASGI middleware, in front of every route (the API, /v1, /mcp, the page).

- Host: bound to loopback, the server answers only to the loopback names (`localhost`, `127.0.0.1`,
  `[::1]`, any port), to the names a container calls its host by (`host.docker.internal`,
  `host.containers.internal`: Docker Desktop and Podman forward those to the host's loopback, so a chat front end
  in a container reaches a loopback-bound server under that name; docs/chat.md) and to the names in the setting
  `allowed_hosts` (a reverse proxy's public name). Those container names are no rebinding risk: `.internal`
  is reserved for private use, no public DNS answers it, so no foreign page can point it at its own address.
  Bound beyond loopback (where keys are required), any name unless `allowed_hosts` is set.
- Origin: a POST (any method but GET, HEAD, OPTIONS) that carries an `Origin` header, as every browser's
  does, must come from the server's own origin (the Host it was sent to) or one of `cors_origins`.
  Programs that send no Origin (curl, SDKs, assistants) are not affected.

A refusal is 403 `{error, kind: "forbidden"}`, before any other work.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from ragvps.errors import ForbiddenError
from ragvps.serve.gate.auth import is_loopback, send_error

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CONTAINER_HOST_NAMES = frozenset({"host.docker.internal", "host.containers.internal"})


def split_host(value: str) -> tuple[str, str]:
    """`name:port` (or `[v6]:port`) as (lowercase name without brackets, port or '')."""
    value = value.strip().lower().rstrip(".")
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name, rest[1:] if rest.startswith(":") else ""
    if value.count(":") > 1:  # a bare IPv6 address
        return value, ""
    name, _, port = value.partition(":")
    return name.rstrip("."), port


def _local_name(name: str) -> bool:
    if name == "localhost" or name in CONTAINER_HOST_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostRule:
    """Which Host names the server answers to (see the module's docstring)."""

    def __init__(self, bind_host: str, allowed_hosts: tuple[str, ...]):
        self.loopback = is_loopback(bind_host)
        self.entries = tuple(split_host(entry) for entry in allowed_hosts if entry.strip())
        self.any = any(name == "*" for name, _ in self.entries) or (not self.loopback and not self.entries)

    def allows(self, host: str) -> bool:
        if self.any:
            return True
        name, port = split_host(host)
        if not name:
            return False
        if _local_name(name):
            return True
        for entry, entry_port in self.entries:
            matches = name == entry or (entry.startswith("*.") and name.endswith(entry[1:]))
            if matches and (not entry_port or entry_port == port):
                return True
        return False


def origin_allowed(origin: str, host: str, cors_origins: tuple[str, ...]) -> bool:
    """A browser's Origin is the server's own (same name and port as the Host it sent) or a listed one."""
    origin = origin.strip().lower().rstrip("/")
    if "*" in cors_origins or origin in {o.strip().lower().rstrip("/") for o in cors_origins}:
        return True
    scheme, sep, netloc = origin.partition("://")
    if not sep or scheme not in ("http", "https") or not netloc:
        return False  # "null" (a sandboxed frame, a file) and anything odd
    default = "443" if scheme == "https" else "80"
    o_name, o_port = split_host(netloc)
    h_name, h_port = split_host(host)
    return bool(h_name) and o_name == h_name and (o_port or default) == (h_port or default)


class HostOriginGuard:
    """ASGI middleware: refuse a request to a name this server does not answer to, or a browser's POST from
    a foreign origin, with 403 JSON."""

    def __init__(self, app: ASGIApp, bind_host: str, allowed_hosts: tuple[str, ...], cors_origins: tuple[str, ...]):
        self.app, self.hosts, self.cors_origins = app, HostRule(bind_host, allowed_hosts), cors_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
        if host is not None and not self.hosts.allows(host):
            await send_error(
                send,
                ForbiddenError(
                    f"refused: this server does not answer to the name {host[:100]!r} (a web page may be trying DNS "
                    "rebinding). Call it as localhost or 127.0.0.1 (host.docker.internal from a container), or add "
                    "a reverse proxy's public name to the setting allowed_hosts",
                    settings=("allowed_hosts",),
                ),
            )
            return
        if (
            origin is not None
            and scope.get("method", "GET") not in SAFE_METHODS
            and not origin_allowed(origin, host or "", self.cors_origins)
        ):
            await send_error(
                send,
                ForbiddenError(
                    f"refused: a page at {origin[:100]!r} may not send requests to this server. To allow that "
                    "site's pages, add its origin to the setting cors_origins",
                    settings=("cors_origins",),
                ),
            )
            return
        await self.app(scope, receive, send)
