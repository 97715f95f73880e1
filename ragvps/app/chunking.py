"""`ragvps chunk`'s use case: the chunk stage alone, without the App, whose imports (the database driver, numpy,
the search and answer stages) it does not need; the chunk files written, counts and token figures returned."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragvps.config import Settings
from ragvps.embed.registry import resolve_spec
from ragvps.errors import UsageError
from ragvps.measure.summary import ChunkSummary
from ragvps.measure.summary import chunk_summary as summarise


def chunk_summary(
    settings: Settings, path: Path | str, progress: Callable[[str, int, int], None], warn: Callable[[str], None]
) -> ChunkSummary:
    """The chunk stage over `path` alone: its chunk files written under the data folder (no database)."""
    return summarise(settings, resolve_spec(settings), existing_path(path), progress, warn)


def existing_path(path: Path | str) -> Path:
    """A folder or file of documents that exists; an empty path is an error, not the current folder."""
    if not str(path).strip():
        raise UsageError("the path is empty: name a folder or a file of documents")
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist: name a folder or a file of documents")
    return path
