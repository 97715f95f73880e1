"""Who a request is when it is a person: a signed-in session, a bearer token from the identity provider, a user
named by a trusted reverse proxy, or a user a chat front end forwards beside its key (docs/auth.md).

- Session cookie (ragvps_session, serve/gate/session.py): the groups of the sign-in; a group change takes effect at
  the next sign-in.
- Bearer token: a JWT (`eyJ...`, three parts) is checked against the provider (serve/gate/oidc.py); its audience
  must be oidc_client_id or one of oidc_audience. A checked token is remembered until it expires.
- Proxy headers (proxy_user_header, proxy_groups_header, proxy_email_header): only from an address in
  trusted_proxies. From anyone else they are ignored, and logged once per address.
- Forwarded user (X-OpenWebUI-User-Email/-Name/-Role): only beside a key named in forward_user_keys; the user's
  groups decide, and the key bounds them. Beside any other key the headers are ignored (logged once per key).
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
from typing import TYPE_CHECKING

from ragvps.app.identity import RoleMap, User, split_groups
from ragvps.errors import ConfigError, RagvpsError, UnavailableError
from ragvps.serve.gate.session import SESSION_COOKIE, Signer, cookie, seed_key
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from ragvps.app.keys import Principal
    from ragvps.config import Settings
    from ragvps.serve.gate.oidc import Provider
    from ragvps.serve.shared.lifecycle import Ready

log = logging.getLogger(__name__)
FORWARDED = (b"x-openwebui-user-email", b"x-openwebui-user-name", b"x-openwebui-user-role", b"x-openwebui-user-id")
SEEN_EVERY_S = 600.0  # a proxy's or forwarded user is written to the users table at most this often
LOOKUP_TIMEOUT_S = 3.0
MAX_REMEMBERED = 10_000
REVOKED_TTL_S = 2.0  # a sign-out in another process of the server is honoured within this


def looks_like_jwt(token: str) -> bool:
    return token.startswith("eyJ") and token.count(".") == 2


class People:
    def __init__(self, settings: Settings, ready: Ready, provider: Provider | None):
        auth = settings.auth
        self.settings, self.ready, self.provider = settings, ready, provider
        self.roles = RoleMap.parse(auth.group_roles)
        self._signer = Signer.of_setting(settings)  # else the database's shared key, read at the first sign-in
        self.audiences = (auth.oidc_client_id, *auth.oidc_audience)
        self.proxies = tuple(_network(p) for p in auth.trusted_proxies)
        self.user_header = auth.proxy_user_header.lower().encode("latin-1")
        self.groups_header = auth.proxy_groups_header.lower().encode("latin-1")
        self.email_header = auth.proxy_email_header.lower().encode("latin-1")
        self.forward_keys = frozenset(f"key {name}" for name in auth.forward_user_keys)
        self._tokens: dict[str, tuple[float, User]] = {}
        self._seen: dict[str, float] = {}
        self._warned: set[str] = set()
        self._checked: dict[str, tuple[float, bool]] = {}  # session id -> (when looked up, signed out)

    async def signer(self) -> Signer:
        """What signs session cookies: session_secret's key, else the one every server on this database shares
        (the catalog's; read once, made by the first server that needs it). UnavailableError while the server is
        starting or the database is away."""
        if self._signer is not None:
            return self._signer
        library = self.ready.library
        if library is None:
            raise UnavailableError("the server is still starting: try again in a few seconds")
        identities = library.identities()
        key = await in_thread(lambda: identities.session_key(seed_key(self.settings)), LOOKUP_TIMEOUT_S)
        self._signer = Signer(key)
        return self._signer

    async def from_session(self, headers: list[tuple[bytes, bytes]]) -> Principal | None:
        value = cookie(headers, SESSION_COOKIE)
        if self.provider is None or not value:
            return None
        try:
            signer = await self.signer()
        except RagvpsError:  # starting, or the database away: no session can be checked yet
            return None
        found = signer.session(value)
        if found is None or await self._revoked(found[1]):
            return None
        return self.roles.principal(found[0])

    async def sign_out(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Revoke the session the request carries (in the catalog: every process refuses it from now on)."""
        found = (await self.signer()).session(cookie(headers, SESSION_COOKIE)) if self.provider is not None else None
        library = self.ready.library
        if found is None:
            return
        _, sid, until = found
        self._checked[sid] = (float("inf"), True)
        if library is not None:
            await in_thread(lambda: library.identities().revoke(sid, until), LOOKUP_TIMEOUT_S)

    async def _revoked(self, sid: str) -> bool:
        """Whether the session was signed out, looked up at most REVOKED_TTL_S ago."""
        at, revoked = self._checked.get(sid, (0.0, False))
        library = self.ready.library
        if revoked or time.monotonic() - at < REVOKED_TTL_S or library is None:
            return revoked
        try:
            revoked = await in_thread(lambda: library.identities().revoked(sid), LOOKUP_TIMEOUT_S)
        except RagvpsError:  # the database is away: the last answer stands (this process's sign-outs are known)
            return revoked
        if len(self._checked) >= MAX_REMEMBERED:
            self._checked.clear()
        self._checked[sid] = (time.monotonic(), revoked)
        return revoked

    async def from_token(self, token: str) -> Principal:
        """The user a bearer JWT names; UnauthorizedError (saying why) when the provider did not sign it for us."""
        assert self.provider is not None
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = self._tokens.get(digest)
        if found is not None and found[0] > time.time():
            return self.roles.principal(found[1])
        claims = await self.provider.verify(token, self.audiences)
        user = claims.user()
        if len(self._tokens) >= MAX_REMEMBERED:
            self._tokens.clear()
        self._tokens[digest] = (claims.expires + self.provider.auth.oidc_leeway, user)
        return self.roles.principal(user)

    async def from_proxy(self, client: str | None, headers: list[tuple[bytes, bytes]]) -> Principal | None:
        values = dict(headers)
        name = values.get(self.user_header, b"").decode("latin-1").strip()
        if not name:
            return None
        if not self._trusted(client):
            self._warn_once(f"proxy:{client}", "ignored the user headers from %s: it is not in trusted_proxies", client)
            return None
        user = User(
            f"proxy:{name}",
            values.get(self.email_header, b"").decode("latin-1").strip() or None,
            name,
            split_groups(values.get(self.groups_header, b"").decode("latin-1")),
            "proxy",
        )
        await self._note(user)
        return self.roles.principal(user)

    async def forwarded(self, key: Principal, headers: list[tuple[bytes, bytes]]) -> Principal:
        """The principal a key acts as: its own, or, for a key in forward_user_keys with a forwarded user, that
        user's, bounded by the key's."""
        values = {k.decode("latin-1"): v.decode("utf-8", "replace").strip() for k, v in headers if k in FORWARDED}
        email = values.get("x-openwebui-user-email")
        if not email:
            return key
        if key.name not in self.forward_keys:
            self._warn_once(key.name, "ignored a forwarded user beside %s: it is not in forward_user_keys", key.name)
            return key
        library = self.ready.library
        if library is None:
            return key
        user = await in_thread(
            lambda: library.identities().forwarded(
                email, values.get("x-openwebui-user-name"), values.get("x-openwebui-user-role")
            ),
            LOOKUP_TIMEOUT_S,
        )
        return self.roles.principal(user, within=key)

    def _trusted(self, client: str | None) -> bool:
        if client is None or not self.proxies:
            return False
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address in network for network in self.proxies)

    async def _note(self, user: User) -> None:
        """Keep a proxy's user in the users table (for the audit and for forwarded look-ups), now and then."""
        library = self.ready.library
        if library is None or time.monotonic() - self._seen.get(user.subject, -SEEN_EVERY_S) < SEEN_EVERY_S:
            return
        if len(self._seen) >= MAX_REMEMBERED:
            self._seen.clear()
        self._seen[user.subject] = time.monotonic()
        await in_thread(lambda: library.identities().seen(user), LOOKUP_TIMEOUT_S)

    def _warn_once(self, what: str, message: str, *args: object) -> None:
        if what in self._warned or len(self._warned) >= MAX_REMEMBERED:
            return
        self._warned.add(what)
        log.warning(message, *args)


def _network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(entry.strip(), strict=False)
    except ValueError:
        raise ConfigError(
            f"trusted_proxies entry {entry!r} is not an address or a network (e.g. 10.0.0.5 or 172.18.0.0/16)",
            settings=("trusted_proxies",),
        ) from None
