"""The benches' own databases on a server they were given an admin URL of."""

from __future__ import annotations

import re


def named(url: str, name: str) -> str:
    """`url` naming database `name` instead (its query, the embedded server's socket, kept)."""
    return re.sub(r"(postgres(?:ql)?://[^/]*/)([^?]*)", lambda m: m.group(1) + name, url, count=1)


def fresh(admin: str, name: str) -> str:
    """Database `name` dropped if it was there and made empty; its URL."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return named(admin, name)
