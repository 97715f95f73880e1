"""Connected sources and their items in PostgreSQL (migration 012). A sync's items are written in one
transaction with the source's new cursor and state, so a sync that dies leaves the last complete one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import psycopg

from ragvps.db.sql import queries
from ragvps.db.store import end_implicit_transaction


def _q(name: str) -> str:
    return queries("sources.sql")[name]


@dataclass(frozen=True)
class Item:
    """One item of a source as last synced: its mirror file, its link and its version."""

    rel: str
    url: str
    version: str


@dataclass(frozen=True)
class SourceRow:
    name: str
    kind: str
    location: str
    config: dict[str, object]
    cursor: str | None
    created_at: datetime
    synced_at: datetime | None
    state: str
    error: str | None
    seconds: float | None
    items: int


def add(conn: psycopg.Connection, name: str, kind: str, location: str, config: Mapping[str, object]) -> bool:
    """Record a source; False when one of that name exists."""
    end_implicit_transaction(conn)
    with conn.transaction():
        row = conn.execute(
            _q("insert_source"), {"name": name, "kind": kind, "location": location, "config": json.dumps(dict(config))}
        ).fetchone()
    return row is not None


def listed(conn: psycopg.Connection) -> list[SourceRow]:
    rows = conn.execute(_q("list_sources")).fetchall()
    conn.commit()
    return [SourceRow(*row) for row in rows]


def remove(conn: psycopg.Connection, name: str) -> bool:
    end_implicit_transaction(conn)
    with conn.transaction():
        return conn.execute(_q("delete_source"), {"name": name}).fetchone() is not None


def items(conn: psycopg.Connection, source: str) -> dict[str, Item]:
    rows = conn.execute(_q("items"), {"source": source}).fetchall()
    conn.commit()
    return {key: Item(rel, url, version) for key, rel, url, version in rows}


def finish(
    conn: psycopg.Connection,
    name: str,
    found: Mapping[str, Item] | None,
    cursor: str | None,
    state: str,
    error: str | None,
    seconds: float,
) -> None:
    """End a sync: its items (None: leave them as they were), cursor, state and time, in one transaction."""
    end_implicit_transaction(conn)
    with conn.transaction():
        if found is not None:
            conn.execute(_q("delete_items"), {"source": name})
            with conn.cursor() as cur:
                cur.executemany(
                    _q("insert_item"),
                    [
                        {"source": name, "key": key, "rel": i.rel, "url": i.url, "version": i.version}
                        for key, i in found.items()
                    ],
                )
        conn.execute(
            _q("finish_sync"), {"name": name, "cursor": cursor, "state": state, "error": error, "seconds": seconds}
        )
