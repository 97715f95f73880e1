"""What a reader may produce from one file (docs/security.md): a small file whose parts are read many times (an
EPUB spine naming one chapter thousands of times, an OpenDocument table row repeated a million times, a sheet
whose cells all point at one long shared string) must fail by name, not fill memory and the database.

The bound is characters of text: at most `max_text_ratio` per unpacked byte of the file (a zip's members
together), never more than `max_text_chars`. Rows and chunks are cut from that text, so they are bounded with it.
"""

from __future__ import annotations

import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

FLOOR = 1 << 20  # characters any file may give, whatever its size (a tiny file is never refused for its ratio)
ZIP_KINDS = frozenset({"docx", "pptx", "xlsx", "epub", "odt"})


class SkipFile(Exception):
    """A supported file that has nothing to read (an encrypted or image-only PDF): skipped and counted."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class OutputBound:
    ratio: int = 100  # setting max_text_ratio
    cap: int = 256 << 20  # setting max_text_chars

    def limit(self, unpacked: int) -> int:
        return min(self.cap, max(FLOOR, self.ratio * unpacked))


def unpacked_size(path: Path, kind: str, archive: zipfile.ZipFile | None = None) -> int:
    """The file's bytes once unpacked: its zip members' declared sizes together, else its own size."""
    if kind in ZIP_KINDS:
        try:
            if archive is not None:
                return sum(i.file_size for i in archive.infolist())
            with zipfile.ZipFile(path) as z:
                return sum(i.file_size for i in z.infolist())
        except (zipfile.BadZipFile, OSError, ValueError):
            pass
    try:
        return path.stat().st_size
    except OSError:
        return 0


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
    unpacked: int
    chars: int = 0
    parts: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, source: Source, archive: zipfile.ZipFile | None = None) -> Meter:
        return cls(source.rel, source.bound, unpacked_size(source.path, source.kind, archive))

    @property
    def limit(self) -> int:
        return self.bound.limit(self.unpacked)

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
                f"its {self.unpacked:,} unpacked, at least {FLOOR:,}, at most "
                f"max_text_chars={self.bound.cap:,}){again}: "
                "a file that repeats its parts (a decompression bomb?) or one too large to read; skipped, nothing of "
                "it "
                "stored"
            ),
        )
