"""The page's signed session cookie: who signed in, their groups, until when. HMAC-SHA256 over the JSON, so the
browser holds it but cannot change it; HttpOnly (no script reads it), SameSite=Lax (no other site's request
carries it on a POST), Secure when the page is served over https.

The key is the setting session_secret, or else 32 random bytes kept in the database (the catalog's shared_secrets,
made by the first server that needs them), so that sessions survive a restart and a session made on one server is
valid on every other server of the same database (docs/scale-out.md). A data_dir/session.key that an earlier release
wrote seeds it, so its sessions stay valid. A new session_secret (or the row deleted and the servers restarted)
signs everyone out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import TYPE_CHECKING

from ragvps.app.identity import User
from ragvps.errors import ConfigError

if TYPE_CHECKING:
    from ragvps.config import Settings

SESSION_COOKIE = "ragvps_session"
LOGIN_COOKIE = "ragvps_login"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    def __init__(self, key: bytes):
        self.key = key

    @classmethod
    def of_setting(cls, settings: Settings) -> Signer | None:
        """The signer of session_secret; None when it is empty (the database's shared key signs)."""
        if settings.auth.session_secret:
            return cls(hashlib.sha256(settings.auth.session_secret.encode()).digest())
        return None

    def dump(self, payload: dict[str, object], max_age_s: float) -> str:
        body = _b64(json.dumps({**payload, "exp": time.time() + max_age_s}, separators=(",", ":")).encode())
        return body + "." + _b64(hmac.new(self.key, body.encode(), hashlib.sha256).digest())

    def load(self, value: str) -> dict[str, object] | None:
        """The payload if the signature holds and it has not expired; None otherwise."""
        body, _, mac = value.partition(".")
        expected = _b64(hmac.new(self.key, body.encode(), hashlib.sha256).digest())
        if not mac or not hmac.compare_digest(mac, expected):
            return None
        try:
            payload = json.loads(_unb64(body))
        except ValueError:
            return None
        if (
            not isinstance(payload, dict)
            or not isinstance(payload.get("exp"), int | float)
            or payload["exp"] < time.time()
        ):
            return None
        return payload

    def session(self, value: str | None) -> tuple[User, str, float] | None:
        """(user, session id, expiry) of a session cookie, or None (no cookie, forged, expired, or made before
        sessions had ids: those sign in again, so that each can be signed out)."""
        payload = self.load(value) if value else None
        user = self._user(payload)
        sid = payload.get("sid") if payload is not None else None
        if payload is None or user is None or not isinstance(sid, str) or not sid:
            return None
        return user, sid, float(str(payload["exp"]))

    def user(self, value: str | None) -> User | None:
        """The user a session cookie names, or None (no cookie, forged, expired)."""
        found = self.session(value)
        return None if found is None else found[0]

    @staticmethod
    def _user(payload: dict[str, object] | None) -> User | None:
        if payload is None or not isinstance(payload.get("sub"), str):
            return None
        groups = payload.get("groups")
        return User(
            str(payload["sub"]),
            _opt(payload.get("email")),
            _opt(payload.get("name")),
            tuple(str(g) for g in groups) if isinstance(groups, list) else (),
            "oidc",
        )


def session_payload(user: User) -> dict[str, object]:
    """A new session's payload: the user, and an id of its own that signing out revokes."""
    return {
        "sub": user.subject,
        "email": user.email,
        "name": user.name,
        "groups": list(user.groups),
        "sid": secrets.token_urlsafe(18),
    }


def _opt(value: object) -> str | None:
    return value if isinstance(value, str) else None


def seed_key(settings: Settings) -> bytes:
    """The key offered to the database when it keeps none yet: data_dir/session.key where an earlier release wrote
    one (its sessions stay valid), else 32 new random bytes."""
    path = settings.database.data_dir / "session.key"
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        return secrets.token_bytes(32)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the session key {path} ({exc.__class__.__name__}): set session_secret, or "
            "make data_dir readable",
            settings=("session_secret", "data_dir"),
        ) from None
    return key if len(key) >= 32 else secrets.token_bytes(32)


def cookie_header(name: str, value: str, max_age_s: int, secure: bool, path: str = "/") -> tuple[bytes, bytes]:
    """A Set-Cookie header: HttpOnly, SameSite=Lax, Secure over https; max_age 0 deletes it."""
    parts = [f"{name}={value}", f"Path={path}", f"Max-Age={max_age_s}", "HttpOnly", "SameSite=Lax"]
    if secure:
        parts.append("Secure")
    return b"set-cookie", "; ".join(parts).encode("latin-1")


def cookie(headers: list[tuple[bytes, bytes]], name: str) -> str | None:
    """One cookie's value from a request's Cookie headers."""
    for key, value in headers:
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                if k == name:
                    return v
    return None
