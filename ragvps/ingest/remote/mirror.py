"""A source's mirror folder: its items as files, named safely (ragvps.ingest.links keeps their URLs)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

from ragvps.ingest.remote import Fetch, Fetched


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


def kept(fetch: Fetch, out: Fetched, item: str, rel: str, data: bytes) -> bool:
    """Write an item's file; one the file system cannot hold (`a.md` beside `a.md/b.md`, a name past 255 bytes)
    fails alone, by name (never naming the server's path), and the others are kept."""
    try:
        write(fetch.mirror, rel, data)
        return True
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        shown = item if len(item) <= 120 else item[:100] + "…"
        out.skip(
            "unwritable name", f"{fetch.name}: {shown!r} cannot be kept as a file ({why}), skipped", fetch.warn, item
        )
        return False


def remove(mirror: Path, rel: str) -> None:
    path = mirror / rel
    if path.resolve().is_relative_to(mirror.resolve()):
        path.unlink(missing_ok=True)
