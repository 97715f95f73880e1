"""Where uploaded files live: `KB_DIR/uploads/` is a folder of documents like any other (reindex re-syncs it),
and `KB_DIR/incoming/JOB/` holds a job's files until its worker moves each into place. A name sent by a
client never becomes a path as it is: `safe_name` reduces it to a relative path inside the uploads folder."""

from __future__ import annotations

import os
import re
import shutil
import unicodedata
from pathlib import Path

from ragvps.errors import UsageError

UPLOADS = "uploads"
INCOMING = "incoming"
MAX_PART = 200  # characters of one path component kept (file systems take 255 bytes)
MAX_DEPTH = 8  # folders kept in a name
_UNSAFE = re.compile(r"[\x00-\x1f\x7f<>:\"|?*]")


def uploads_dir(kb_dir: Path) -> Path:
    return kb_dir / UPLOADS


def staging_dir(kb_dir: Path, job: str) -> Path:
    return kb_dir / INCOMING / job


def safe_name(raw: str) -> str:
    """A client's file name as a relative POSIX path with no way out of the folder it is put in: separators
    of either kind split it, `..`, `.` and empty parts go, a leading dot (a hidden file) becomes `_`, control
    and reserved characters become `_`. A NUL byte is refused: no honest client sends one."""
    if "\x00" in raw:
        shown = raw.replace("\x00", "\\0")
        raise UsageError(f"the file name {shown!r} holds a NUL byte: send the file under a plain name")
    name = unicodedata.normalize("NFC", raw)
    parts = []
    for part in re.split(r"[\\/]+", name):
        part = _UNSAFE.sub("_", part).strip().rstrip(".")
        if part in ("", ".", ".."):
            continue
        if part.startswith("."):
            part = "_" + part[1:]
        parts.append(part[:MAX_PART])
    parts = parts[-MAX_DEPTH - 1:]
    if not parts:
        raise UsageError(f"the file name {raw!r} has no usable name in it: send the file under a plain name")
    return "/".join(parts)


def inside(folder: Path, name: str) -> Path:
    """`folder / name`, checked to stay inside `folder` (a symlink placed there does not lead out)."""
    target = (folder / name).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise UsageError(f"the file name {name!r} leads outside the uploads folder: send it under a plain name")
    return target


def place(staged: Path, uploads: Path, name: str) -> Path:
    """Move a staged upload to its name in the uploads folder (replacing an older version at once)."""
    target = inside(uploads, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, target)
    return target


def discard(kb_dir: Path, job: str) -> None:
    """A job's staged files that no worker will move (cancelled, or all placed)."""
    shutil.rmtree(staging_dir(kb_dir, job), ignore_errors=True)
