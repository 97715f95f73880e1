"""The SQL files: named blocks (`-- name: x`) loaded once from the package, the numbered run-once migrations,
and `scalar()`, the one-value query."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def queries(file: str = "queries.sql") -> dict[str, str]:
    """The named blocks of one SQL file in sql/ (queries.sql unless named)."""
    text = resources.files("ragvps.sql").joinpath(file).read_text(encoding="utf-8")
    parts = _BLOCK.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def q(name: str) -> str:
    return queries()[name]


def compose(name: str, **parts: sql.Composable) -> sql.Composed:
    """A named query whose {placeholders} are identifiers or literals, never values."""
    return sql.SQL(q(name)).format(**parts)


def migrations(package: str = "ragvps.sql.migrations") -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of the numbered run-once migrations in `package`, in order."""
    folder = resources.files(package)
    found = []
    for entry in folder.iterdir():
        match = re.match(r"(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def scalar(
    conn: psycopg.Connection,
    query: str | sql.Composed | sql.SQL,
    params: Sequence[object] | Mapping[str, object] | None = None,
) -> Any:
    """The first column of the first row a query returns (None when it returns no row)."""
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]
