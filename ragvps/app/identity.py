"""People besides keys: who a signed-in, proxied or forwarded user is, and what their groups let them do.

A user's roles come from the setting `group_roles`, entries `group=kb:role` (kb `*` for every knowledge base): a
user holds, on each knowledge base, the best role any of their groups gives there. Groups come from the identity
provider's token (the claim `oidc_groups_claim`), from a trusted proxy's groups header, or, for a user a chat front
end forwards, from that user's own record here plus `role:ROLE` for the role the front end gives them
(`X-OpenWebUI-User-Role: admin` -> the group `role:admin`). A forwarded user never exceeds the key that forwards
them. docs/auth.md shows working configurations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from ragvps.app.keys import ROLES, Principal, Role, check_role
from ragvps.db import identity
from ragvps.errors import ConfigError, RagvpsError
from ragvps.records import KB_NAME

if TYPE_CHECKING:
    import httpx

    from ragvps.db.connections import Connections

Via = Literal["oidc", "proxy", "forwarded"]
EVERY_KB = "*"


@dataclass(frozen=True)
class User:
    subject: str
    email: str | None = None
    name: str | None = None
    groups: tuple[str, ...] = ()
    via: Via = "oidc"

    @property
    def label(self) -> str:
        """How logs, the audit and errors name the user: `user EMAIL (via)`."""
        return f"user {self.email or self.name or self.subject} ({self.via})"


@dataclass(frozen=True)
class UserRecord:
    subject: str
    email: str | None
    name: str | None
    groups: tuple[str, ...]
    via: str
    seen_at: datetime


@dataclass(frozen=True)
class RoleMap:
    """`group_roles`, parsed: group -> ((kb or `*`, role), ...)."""

    grants: Mapping[str, tuple[tuple[str, Role], ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, entries: Sequence[str]) -> RoleMap:
        grants: dict[str, list[tuple[str, Role]]] = {}
        for entry in entries:
            group, eq, target = entry.partition("=")
            kb, colon, role = target.partition(":")
            group, kb, role = group.strip(), kb.strip(), role.strip()
            if not (eq and colon and group and kb) or (kb != EVERY_KB and not KB_NAME.fullmatch(kb)):
                raise ConfigError(
                    f"group_roles entry {entry!r} is not `group=kb:role` (kb: a knowledge base's "
                    "name or * for all), e.g. `engineering=docs:read`",
                    settings=("group_roles",),
                )
            try:
                grants.setdefault(group, []).append((kb, check_role(role)))
            except RagvpsError:
                raise ConfigError(
                    f"group_roles entry {entry!r}: the role must be one of {', '.join(ROLES)}",
                    settings=("group_roles",),
                ) from None
        return cls({g: tuple(v) for g, v in grants.items()})

    def principal(self, user: User, within: Principal | None = None) -> Principal:
        """What `user` may do: the best role each of their groups gives, on each knowledge base."""
        roles: dict[str, Role] = {}
        every: Role | None = None
        for kb, role in (grant for group in user.groups for grant in self.grants.get(group, ())):
            if kb == EVERY_KB:
                every = _best(every, role)
            else:
                roles[kb] = _best(roles.get(kb), role)
        return Principal(user.label, roles, every_kb=every, within=within, user=user.email or user.subject)


def _best(held: Role | None, role: Role) -> Role:
    return role if held is None or ROLES.index(role) > ROLES.index(held) else held


def no_role_message(user: User) -> str:
    groups = ", ".join(user.groups) or "none"
    return (
        f"signed in as {user.email or user.name or user.subject}, but none of your groups ({groups}) maps to a "
        "knowledge base: ask an administrator to add one of them to the setting group_roles "
        "(e.g. `GROUP=KB:read`)"
    )


class Identities:
    """The users who signed in, in the catalog: their groups as the provider said last time."""

    def __init__(self, connections: Connections):
        self.connections = connections

    def seen(self, user: User) -> None:
        """Note the user (now, or once the primary is back while it is away: a request never fails on it)."""
        self.connections.write_behind(
            [lambda c: identity.user_seen(c, user.subject, user.email, user.name, user.groups, user.via)], None
        )

    def forwarded(self, email: str, name: str | None, role: str | None) -> User:
        """A chat front end's user: the groups of their own record, the one user who signed in with this address
        (none if nobody did, or if two subjects share it: never another's groups), and `role:ROLE` for the role the
        front end gives them. The forwarding key's own role bounds all of it (RoleMap.principal's `within`)."""
        row = self.connections.read(lambda r: identity.user_by_email(r.conn, email))
        groups = list(row[3]) if row is not None else []
        if role:
            groups.append(f"role:{role.strip().lower()}")
        return User(row[0] if row is not None else f"forwarded:{email}", email, name, tuple(groups), "forwarded")

    def revoke(self, sid: str, until: float) -> None:
        """A session signed out: its cookie is refused from now on, in every process of the server."""
        with self.connections.connection() as conn:
            identity.revoke_session(conn, sid, until)

    def revoked(self, sid: str) -> bool:
        return self.connections.read(lambda r: identity.session_revoked(r.conn, sid))

    def session_key(self, candidate: bytes) -> bytes:
        """The key that signs session cookies when session_secret is empty, the same for every server on this
        database: the one kept in the catalog, else `candidate`, kept there now."""
        with self.connections.connection() as conn:
            return identity.shared_secret(conn, "session", candidate)

    def listing(self) -> list[UserRecord]:
        with self.connections.connection() as conn:
            return [UserRecord(s, e, n, tuple(g), v, at) for s, e, n, g, v, at in identity.users(conn)]


def provider_client(
    issuer: str, allow_hosts: Sequence[str], timeout: float, auth: httpx.Auth | None = None
) -> httpx.AsyncClient:
    """A client for the identity provider's endpoints under the reach rule (docs/security.md): the issuer's own
    host, which the server's configuration names, and beyond it only public addresses and source_allow_hosts, so
    a discovery document cannot send the server to an internal address."""
    from ragvps import reach  # lazy: httpx loads for a server with sign-in, not for every command

    host = urlsplit(issuer).hostname or ""
    return reach.async_client(reach.Reach.of([*allow_hosts, host]), timeout, auth)


def split_groups(value: str | Iterable[object] | None) -> tuple[str, ...]:
    """A groups claim or header as a tuple: a list of strings, or one comma-separated string."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return tuple(dict.fromkeys(g.strip() for g in items if str(g).strip()))
