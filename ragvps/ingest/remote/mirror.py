"""A source's mirror folder: its items as files, named safely (ragvps.ingest.links keeps their URLs)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath


def safe_rel(key: str) -> str | None:
    """`key` (a path in a repository, an object key) as a relative path inside the mirror, or None when it is not
    one: empty, absolute, or with a `..`, `.` or empty part (`a/../../etc/passwd`, `/x`, `a//b`), or a dot file."""
    if not key or key.startswith("/") or "\\" in key or "\x00" in key:
        return None
    parts = key.split("/")
    if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    return str(PurePosixPath(*parts))


def hashed_rel(url: str, suffix: str) -> str:
    """A file name for an item named by a URL (a web page): short, safe, stable."""
    return f"{hashlib.sha256(url.encode()).hexdigest()[:24]}{suffix}"


def write(mirror: Path, rel: str, data: bytes) -> None:
    """Write an item's file (atomically: a reader never sees half of it); its folders are made inside the mirror."""
    path = mirror / rel
    if not path.resolve().is_relative_to(mirror.resolve()):
        raise ValueError(f"{rel} is outside the mirror")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def remove(mirror: Path, rel: str) -> None:
    path = mirror / rel
    if path.resolve().is_relative_to(mirror.resolve()):
        path.unlink(missing_ok=True)
