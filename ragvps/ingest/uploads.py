"""Where uploaded files live: `KB_DIR/uploads/` is a folder of documents like any other (reindex re-syncs it),
and `KB_DIR/incoming/JOB/` holds a job's files until its worker moves each into place. A name sent by a
client never becomes a path as it is: `safe_name` reduces it to a relative path inside the uploads folder.

A job's staged files are on the disk of the server that took the upload, so a job is taken only by a worker of the
same data directory (`home_id`): two servers on two hosts, one database, each run the uploads sent to them, and
see each other's jobs (docs/scale-out.md)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import unicodedata
from pathlib import Path

from ragvps.errors import ConfigError, UsageError

UPLOADS = "uploads"
INCOMING = "incoming"
MAX_PART = 200  # characters of one path component kept
MAX_PART_BYTES = 240  # its bytes in UTF-8 (file systems take 255: room is left for a `~N` that makes it unique)
MAX_SUFFIX = 16  # an extension longer than this is not one worth keeping whole
MAX_DEPTH = 8  # folders kept in a name
_UNSAFE = re.compile(r"[\x00-\x1f\x7f<>:\"|?*]")
HOME_FILE = "home.id"  # in data_dir: which data directory a job's staged files are in


def home_id(data_dir: Path) -> str:
    """This data directory's id, made once (data_dir/home.id): a job queued here records it, and only workers whose
    data directory has the same id (this one, or the same folder shared by another host) take it."""
    path = data_dir / HOME_FILE
    try:
        found = path.read_text(encoding="ascii").strip()
        if found:
            return found
    except FileNotFoundError:
        pass
    except (OSError, UnicodeError) as exc:
        raise ConfigError(
            f"cannot read {path} ({exc.__class__.__name__}): make data_dir readable", settings=("data_dir",)
        ) from None
    made = secrets.token_hex(8)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{HOME_FILE}.{made}")
        part.write_text(made + "\n", encoding="ascii")
        os.link(part, path)  # the first of two processes starting at once wins; the other reads its id
    except FileExistsError:
        part.unlink(missing_ok=True)
        return home_id(data_dir)
    except OSError as exc:
        raise ConfigError(
            f"cannot write {path} ({exc.__class__.__name__}): make data_dir writable", settings=("data_dir",)
        ) from None
    part.unlink(missing_ok=True)
    return made


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
        parts.append(short(part))
    parts = parts[-MAX_DEPTH - 1 :]
    if not parts:
        raise UsageError(f"the file name {raw!r} has no usable name in it: send the file under a plain name")
    return "/".join(parts)


def short(part: str) -> str:
    """A path component cut to MAX_PART characters and MAX_PART_BYTES bytes, its extension kept."""
    if len(part) <= MAX_PART and len(part.encode()) <= MAX_PART_BYTES:
        return part
    stem, dot, ext = part.rpartition(".")
    suffix = dot + ext if stem and len(ext) < MAX_SUFFIX else ""
    stem = part[: len(part) - len(suffix)][: MAX_PART - len(suffix)]
    while len((stem + suffix).encode()) > MAX_PART_BYTES:
        stem = stem[:-1]
    return stem.rstrip(" .") + suffix


def unique(name: str, taken: set[str]) -> str:
    """`name` made unique among an upload's names so far (`taken`, to which it is added): a name sent twice, or
    a file where another's folder is (`a.md` beside `a.md/b.md`), gets `~2`, `~3`... on the part that clashes
    (before a file's extension)."""
    parts = name.split("/")
    for i in range(len(parts)):
        n = 1
        while _clashes("/".join(parts[: i + 1]), taken, last=i == len(parts) - 1):
            n += 1
            base = name.split("/")[i]
            stem, dot, ext = base.rpartition(".") if i == len(parts) - 1 and "." in base[1:] else (base, "", "")
            parts[i] = f"{stem}~{n}{dot}{ext}"
    out = "/".join(parts)
    taken.add(out)
    return out


def _clashes(prefix: str, taken: set[str], last: bool) -> bool:
    """A folder clashes with a file of that name; a file with a file or a folder of that name."""
    return prefix in taken or (last and any(t.startswith(prefix + "/") for t in taken))


def inside(folder: Path, name: str) -> Path:
    """`folder / name`, checked to stay inside `folder` (a symlink placed there does not lead out)."""
    try:
        target = (folder / name).resolve()
    except RuntimeError:  # a loop of symbolic links placed there (Python 3.11 and 3.12; 3.13 resolves it as is)
        raise UsageError(f"the file name {name!r} is a symbolic link that loops in the uploads folder") from None
    if not target.is_relative_to(folder.resolve()):
        raise UsageError(f"the file name {name!r} leads outside the uploads folder: send it under a plain name")
    return target


def place(staged: Path, uploads: Path, name: str) -> Path:
    """Move a staged upload to its name in the uploads folder; an older version of it waits aside (a hidden
    file, which no ingest reads) until the new one is stored (`settle`) or fails (`unplace`)."""
    target = inside(uploads, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file() and not target.is_symlink():
        os.replace(target, previous(target))
    try:
        os.replace(staged, target)
    except OSError:
        unplace(target, stored=True)
        raise
    return target


def previous(target: Path) -> Path:
    return target.with_name(f".{target.name}.previous")


def settle(uploads: Path, name: str) -> None:
    """The upload under `name` is stored: its older version goes."""
    previous(inside(uploads, name)).unlink(missing_ok=True)


def unplace(target: Path, stored: bool) -> None:
    """An upload that failed or was cancelled never stays to be stored by a later reindex: its older version
    comes back, or (with none, and nothing `stored` from it) the file goes."""
    if previous(target).is_file():
        os.replace(previous(target), target)
    elif not stored:
        target.unlink(missing_ok=True)


def unplaceable(name: str, exc: Exception) -> str:
    """Why an upload could not be put under its name, without the server's paths."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return (
        f"{name}: cannot be stored under this name ({why}): a file and a folder of the same name in the uploads "
        "folder, or a name too long for its file system; rename it and upload it again"
    )


def discard(kb_dir: Path, job: str) -> None:
    """A job's staged files that no worker will move (cancelled, or all placed)."""
    shutil.rmtree(staging_dir(kb_dir, job), ignore_errors=True)
