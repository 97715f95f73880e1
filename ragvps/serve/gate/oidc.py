"""The OpenID Connect provider as a client sees it: its discovery document, its signing keys (JWKS), the
authorization-code flow with PKCE, and the check of a token (signature, issuer, audience, expiry with the
setting oidc_leeway for clock skew). httpx speaks the protocol; joserfc checks the JSON Web Tokens.

Keys rotate: a token signed with a key id not in the cached set makes a fresh fetch of the JWKS, so a provider's
new key is accepted at once. One fetch runs at a time (every token waiting for a new key shares it), at most one
every JWKS_REFETCH_S, and a key id is looked for once per KID_RETRY_S: a stream of forged key ids costs one fetch
an interval and never delays a token whose key is known. A provider whose tokens carry no key id has each key
tried, and its keys fetched again (once an interval) when none verifies, so its rotation needs no restart.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import httpx
from joserfc import jws, jwt
from joserfc.errors import BadSignatureError, JoseError
from joserfc.jwk import KeySet

from ragvps.app.identity import User, provider_client, split_groups
from ragvps.errors import Blocked, ConfigError, UnauthorizedError, UnavailableError

if TYPE_CHECKING:
    from ragvps.config import AuthSettings

log = logging.getLogger(__name__)
METADATA_TTL_S = 3600.0
JWKS_REFETCH_S = 1.0
KID_RETRY_S = 300.0
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Claims:
    """What ragvps reads of a checked token."""

    subject: str
    email: str | None
    name: str | None
    groups: tuple[str, ...]
    expires: float
    nonce: str | None

    def user(self) -> User:
        return User(self.subject, self.email, self.name, self.groups, "oidc")


@dataclass(frozen=True)
class Login:
    """One sign-in attempt's secrets, kept in a short-lived signed cookie until the provider sends the user back."""

    state: str
    nonce: str
    verifier: str
    next: str

    @staticmethod
    def new(next_path: str) -> Login:
        return Login(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48), next_path)

    @property
    def challenge(self) -> str:
        digest = hashlib.sha256(self.verifier.encode("ascii")).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class Provider:
    def __init__(self, auth: AuthSettings, allow_hosts: tuple[str, ...] = ()):
        self.auth, self.allow_hosts = auth, allow_hosts  # allow_hosts: source_allow_hosts, beyond the issuer's host
        self.issuer = auth.oidc_issuer.rstrip("/")
        self._metadata: tuple[float, dict[str, object]] = (0.0, {})
        self._keys: tuple[float, KeySet | None] = (0.0, None)
        self._looked_for: dict[str, float] = {}  # unknown key id -> when the JWKS was fetched for it
        self._refreshing: asyncio.Future[KeySet] | None = None  # the one fetch of the keys in flight

    async def metadata(self) -> dict[str, object]:
        at, found = self._metadata
        if found and time.monotonic() - at < METADATA_TTL_S:
            return found
        url = self.issuer + "/.well-known/openid-configuration"
        document = await self._get_json(url)
        if str(document.get("issuer", "")).rstrip("/") != self.issuer:
            raise ConfigError(
                f"the provider at {url} calls itself {document.get('issuer')!r}, not {self.issuer!r}: "
                "set oidc_issuer to exactly its issuer",
                settings=("oidc_issuer",),
            )
        self._metadata = (time.monotonic(), document)
        return document

    async def endpoint(self, name: str) -> str:
        value = (await self.metadata()).get(name)
        if not isinstance(value, str) or not value.startswith(("https://", "http://")):
            raise UnavailableError(f"the provider {self.issuer} names no {name} in its discovery document")
        return value

    async def key_set(self, kid: str | None) -> KeySet:
        """The provider's keys, for a token signed with key `kid`. A known kid (or none) never waits; an unknown
        one joins the one fetch in flight (or starts it), which runs no sooner than JWKS_REFETCH_S after the last;
        a kid looked for in the last KID_RETRY_S is refused at once. A stream of forged kids costs one fetch an
        interval, and a request with a known kid never queues behind them."""
        at, keys = self._keys
        if keys is None:
            return await self._refresh()
        if kid is None or any(k.kid == kid for k in keys.keys):
            return keys
        now = time.monotonic()
        if now - self._looked_for.get(kid, -KID_RETRY_S) < KID_RETRY_S:
            return keys
        if len(self._looked_for) > 1000:
            self._looked_for.clear()
        self._looked_for[kid] = now
        return await self._refresh()

    async def _refresh(self) -> KeySet:
        """The keys fetched again: one fetch at a time, no sooner than JWKS_REFETCH_S after the last, in a task of
        its own that every token waiting for a new key shares (a token whose key is known waits for none)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._fetch_keys())
        return await asyncio.shield(self._refreshing)

    async def _fetch_keys(self) -> KeySet:
        wait = self._keys[0] + JWKS_REFETCH_S - time.monotonic()
        if self._keys[1] is not None and wait > 0:
            await asyncio.sleep(wait)
        try:
            found = await self._get_json(await self.endpoint("jwks_uri"))
            keys = KeySet.import_key_set(found)  # type: ignore[arg-type]
        except BaseException:
            self._keys = (time.monotonic(), self._keys[1])  # a failed fetch waits its interval too
            raise
        self._keys = (time.monotonic(), keys)
        return keys

    async def _decoded(self, token: str, kid: str | None) -> jwt.Token:
        """The token checked against the provider's keys. Without a kid, each key is tried; when none verifies
        (the provider rotated its only key), the keys are fetched again (once an interval) and tried once more."""
        keys = await self.key_set(kid)
        if kid is not None:
            return jwt.decode(token, keys, algorithms=list(ASYMMETRIC))
        try:
            return _any_key(token, keys)
        except BadSignatureError:
            return _any_key(token, await self._refresh())

    async def verify(self, token: str, audiences: tuple[str, ...], nonce: str | None = None) -> Claims:
        """The token's claims once its signature, issuer, audience, times (and nonce, when given) hold; an
        UnauthorizedError saying which did not."""
        try:
            header = jws.extract_compact(token.encode("ascii")).protected
            kid = header.get("kid")
            decoded = await self._decoded(token, kid if isinstance(kid, str) else None)
            registry = jwt.JWTClaimsRegistry(
                leeway=self.auth.oidc_leeway,
                iss={"essential": True, "value": self.issuer},
                exp={"essential": True},
                sub={"essential": True},
            )
            registry.validate(decoded.claims)
        except (JoseError, ValueError, UnicodeError) as exc:
            raise UnauthorizedError(f"the token was refused ({_why(exc)}): sign in again") from None
        claims = decoded.claims
        for claim in ("sub", "email", "name"):
            if isinstance(claims.get(claim), str) and not str(claims[claim]).isprintable():
                raise UnauthorizedError(
                    f"the token was refused (its {claim} claim holds control characters, which no name may hold)"
                )
        aud = claims.get("aud")
        if not set([aud] if isinstance(aud, str) else aud or []) & set(audiences):
            raise UnauthorizedError(
                f"the token was refused (its audience {aud!r} is not this server's: "
                "set oidc_audience, or ask the provider for a token for oidc_client_id)"
            )
        if nonce is not None and claims.get("nonce") != nonce:
            raise UnauthorizedError("the sign-in was refused (the ID token's nonce does not match): sign in again")
        found = claims.get(self.auth.oidc_groups_claim)
        groups = split_groups(found if isinstance(found, str | list | tuple) else None)
        return Claims(
            str(claims["sub"]),
            _text(claims.get("email")),
            _text(claims.get("name")),
            groups,
            float(claims["exp"]),
            _text(claims.get("nonce")),
        )

    async def authorize_url(self, login: Login, redirect_uri: str) -> str:
        query = {
            "response_type": "code",
            "client_id": self.auth.oidc_client_id,
            "redirect_uri": redirect_uri,
            "scope": " ".join(self.auth.oidc_scopes),
            "state": login.state,
            "nonce": login.nonce,
            "code_challenge": login.challenge,
            "code_challenge_method": "S256",
        }
        return await self.endpoint("authorization_endpoint") + "?" + urlencode(query)

    async def exchange(self, code: str, login: Login, redirect_uri: str) -> str:
        """The ID token the provider gives for the authorization code (PKCE's verifier proves it is ours)."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": login.verifier,
            "client_id": self.auth.oidc_client_id,
        }
        auth = (
            httpx.BasicAuth(self.auth.oidc_client_id, self.auth.oidc_client_secret)
            if self.auth.oidc_client_secret
            else None
        )
        url = await self.endpoint("token_endpoint")
        try:
            async with self._client(auth) as client:
                response = await client.post(url, data=form)
        except Blocked as exc:
            raise UnavailableError(f"the provider's token endpoint {url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise UnavailableError(
                f"the provider's token endpoint {url} cannot be reached ({exc.__class__.__name__}): try again"
            ) from None
        body = _json(response)
        if response.status_code != 200 or not isinstance(body.get("id_token"), str):
            raise UnauthorizedError(
                f"the provider refused the sign-in ({body.get('error', response.status_code)}: "
                f"{str(body.get('error_description', ''))[:200]}); check oidc_client_id and "
                "oidc_client_secret, then sign in again"
            )
        return str(body["id_token"])

    async def logout_url(self, after: str) -> str | None:
        found = (await self.metadata()).get("end_session_endpoint")
        if not isinstance(found, str):
            return None
        return found + "?" + urlencode({"client_id": self.auth.oidc_client_id, "post_logout_redirect_uri": after})

    def _client(self, auth: httpx.Auth | None = None) -> httpx.AsyncClient:
        return provider_client(self.issuer, self.allow_hosts, TIMEOUT_S, auth)

    async def _get_json(self, url: str) -> dict[str, object]:
        try:
            async with self._client() as client:
                response = await client.get(url)
        except Blocked as exc:
            raise UnavailableError(f"the identity provider's {url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise UnavailableError(
                f"the identity provider at {url} cannot be reached ({exc.__class__.__name__}): "
                "check oidc_issuer and that the provider is up"
            ) from None
        if response.status_code != 200:
            raise UnavailableError(
                f"the identity provider answered HTTP {response.status_code} for {url}: check oidc_issuer"
            )
        return _json(response)


def _any_key(token: str, keys: KeySet) -> jwt.Token:
    """A token without a kid, checked against each of the keys in turn (a provider with one key, or two while it
    rotates)."""
    for key in keys.keys[:-1]:
        try:
            return jwt.decode(token, key, algorithms=list(ASYMMETRIC))
        except BadSignatureError:
            continue
    if not keys.keys:
        raise BadSignatureError()
    return jwt.decode(token, keys.keys[-1], algorithms=list(ASYMMETRIC))


def _json(response: httpx.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _why(exc: Exception) -> str:
    name = type(exc).__name__
    return {
        "ExpiredTokenError": "it has expired",
        "BadSignatureError": "its signature does not verify",
        "InvalidClaimError": f"a claim is wrong: {exc}",
        "MissingClaimError": f"a claim is missing: {exc}",
        "InvalidTokenError": "it is not valid yet or was issued in the future",
    }.get(name, f"{name}: {exc}"[:200])
