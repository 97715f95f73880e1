"""A bundle's manifest as a typed record: read from its JSON once, every field's shape checked there, so the code that
imports a bundle reads attributes, not a dict whose keys a forger chose (docs/bundle.md has the format)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragvps.errors import BadBundleError

FORMAT = "ragvps-bundle"
VERSION = 1
MANIFEST = "manifest.json"
SELF_SUM = "manifest_sha256"  # the manifest's own SHA-256, of its canonical JSON without this key (since issue 42)
VECTOR_TYPES = ("vector", "halfvec", "bit")
MAX_DIMS = 16000


@dataclass(frozen=True)
class Member:
    """A file of the bundle: its size and SHA-256, checked before anything is written."""

    size: int
    sha256: str


@dataclass(frozen=True)
class VectorSetEntry:
    """One embedding set: its model and shape, and the members holding its chunk ids and vectors."""

    id: int
    model: str
    identity: str
    dims: int
    vector_type: str
    active: bool
    count: int
    ids: str  # member: int64 chunk ids, in chunk id order
    vectors: str  # member: float32 vectors, little-endian, in the same order
    chunker: object = None


@dataclass(frozen=True)
class Manifest:
    """What a bundle says of itself. `raw` is the JSON as read (its checksum covers it, unknown keys included)."""

    kb_name: str
    kb_settings: dict[str, object]
    documents: int
    chunks: int
    tables: dict[str, str]  # table -> its JSON Lines member
    vector_sets: tuple[VectorSetEntry, ...]
    members: dict[str, Member]
    probe: dict[str, Any] | None = None  # a backup's search probe (app/probe.py), when it has no gold questions
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def active_set(self) -> VectorSetEntry | None:
        return next((s for s in self.vector_sets if s.active), None)

    @classmethod
    def read(cls, path: Path, raw: bytes) -> Manifest:
        """The manifest of the bundle at `path` from its bytes; a BadBundleError names what is wrong."""
        try:
            data = json.loads(raw)
        except ValueError:
            raise bad(path, f"{MANIFEST} is not valid JSON") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise bad(path, f"{MANIFEST} does not say format {FORMAT!r}: not a ragvps bundle")
        if data.get("version") != VERSION:
            raise BadBundleError(
                f"{path}: bundle format version {data.get('version')!r} is not one this ragvps "
                f"reads (it reads version {VERSION}); import it with the ragvps release that made "
                "it, or a newer one; nothing was written"
            )
        if SELF_SUM in data and data[SELF_SUM] != manifest_sum(data):
            raise bad(path, f"{MANIFEST} fails its own checksum ({SELF_SUM}): the manifest is corrupt or was altered")
        return cls(
            *_kb(path, data.get("kb")),
            *_counts(path, data.get("counts")),
            _tables(path, data.get("tables")),
            tuple(_vector_set(path, s) for s in _list(path, data.get("vector_sets"), "vector_sets")),
            _members(path, data.get("members")),
            _probe(data.get("probe")),
            data,
        )


def manifest_sum(manifest: dict[str, Any]) -> str:
    """The SHA-256 of a manifest's canonical JSON (sorted keys, no spaces), its own checksum left out."""
    canonical = {k: v for k, v in manifest.items() if k != SELF_SUM}
    return hashlib.sha256(
        json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()


def bad(path: Path, problem: str) -> BadBundleError:
    return BadBundleError(
        f"{path}: {problem}; nothing was written. Take the bundle again (`ragvps export` or "
        "`ragvps backup`) or use another copy"
    )


def _kb(path: Path, kb: object) -> tuple[str, dict[str, object]]:
    if not isinstance(kb, dict) or not isinstance(kb.get("name"), str) or not isinstance(kb.get("settings", {}), dict):
        raise bad(path, f"{MANIFEST} names no knowledge base (kb.name, kb.settings)")
    return kb["name"], dict(kb.get("settings", {}))


def _counts(path: Path, counts: object) -> tuple[int, int]:
    if not isinstance(counts, dict) or not all(_count(counts.get(k)) for k in ("documents", "chunks")):
        raise bad(path, f"{MANIFEST} does not count its documents and chunks")
    return counts["documents"], counts["chunks"]


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tables(path: Path, tables: object) -> dict[str, str]:
    if not isinstance(tables, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tables.items()):
        raise bad(path, f"{MANIFEST} lists its tables without their members")
    return dict(tables)


def _list(path: Path, value: object, name: str) -> list[object]:
    if not isinstance(value, list):
        raise bad(path, f"{MANIFEST}'s {name} is not a list")
    return value


def _vector_set(path: Path, s: object) -> VectorSetEntry:
    ok = (
        isinstance(s, dict)
        and s.get("vector_type") in VECTOR_TYPES
        and _count(s.get("dims"))
        and 0 < s["dims"] <= MAX_DIMS
        and _count(s.get("count"))
        and _count(s.get("id"))
        and all(isinstance(s.get(k), str) for k in ("model", "identity", "ids", "vectors"))
    )
    if not ok:
        raise BadBundleError(f"{path}: a vector set in the manifest is incomplete ({s!r:.200}); nothing was written")
    assert isinstance(s, dict)
    return VectorSetEntry(
        s["id"],
        s["model"],
        s["identity"],
        s["dims"],
        s["vector_type"],
        bool(s.get("active")),
        s["count"],
        s["ids"],
        s["vectors"],
        s.get("chunker"),
    )


def _members(path: Path, members: object) -> dict[str, Member]:
    if not isinstance(members, dict) or not all(
        isinstance(m, dict) and _count(m.get("size")) and isinstance(m.get("sha256"), str) for m in members.values()
    ):
        raise bad(path, f"{MANIFEST} lists its members without sizes and checksums")
    return {str(name): Member(m["size"], m["sha256"]) for name, m in members.items()}


def _probe(probe: object) -> dict[str, Any] | None:
    return probe if isinstance(probe, dict) else None
