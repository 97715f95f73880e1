"""What a reader may produce from one file (docs/security.md): a small file whose parts are read many times (an
EPUB spine naming one chapter thousands of times, an OpenDocument table row repeated a million times, a sheet
whose cells all point at one long shared string) must fail by name, not fill memory and the database.

The bound is characters of text: at most `max_text_ratio` per byte of the file as it is stored (its *packed*
size: a zip's members' declared sizes are the file's own say, and padding members or a member that packs 200 to 1
would lift a bound counted on them), at least FLOOR (which real documents stay far under: a 10 KB file giving a
million characters is a bomb), never more than `max_text_chars`. Rows and chunks are cut from that text, so they
are bounded with it; the chunks one file may store are bounded too (`chunk_limit`).
"""

from __future__ import annotations

import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

FLOOR = 1 << 20  # characters any file may give, whatever its size (a tiny file is never refused for its ratio)
FLOOR_CHUNKS, CHARS_PER_CHUNK = 2_000, 64  # chunks a file may store: at least, and one per this many characters


class SkipFile(Exception):
    """A supported file that has nothing to read (an encrypted or image-only PDF): skipped and counted."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class OutputBound:
    ratio: int = 100  # setting max_text_ratio
    cap: int = 256 << 20  # setting max_text_chars

    def limit(self, packed: int) -> int:
        return min(self.cap, max(FLOOR, self.ratio * packed))


def packed_size(path: Path) -> int:
    """The file's bytes as stored (what the bound counts, whatever it unpacks to)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def chunk_limit(chars: int) -> int:
    """The chunks a file of `chars` characters may store: one per CHARS_PER_CHUNK of them, at least FLOOR_CHUNKS."""
    return max(FLOOR_CHUNKS, chars // CHARS_PER_CHUNK)


class Source(Protocol):  # a sources.SourceFile
    @property
    def path(self) -> Path: ...
    @property
    def rel(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def bound(self) -> OutputBound: ...


@dataclass
class Meter:
    """Counts the characters a reader produces from one file (and the parts it reads again); raises SkipFile,
    naming the file and the bound, as soon as they pass the file's limit."""

    rel: str
    bound: OutputBound
    packed: int
    chars: int = 0
    parts: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, source: Source, archive: zipfile.ZipFile | None = None) -> Meter:
        return cls(source.rel, source.bound, packed_size(source.path))

    @property
    def limit(self) -> int:
        return self.bound.limit(self.packed)

    def read(self, part: str) -> int:
        """Count one more read of `part`; how many times it has been read."""
        self.parts[part] += 1
        return self.parts[part]

    def add(self, chars: int) -> None:
        self.chars += chars
        if self.chars > self.limit:
            raise self.refusal()

    def refusal(self) -> SkipFile:
        part, times = self.parts.most_common(1)[0] if self.parts else ("", 0)
        again = f"; it reads {part} {times:,} times" if times > 1 else ""
        return SkipFile(
            "too much text",
            (
                f"{self.rel}: its text passes {self.limit:,} characters (max_text_ratio={self.bound.ratio} per byte of "
                f"its {self.packed:,}, at least {FLOOR:,}, at most "
                f"max_text_chars={self.bound.cap:,}){again}: "
                "a file that repeats its parts (a decompression bomb?) or one too large to read; skipped, nothing of "
                "it "
                "stored"
            ),
        )


def too_many_chunks(rel: str, chars: int, chunks: int, warn: Callable[[str], None], skipped: Counter[str]) -> bool:
    """Whether a file of `chars` characters makes more chunks than one may store (chunk_limit); then skipped by name."""
    limit = chunk_limit(chars)
    if chunks <= limit:
        return False
    warn(
        f"{rel}: it makes {chunks:,} chunks, more than a file may store ({limit:,}: one per "
        f"{CHARS_PER_CHUNK} characters of its text, at least {FLOOR_CHUNKS:,}); skipped, nothing of it stored"
    )
    skipped["too many chunks"] += 1
    return True
