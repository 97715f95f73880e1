"""The API keys in the catalog: their hashes, names and the roles they grant on knowledge bases."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg

from ragvps.db.catalog import q_, require
from ragvps.db.sql import scalar
from ragvps.errors import ConflictError, NotFoundError, UsageError

KeyRow = tuple[str, datetime, datetime | None, list[str]]  # name, created, last used, ["kb:role"]


def insert(
    conn: psycopg.Connection, name: str, hashed: str, grants: Sequence[tuple[str, str]], every: str | None = None
) -> None:
    with conn.transaction():
        kb_ids = {kb: require(conn, kb).id for kb, _ in grants}
        if conn.execute(q_("key_get_by_name"), {"name": name}).fetchone() is not None:
            raise ConflictError(
                f"a key named {name!r} exists already: choose another name, or `ragvps key revoke {name}` first"
            )
        row = conn.execute(q_("key_insert"), {"name": name, "hash": hashed, "every": every}).fetchone()
        assert row is not None
        for kb, role in grants:
            conn.execute(q_("grant_insert"), {"key_id": row[0], "kb_id": kb_ids[kb], "role": role})


def listing(conn: psycopg.Connection) -> list[KeyRow]:
    return [(str(n), c, u, list(g)) for n, c, u, g in conn.execute(q_("key_list")).fetchall()]


def delete(conn: psycopg.Connection, name: str, force: bool) -> None:
    """Delete the key; the last admin key goes only with `force` (the shell can always make another)."""
    with conn.transaction():
        if conn.execute(q_("key_get_by_name"), {"name": name}).fetchone() is None:
            names = [row[0] for row in conn.execute(q_("key_list"))]
            raise NotFoundError(f"no key named {name!r}; the keys: {', '.join(names) or 'none'}")
        is_admin = bool(scalar(conn, q_("key_is_admin"), {"name": name}))
        left = int(scalar(conn, q_("admin_keys_left"), {"name": name}))
        if is_admin and left == 0 and not force:
            raise UsageError(
                f"{name!r} is the last key with the admin role: make another admin key first "
                "(ragvps key create --role admin ...), or revoke it with --yes"
            )
        conn.execute(q_("key_delete"), {"name": name})


def count(conn: psycopg.Connection) -> int:
    return int(scalar(conn, q_("key_count")))


def grants(
    conn: psycopg.Connection, hashed: str, mark_used: bool = True
) -> tuple[str, dict[str, str], str | None] | None:
    """(the key's name, knowledge base -> role, its role on every knowledge base or None) for the key with this hash,
    or None; marks it used."""
    rows = conn.execute(q_("key_grants"), {"hash": hashed}).fetchall()
    if not rows:
        return None
    if mark_used:
        conn.execute(q_("key_used"), {"id": rows[0][0]})
    every = rows[0][4]
    return str(rows[0][1]), {str(kb): str(role) for _, _, kb, role, _ in rows if kb is not None}, every
