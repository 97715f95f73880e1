"""Vector sizes: raw bytes, a pgvector column's bytes per value, and the common models' sizes."""

from __future__ import annotations

from dataclasses import dataclass

from ragvps.config import VectorType
from ragvps.embed.models import KNOWN_MODELS
from ragvps.errors import UsageError

BYTES_PER_VALUE: dict[VectorType, int] = {"vector": 4, "halfvec": 2}  # the column types a plan sizes
VECTOR_TYPES: tuple[VectorType, ...] = tuple(BYTES_PER_VALUE)
BYTES_PER_DIM = {4: "float32", 2: "half", 1: "int8"}
MIB = 1 << 20
PER_100K = 100_000

# The Ollama models `plan --compare` sizes (their dimensions from KNOWN_MODELS), and a hosted model's size.
COMMON_MODELS: tuple[tuple[str, int], ...] = (
    *((name, KNOWN_MODELS[name].dims) for name in ("all-minilm", "nomic-embed-text", "mxbai-embed-large")),
    ("hosted", 1536),  # e.g. OpenAI text-embedding-3-small
)

RAW_SIZE_NOTE = (
    "Raw vector size excludes the chunk text, metadata, row overhead, index structures (HNSW), replicas "
    "and update bloat; equal size does not mean equal retrieval quality."
)


def raw_vector_bytes(vectors: int, dims: int, bytes_per_dim: int = 4) -> int:
    """Vectors x dimensions x bytes per dimension (4 float32, 2 half, 1 int8), nothing else."""
    if bytes_per_dim not in BYTES_PER_DIM:
        raise UsageError(
            f"bytes_per_dim {bytes_per_dim} must be 4 (float32), 2 (half) or 1 (int8)", settings=("bytes_per_dim",)
        )
    return vectors * _dims(dims) * bytes_per_dim


def pgvector_bytes(dims: int, vector_type: VectorType = "vector") -> int:
    """Bytes one value of a pgvector column takes: 4*d+8 for vector, 2*d+8 for halfvec."""
    if vector_type not in VECTOR_TYPES:
        raise UsageError(f"vector type {vector_type!r} must be one of: {', '.join(VECTOR_TYPES)}")
    return BYTES_PER_VALUE[vector_type] * _dims(dims) + 8


def _dims(dims: int) -> int:
    if dims < 1:
        raise UsageError(f"dims {dims} must be at least 1", settings=("dims",))
    return dims


def mib(n_bytes: int) -> float:
    return n_bytes / MIB


@dataclass(frozen=True)
class ModelSize:
    name: str
    dims: int

    def bytes_per_vector(self, vector_type: VectorType = "vector") -> int:
        return pgvector_bytes(self.dims, vector_type)

    def mib_for(self, vectors: int, vector_type: VectorType = "vector") -> float:
        return mib(vectors * self.bytes_per_vector(vector_type))


def common_models() -> list[ModelSize]:
    return [ModelSize(name, dims) for name, dims in COMMON_MODELS]
