"""The users who signed in and the audit log, in the catalog (sql/identity.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg

from ragvps.db.sql import queries

UserRow = tuple[str, str | None, str | None, list[str]]  # subject, email, name, groups
AuditRow = tuple[datetime, str, str, str | None, int, str, str | None, str | None]


def _q(name: str) -> str:
    return queries("identity.sql")[name]


def user_seen(
    conn: psycopg.Connection, subject: str, email: str | None, name: str | None, groups: Sequence[str], via: str
) -> None:
    conn.execute(
        _q("user_seen"), {"subject": subject, "email": email, "name": name, "groups": list(groups), "via": via}
    )


def user_by_email(conn: psycopg.Connection, email: str) -> UserRow | None:
    """The one user who signed in with `email`; None when none did, or when two subjects share it."""
    rows = conn.execute(_q("user_by_email"), {"email": email}).fetchall()
    if len(rows) != 1:
        return None
    row = rows[0]
    return (str(row[0]), row[1], row[2], list(row[3]))


def users(conn: psycopg.Connection) -> list[tuple[str, str | None, str | None, list[str], str, datetime]]:
    return [(str(s), e, n, list(g), str(v), at) for s, e, n, g, v, at in conn.execute(_q("user_list"))]


def audit_insert(conn: psycopg.Connection, rows: Sequence[dict[str, object]]) -> None:
    with conn.cursor() as cur:
        cur.executemany(_q("audit_insert"), rows)


def audit_prune(conn: psycopg.Connection, days: int) -> int:
    return conn.execute(_q("audit_prune"), {"days": days}).rowcount


def audit_query(
    conn: psycopg.Connection, since: datetime, who: str | None, kb: str | None, action: str | None, limit: int
) -> list[AuditRow]:
    rows = conn.execute(_q("audit_query"), {"since": since, "who": who, "kb": kb, "action": action, "limit": limit})
    return [(at, str(w), str(a), k, int(s), str(r), req, qu) for at, w, a, k, s, r, req, qu in rows]


def revoke_session(conn: psycopg.Connection, sid: str, until: float) -> None:
    """A session signed out: refused until `until` (epoch seconds, its own expiry)."""
    conn.execute(_q("session_revoked_prune"))
    conn.execute(_q("session_revoke"), {"sid": sid, "until": until})


def shared_secret(conn: psycopg.Connection, name: str, candidate: bytes) -> bytes:
    """The secret `name` every server on this database shares: the one kept already, else `candidate`, kept now."""
    found = conn.execute(_q("shared_secret"), {"name": name}).fetchone()
    if found is None:
        conn.execute(_q("shared_secret_keep"), {"name": name, "value": candidate})
        found = conn.execute(_q("shared_secret"), {"name": name}).fetchone()
    conn.commit()
    assert found is not None
    return bytes(found[0])


def session_revoked(conn: psycopg.Connection, sid: str) -> bool:
    return conn.execute(_q("session_revoked"), {"sid": sid}).fetchone() is not None
