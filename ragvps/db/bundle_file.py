"""The bundle file (docs/bundle.md): a plain tar written member by member, never held in memory, and read back
only after every member has been checked against the manifest.

Writing: each member's header is written as a placeholder, its data streamed through a SHA-256, then the header
rewritten with the real size, so no member is spooled or sized in advance. The manifest, holding every other
member's size and checksum, is the last member. The file is written as FILE.part and renamed when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from ragvps.db.bundle_manifest import FORMAT, MANIFEST, SELF_SUM, VERSION, Manifest, bad, manifest_sum
from ragvps.errors import BadBundleError

__all__ = ["FORMAT", "VERSION", "Bundle", "BundleWriter", "lines", "manifest_sum", "open_bundle", "safe_name"]

BLOCK = 512
_FLUSH = 1 << 20


class MemberSink:
    """Where one member's bytes go: buffered, hashed, counted."""

    def __init__(self, out: IO[bytes]):
        self._out, self._buffer = out, bytearray()
        self.sha, self.size = hashlib.sha256(), 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data
        if len(self._buffer) >= _FLUSH:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self.sha.update(self._buffer)
            self._out.write(self._buffer)
            self.size += len(self._buffer)
            self._buffer = bytearray()


class BundleWriter:
    """A tar written member by member into PATH.part, renamed to PATH by `finish`."""

    def __init__(self, path: Path):
        self.path, self.part = path, path.with_name(path.name + ".part")
        self._out: IO[bytes] = open(self.part, "wb")  # noqa: SIM115 - closed by finish/abort
        self.members: dict[str, dict[str, object]] = {}

    @contextmanager
    def member(self, name: str) -> Iterator[MemberSink]:
        start = self._out.tell()
        self._out.write(b"\0" * BLOCK)
        sink = MemberSink(self._out)
        yield sink
        sink.flush()
        self._out.write(b"\0" * (-sink.size % BLOCK))
        end = self._out.tell()
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = sink.size, int(time.time()), 0o644
        header = info.tobuf(format=tarfile.GNU_FORMAT)
        assert len(header) == BLOCK, name  # short names only: one header block
        self._out.seek(start)
        self._out.write(header)
        self._out.seek(end)
        self.members[name] = {"size": sink.size, "sha256": sink.sha.hexdigest()}

    def finish(self, manifest: dict[str, object]) -> int:
        """Write the manifest (with every member's size and checksum) last, close, rename; the file's size."""
        whole = manifest | {"members": self.members}
        whole[SELF_SUM] = manifest_sum(whole)
        with self.member(MANIFEST) as sink:
            sink.write(json.dumps(whole, indent=1, ensure_ascii=False).encode())
        self._out.write(b"\0" * (2 * BLOCK))
        self._out.flush()
        os.fsync(self._out.fileno())
        size = self._out.tell()
        self._out.close()
        os.replace(self.part, self.path)
        return size

    def abort(self) -> None:
        self._out.close()
        self.part.unlink(missing_ok=True)


@dataclass(frozen=True)
class Bundle:
    """A bundle whose members have all been checked; `open(name)` reads one."""

    path: Path
    manifest: Manifest
    id: str  # sha256 of the manifest: names the scratch schema of an import, so a rerun finds it
    _tar: tarfile.TarFile
    _members: dict[str, tarfile.TarInfo]
    rows: dict[str, int]  # lines of each JSON Lines member, counted while its checksum was checked

    def open(self, name: str) -> IO[bytes]:
        handle = self._tar.extractfile(self._members[name])
        assert handle is not None
        return handle

    def has(self, name: str) -> bool:
        return name in self._members

    def size(self, name: str) -> int:
        return self._members[name].size

    def close(self) -> None:
        self._tar.close()


def safe_name(name: str) -> bool:
    """A member name that stays inside the bundle: relative, no '..', no backslash, no drive letter."""
    pure = PurePosixPath(name)
    return (
        bool(name)
        and not pure.is_absolute()
        and ".." not in pure.parts
        and "\\" not in name
        and ":" not in name
        and name == str(pure)
    )


def open_bundle(path: Path, progress: Callable[[str, int, int], None] | None = None) -> Bundle:
    """Open a bundle and check all of it (names, manifest, version, every member's size and SHA-256) before the
    caller writes anything; a BadBundleError says what is wrong."""
    if not path.is_file():
        raise BadBundleError(f"{path} is not a file: name a bundle made by `ragvps export`", kind="usage")
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 - the Bundle closes it
        listed = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise bad(path, f"not a readable tar ({exc})") from None
    try:
        return _checked(path, tar, listed, progress)
    except BaseException:
        tar.close()
        raise


def _checked(
    path: Path, tar: tarfile.TarFile, listed: list[tarfile.TarInfo], progress: Callable[[str, int, int], None] | None
) -> Bundle:
    members: dict[str, tarfile.TarInfo] = {}
    for info in listed:
        if not safe_name(info.name):
            raise bad(
                path,
                f"member name {info.name!r} would point outside the bundle: it was not made by ragvps or was altered",
            )
        if not info.isfile() or info.name in members:
            raise bad(path, f"member {info.name!r} is not a single regular file")
        members[info.name] = info
    if MANIFEST not in members:
        raise bad(path, f"no {MANIFEST} at its end: the file is truncated or is not a ragvps bundle")
    raw = _read_all(path, tar, members[MANIFEST])
    manifest = Manifest.read(path, raw)
    declared = manifest.members
    extra = sorted(set(members) - set(declared) - {MANIFEST})
    missing = sorted(set(declared) - set(members))
    if missing:
        raise bad(path, f"member {missing[0]} is missing ({len(missing)} missing)")
    if extra:
        raise bad(path, f"member {extra[0]!r} is not in the manifest")
    total, done, rows = sum(m.size for m in declared.values()), 0, {}
    for name, want in declared.items():
        if members[name].size != want.size:
            raise bad(path, f"member {name} holds {members[name].size} bytes, the manifest says {want.size}")
        digest, rows[name] = _sha256(path, tar, members[name], _reporter(progress, done, total))
        if digest != want.sha256:
            raise bad(
                path,
                f"member {name} fails its checksum (sha256 {digest[:12]}..., the manifest says "
                f"{want.sha256[:12]}...): the file is corrupt",
            )
        done += want.size
    return Bundle(path, manifest, hashlib.sha256(raw).hexdigest(), tar, members, rows)


def _reporter(progress: Callable[[str, int, int], None] | None, done: int, total: int) -> Callable[[int], object]:
    return (lambda n: progress("verify", done + n, total)) if progress else (lambda n: None)


def _read_all(path: Path, tar: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    try:
        handle = tar.extractfile(info)
        assert handle is not None
        data = handle.read()
    except (tarfile.TarError, OSError) as exc:
        raise bad(path, f"member {info.name} cannot be read ({exc}): the file is truncated") from None
    if len(data) != info.size:
        raise bad(path, f"member {info.name} is cut short: the file is truncated")
    return data


def _sha256(path: Path, tar: tarfile.TarFile, info: tarfile.TarInfo, seen: Callable[[int], object]) -> tuple[str, int]:
    """The member's SHA-256, and its lines (for a JSON Lines member: its rows)."""
    sha, n, lines = hashlib.sha256(), 0, 0
    try:
        handle = tar.extractfile(info)
        assert handle is not None
        while block := handle.read(_FLUSH):
            sha.update(block)
            n += len(block)
            lines += block.count(b"\n")
            seen(n)
    except (tarfile.TarError, OSError) as exc:
        raise bad(path, f"member {info.name} cannot be read ({exc}): the file is truncated") from None
    if n != info.size:
        raise bad(path, f"member {info.name} is cut short: the file is truncated")
    return sha.hexdigest(), lines


def lines(handle: IO[bytes], batch_bytes: int = 4 << 20) -> Iterator[list[bytes]]:
    """A JSON Lines member in batches of whole lines (about `batch_bytes` each)."""
    batch: list[bytes] = []
    size = 0
    for line in handle:
        if line.strip():
            batch.append(line.rstrip(b"\n"))
            size += len(line)
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
