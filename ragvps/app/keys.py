"""API keys with roles on knowledge bases: `read` (search, ask, chat), `write` (also add and delete
documents), `admin` (also create, drop and manage keys). A key is shown once when made; the catalog keeps
its SHA-256 only (a key is 32 random bytes, so a fast hash is enough). Keys from the settings (api_keys,
api_key_file) stay what they were: admin on every knowledge base.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from ragvps.db import keys
from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.db.connections import Connections

Role = Literal["read", "write", "admin"]
ROLES: tuple[Role, ...] = ("read", "write", "admin")
KEY_PREFIX = "rvk_"


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise UsageError(f"role {role!r} is not one of: {', '.join(ROLES)}", settings=("role",))
    return role


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """Who a request is: what each knowledge base lets it do. `everything`: the settings' keys, or an open
    loopback server with no key at all. `every_kb`: a role on every knowledge base (a group mapped to `*`).
    `within`: a principal this one may never exceed (the service key a chat front end speaks for its user with).
    `user`: the person's name for a signed-in or forwarded user (None for a key)."""

    name: str
    roles: Mapping[str, Role] = field(default_factory=dict)
    everything: bool = False
    every_kb: Role | None = None
    within: Principal | None = None
    user: str | None = None

    def can(self, kb: str, role: Role = "read") -> bool:
        if self.within is not None and not self.within.can(kb, role):
            return False
        if self.everything:
            return True
        held = [r for r in (self.roles.get(kb), self.every_kb) if r is not None]
        return any(ROLES.index(r) >= ROLES.index(role) for r in held)

    def visible(self, names: Sequence[str], role: Role = "read") -> list[str]:
        """The knowledge bases among `names` this principal may use with `role`."""
        return [n for n in names if self.can(n, role)]

    @property
    def holds_nothing(self) -> bool:
        """A user whose groups map to no role: refused with a 403 that says so, not shown an empty server."""
        return not self.everything and not self.roles and self.every_kb is None


ANYONE = Principal("open", everything=True)


@dataclass(frozen=True)
class KeyInfo:
    name: str
    grants: tuple[str, ...]  # "kb:role"
    created_at: datetime
    last_used_at: datetime | None


class Keys:
    def __init__(self, connections: Connections):
        self.connections = connections

    def create(self, name: str, grants: Sequence[tuple[str, str]], every_kb: str | None = None) -> str:
        """A new key granting each (knowledge base, role), and `every_kb` on every knowledge base, present and
        future; returns the key, which is never shown again."""
        if not name.strip():
            raise UsageError("a key needs a name: --name app1", settings=("name",))
        if not grants and every_kb is None:
            raise UsageError(
                "a key needs a role on at least one knowledge base: --kb faq --role read, or on "
                "every one: --all-kbs --role admin"
            )
        for _, role in grants:
            check_role(role)
        every = check_role(every_kb) if every_kb is not None else None
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        with self.connections.connection() as conn:
            keys.insert(conn, name, key_hash(key), grants, every)
        return key

    def listing(self) -> list[KeyInfo]:
        with self.connections.connection() as conn:
            rows = keys.listing(conn)
        return [KeyInfo(name, tuple(grants), created, used) for name, created, used, grants in rows]

    def revoke(self, name: str, force: bool = False) -> None:
        with self.connections.connection() as conn:
            keys.delete(conn, name, force)

    def any(self) -> bool:
        return self.connections.read(lambda r: keys.count(r.conn) > 0)

    def principal(self, presented: str) -> Principal | None:
        """Who holds `presented`, or None when no key matches (read on a replica while the primary is away)."""
        report = self.connections.replicas()
        if report is not None and report.primary_problem is not None:
            found = self.connections.read(lambda r: keys.grants(r.conn, key_hash(presented), mark_used=False))
        else:
            with self.connections.connection() as conn:
                found = keys.grants(conn, key_hash(presented))
        if found is None:
            return None
        name, roles, every = found
        return Principal(
            f"key {name}",
            {kb: check_role(role) for kb, role in roles.items()},
            every_kb=check_role(every) if every else None,
        )
