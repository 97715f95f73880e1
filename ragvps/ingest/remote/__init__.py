"""Connected sources (issue 46): a git repository, a web site, an S3 bucket, each mirrored as files under the
knowledge base's folder (`KB_DIR/sources/<name>/`) and ingested as that folder.

Each connector (git.py, web.py, s3.py) has one function, `fetch(Fetch) -> Fetched`: it lists the source's items,
reads only those whose version (git blob id, ETag or Last-Modified, S3 ETag) changed since the last sync, writes
them into the mirror and removes the files of items that are gone. sync.py records the items and ingests the
mirror; mirror.py keeps the item's own URL beside its file, so that citations link to the page, the file at its
commit, or the object.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ragvps.db.sources import Item
from ragvps.reach import Reach

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]


@dataclass(frozen=True)
class Fetch:
    """What a connector is given: the source, its mirror folder, what the last sync found, and its limits."""

    name: str
    location: str
    config: Mapping[str, object]
    mirror: Path
    known: Mapping[str, Item]
    cursor: str | None
    progress: Progress
    warn: Warn
    max_items: int = 10_000
    max_item_bytes: int = 64 << 20
    timeout: float = 30.0
    reach: Reach = Reach()  # what beyond the public internet it may connect to (source_allow_hosts)
    secret: str = field(default="", repr=False)  # the source's credential (user:password), never in `location`
    ambient: bool = False  # the server's own credentials (ssh keys, AWS_*) allowed: source_ambient_credentials

    def tick(self) -> None:
        """Called while a response streams: raises Cancelled when the sync is cancelled or its worker stops."""
        self.progress("tick", 0, 0)

    def text(self, key: str) -> str:
        value = self.config.get(key)
        return "" if value is None else str(value)

    def number(self, key: str, default: int) -> int:
        value = self.config.get(key)
        return int(value) if isinstance(value, int | float | str) and str(value).strip() else default

    def strings(self, key: str) -> list[str]:
        value = self.config.get(key)
        return [str(v) for v in value] if isinstance(value, list | tuple) else []


@dataclass
class Fetched:
    """What a connector found: every item (read now or unchanged), the new cursor, and counts by outcome."""

    items: dict[str, Item] = field(default_factory=dict)
    cursor: str | None = None
    read: int = 0  # items fetched and written to the mirror
    unchanged: int = 0  # items whose version had not changed: not read
    deleted: int = 0  # items gone from the source: their files removed
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> items
    problems: list[str] = field(default_factory=list)  # each naming the item or the limit
    failures: list[tuple[str, str]] = field(default_factory=list)  # (the item's URL or path, why), for the job

    def skip(self, reason: str, message: str, warn: Warn, item: str = "") -> None:
        self.skipped[reason] += 1
        if len(self.problems) < 100:  # the rest counted, not said one by one
            self.problems.append(message)
            if item:
                self.failures.append((item, message))
            warn(message)
