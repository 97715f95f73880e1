"""The chunk stage's results on disk: a chunk file per source file (the vectors, keyed by model and chunk hash, are
ingest/vectorcache.py's)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ragvps.records import Chunk, Document


@dataclass(frozen=True)
class ChunkFile:
    """The chunk stage's result for one source file: its documents and their chunks."""

    source: str
    file_hash: str
    chunker: str
    documents: list[Document]
    chunks: list[Chunk]


class ChunkArtifacts:
    """`DATA_DIR/chunks/<key>.jsonl`: a header line, one line per document, one line per chunk."""

    def __init__(self, data_dir: Path, root: Path):
        self.folder = data_dir / "chunks"
        self.root = root

    def path(self, source: str) -> Path:
        key = hashlib.sha256(f"{self.root}\x00{source}".encode()).hexdigest()[:24]
        return self.folder / f"{key}.jsonl"

    def read(self, source: str, file_hash: str, chunker: str) -> ChunkFile | None:
        """The stored result, if it was made from this exact file with these chunker settings."""
        docs, chunks = [], []
        try:
            with self.path(source).open(encoding="utf-8") as f:
                header = json.loads(f.readline())
                if header.get("file_hash") != file_hash or header.get("chunker") != chunker:
                    return None
                for line in f:
                    if "\\u0000" in line:  # written before NULs were removed: chunk again
                        return None
                    record = json.loads(line)
                    kind = record.pop("type")
                    if kind == "document":
                        docs.append(Document(**record))
                    elif kind == "chunk":
                        chunks.append(Chunk(**{k: v for k, v in record.items() if k in _CHUNK_FIELDS}))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None  # missing, torn or from another version: chunk again
        return ChunkFile(source, file_hash, chunker, docs, chunks)

    def write(self, result: ChunkFile) -> None:
        """Header, documents, then chunks (with their id and content hash), streamed to a temporary file."""
        header = {
            "source": result.source,
            "file_hash": result.file_hash,
            "chunker": result.chunker,
            "documents": len(result.documents),
            "chunks": len(result.chunks),
        }
        path = self.path(result.source)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8", newline="\n") as f:
            f.write(_line(header))
            for d in result.documents:
                f.write(_line({"type": "document", **asdict(d)}))
            for c in result.chunks:
                f.write(_line({"type": "chunk", "id": c.chunk_id, "content_hash": c.content_hash, **asdict(c)}))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)


_CHUNK_FIELDS = frozenset(f.name for f in fields(Chunk))


def _line(record: dict[str, object]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n"
