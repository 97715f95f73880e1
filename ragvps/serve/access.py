"""Who a request is. A key from the settings (api_keys, api_key_file) is admin on every knowledge base; a key
made with `ragvps key create` holds the roles the catalog gives it, looked up at most KEY_TTL_S ago (so a
revoked key stops working within that); a loopback server with no key at all is open to anyone, as before.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ragvps.app.keys import ANYONE, Principal, key_hash
from ragvps.errors import RagvpsError, UnauthorizedError
from ragvps.serve.auth import OPEN_PATHS, key_matches, presented_key, send_error
from ragvps.serve.threads import in_thread

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ragvps.serve.lifecycle import Ready

KEY_TTL_S = 2.0
LOOKUP_TIMEOUT_S = 3.0
ADMIN = Principal("settings key", everything=True)


class Access:
    def __init__(self, keys: tuple[str, ...], ready: Ready):
        self.keys = keys
        self.ready = ready
        self._found: dict[str, tuple[float, Principal | None]] = {}  # key hash -> (when, principal)
        self._any: tuple[float, bool] = (0.0, False)

    async def principal(self, presented: str | None) -> Principal | None:
        """The principal of the key presented; None when the request must be refused (no key, or a wrong one)."""
        if presented is not None and key_matches(presented, self.keys):
            return ADMIN
        if self.keys or await self._catalog_has_keys():
            return None if presented is None else await self._catalog_principal(presented)
        return ANYONE  # no key anywhere: open (on loopback, as `serve` insists), whatever a client sends

    def needs_keys(self) -> bool:
        return bool(self.keys) or self._any[1]

    async def _catalog_has_keys(self) -> bool:
        library = self.ready.library
        if library is None:  # not open yet: nothing to read either (every route answers 503)
            return False
        at, found = self._any
        if time.monotonic() - at > KEY_TTL_S:
            try:
                found = await in_thread(lambda: library.keys().any(), LOOKUP_TIMEOUT_S)
            except RagvpsError:
                if not at:  # never known: the request cannot be decided
                    raise
                return found  # the database went away: the last answer stands; the route says what is wrong
            self._any = (time.monotonic(), found)
        return found

    async def _catalog_principal(self, presented: str) -> Principal | None:
        library = self.ready.library
        if library is None:
            return None
        hashed = key_hash(presented)
        cached = self._found.get(hashed)
        if cached is not None and time.monotonic() - cached[0] <= KEY_TTL_S:
            return cached[1]
        found = await in_thread(lambda: library.keys().principal(presented), LOOKUP_TIMEOUT_S)
        if len(self._found) > 10_000:  # bounded: wrong keys tried at random do not grow it without end
            self._found.clear()
        self._found[hashed] = (time.monotonic(), found)
        return found


class RequireKey:
    """ASGI middleware: every path but OPEN_PATHS needs a valid key once any key exists (the /mcp mount too);
    the request's principal (what it may read and write) goes into the scope's state for the routes."""

    def __init__(self, app: ASGIApp, access: Access):
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS \
                or scope.get("method") == "OPTIONS":  # CORS preflight carries no credentials
            await self.app(scope, receive, send)
            return
        given = presented_key(scope["headers"])
        try:
            principal = await self.access.principal(given)
        except RagvpsError as exc:  # the catalog cannot be read: say so, as a route would
            await send_error(send, exc)
            return
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send)
            return
        message = ("this server needs an API key: send `Authorization: Bearer KEY` or `X-API-Key: KEY`"
                   if given is None else "the API key is not valid: send one of the keys in api_keys/api_key_file "
                                         "or one made with `ragvps key create`")
        await send_error(send, UnauthorizedError(message), [(b"www-authenticate", b'Bearer realm="ragvps"')])
