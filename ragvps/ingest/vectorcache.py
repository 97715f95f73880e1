"""The embed stage's results on disk: vectors keyed by model and chunk hash, in one append-only file per model."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ragvps.records import Chunk

if TYPE_CHECKING:
    from ragvps.db.store import Vectors


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


class VectorCache:
    """An append-only file of (sha256 digest, float32 vector) records for one model identity.

    Each batch is appended and fsynced, so a killed run loses at most the batch in flight; a torn
    last record is cut off when opening. Vectors are read through a memory map, never all loaded.
    """

    def __init__(self, data_dir: Path, identity: str, dims: int):
        slug = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.folder = data_dir / "embeddings" / slug
        self.dims = dims
        self.identity = identity
        self.record = np.dtype([("hash", "u1", (32,)), ("vec", "<f4", (dims,))])
        self._index: dict[bytes, int] | None = None
        self._map: np.memmap | None = None
        self._records = 0  # records in the file; a hash added twice keeps its latest row

    @property
    def path(self) -> Path:
        return self.folder / "vectors.f32"

    def _load(self) -> dict[bytes, int]:
        if self._index is not None:
            return self._index
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = self.folder / "identity.json"
        if not meta.exists():
            _atomic_write(meta, json.dumps({"identity": self.identity, "dims": self.dims}).encode())
        self._index = {}
        if self.path.exists():
            size = self.path.stat().st_size
            whole = size - size % self.record.itemsize
            if whole != size:
                with self.path.open("r+b") as f:  # a torn record from an interrupted run
                    f.truncate(whole)
            if whole:
                hashes = np.memmap(self.path, dtype=self.record, mode="r")["hash"]
                self._index = {h.tobytes(): i for i, h in enumerate(hashes)}
                self._records = len(hashes)
        return self._index

    def missing(self, hashes: Iterable[str]) -> list[str]:
        """The distinct hashes without a cached vector, in first-seen order."""
        index = self._load()
        seen: set[str] = set()
        out = []
        for h in hashes:
            if h not in seen and bytes.fromhex(h) not in index:
                seen.add(h)
                out.append(h)
        return out

    def add(self, hashes: Sequence[str], vectors: np.ndarray) -> None:
        index = self._load()
        if vectors.shape != (len(hashes), self.dims):
            raise ValueError(f"expected {len(hashes)} x {self.dims} vectors, got {vectors.shape}")
        batch = np.zeros(len(hashes), dtype=self.record)
        batch["hash"] = np.frombuffer(b"".join(bytes.fromhex(h) for h in hashes), dtype=np.uint8).reshape(-1, 32)
        batch["vec"] = vectors
        with self.path.open("ab") as f:
            f.write(batch.tobytes())
            f.flush()
            os.fsync(f.fileno())
        for i, h in enumerate(hashes):
            index[bytes.fromhex(h)] = self._records + i
        self._records += len(hashes)

    def get(self, hashes: Sequence[str]) -> np.ndarray:
        """The cached vectors for these hashes, in order (KeyError for one not cached)."""
        index = self._load()
        rows = [index[bytes.fromhex(h)] for h in hashes]
        if self._map is None or len(self._map) < self._records:
            self._map = np.memmap(self.path, dtype=self.record, mode="r")
        return np.asarray(self._map["vec"][rows], dtype=np.float32)

    def get_some(self, hashes: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector for each hash, or None where there is none."""
        index = self._load()
        found = [h for h in hashes if bytes.fromhex(h) in index]
        vectors = dict(zip(found, self.get(found), strict=True)) if found else {}
        return [vectors.get(h) for h in hashes]

    def of_chunks(self, chunks: Sequence[Chunk], deferred: bool) -> Vectors:
        """The chunks' cached vectors, in order; deferred, None for a chunk not cached (it is queued for a
        worker)."""
        if deferred:
            return self.get_some([c.content_hash for c in chunks])
        if not chunks:
            return np.zeros((0, self.dims), dtype=np.float32)
        return self.get([c.content_hash for c in chunks])

    def __len__(self) -> int:
        return len(self._load())
