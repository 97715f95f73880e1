"""Who a request is. A key from the settings (api_keys, api_key_file) is admin on every knowledge base; a key
made with `ragvps key create` holds the roles the catalog gives it, looked up at most KEY_TTL_S ago (so a
revoked key stops working within that); a person (a session, a bearer token from the identity provider, a trusted
proxy's user, a user a chat front end forwards) holds what their groups give (serve/gate/people.py); a loopback server
with no key and no sign-in at all is open to anyone, as before.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ragvps.app.keys import ANYONE, Principal, key_hash
from ragvps.errors import ForbiddenError, RagvpsError, UnauthorizedError
from ragvps.serve.gate.auth import OPEN_PATHS, key_matches, presented_key, send_error
from ragvps.serve.gate.people import People, looks_like_jwt
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ragvps.serve.shared.lifecycle import Ready

KEY_TTL_S = 2.0
CHAT_DOORS = frozenset({"/v1/models", "/v1/chat/completions", "/api/tags", "/api/ps", "/api/show", "/api/chat"})
LOOKUP_TIMEOUT_S = 3.0
ADMIN = Principal("settings key", everything=True)


class Access:
    def __init__(self, keys: tuple[str, ...], ready: Ready, people: People | None = None):
        self.keys = keys
        self.ready = ready
        self.people = people
        self._found: dict[str, tuple[float, Principal | None]] = {}  # key hash -> (when, principal)
        self._any: tuple[float, bool] = (0.0, False)

    async def resolve(self, scope: Scope) -> Principal | None:
        """Who the request is: a person (session, trusted proxy, bearer token) or a key (with a user it may
        forward); None when it must be refused. A bad token raises UnauthorizedError saying why."""
        headers, people = scope["headers"], self.people
        given = presented_key(headers)
        if people is None:
            return await self.principal(given)
        found = await people.from_session(headers)
        if found is None:
            client = scope.get("client")
            found = await people.from_proxy(client[0] if client else None, headers)
        if found is None and given is not None and people.provider is not None and looks_like_jwt(given):
            found = await people.from_token(given)
        if found is None:
            key = await self.principal(given)
            found = None if key is None else await people.forwarded(key, headers)
        return found

    async def principal(self, presented: str | None) -> Principal | None:
        """The principal of the key presented; None when the request must be refused (no key, or a wrong one)."""
        if presented is not None and key_matches(presented, self.keys):
            return ADMIN
        if self.keys or self.people is not None or await self._catalog_has_keys():
            return None if presented is None else await self._catalog_principal(presented)
        return ANYONE  # no key anywhere: open (on loopback, as `serve` insists), whatever a client sends

    def needs_keys(self) -> bool:
        return bool(self.keys) or self.people is not None or self._any[1]

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
        if (
            scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope.get("method") == "OPTIONS"
        ):  # CORS preflight carries no credentials
            await self.app(scope, receive, send)
            return
        given = presented_key(scope["headers"])
        try:
            principal = await self.access.resolve(scope)
        except RagvpsError as exc:  # the catalog or the provider cannot be read, a token is bad: say so
            await send_error(
                send,
                exc,
                [(b"www-authenticate", b'Bearer realm="ragvps"')] if isinstance(exc, UnauthorizedError) else None,
            )
            return
        # A forwarded user with no role still reaches the chat doors: Open WebUI shows its users the key's models,
        # and the chat answers such a user with why (serve/gate/principal.py denial), where they read it.
        chat_door = principal is not None and principal.within is not None and scope["path"] in CHAT_DOORS
        if principal is not None and principal.user is not None and principal.holds_nothing and not chat_door:
            await send_error(
                send,
                ForbiddenError(
                    f"{principal.name} holds no role on any knowledge base: none of this user's groups maps to one in "
                    "the setting group_roles; ask an administrator to add one (GROUP=KB:read)",
                    settings=("group_roles",),
                ),
            )
            return
        if principal is not None:
            scope.setdefault("state", {})["principal"] = principal
            await self.app(scope, receive, send)
            return
        sign_in = (
            " or sign in at /auth/login"
            if self.access.people is not None and self.access.people.provider is not None
            else ""
        )
        message = (
            f"this server needs an API key: send `Authorization: Bearer KEY` or `X-API-Key: KEY`{sign_in}"
            if given is None
            else "the API key is not valid: send one of the keys in api_keys/api_key_file "
            "or one made with `ragvps key create`"
        )
        await send_error(send, UnauthorizedError(message), [(b"www-authenticate", b'Bearer realm="ragvps"')])
