"""Plan: chunk, overlap, vector-size and token-budget arithmetic, decided before anything is embedded.

Pure functions over frozen dataclasses, so `ragvps stats` can put measured sizes beside planned ones.
The one exception is `measure`, which runs the real tokenizer and chunker over loaded documents.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Literal

from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.ingest.chunk import ChunkerConfig
    from ragvps.records import Document

VectorType = Literal["vector", "halfvec"]
VECTOR_TYPES: tuple[VectorType, ...] = ("vector", "halfvec")
BYTES_PER_DIM = {4: "float32", 2: "half", 1: "int8"}
MIB = 1 << 20
PER_100K = 100_000

COMPARE_OVERLAPS = ("0", "10%", "25%", "50%")
# Common embedding sizes; the first three are Ollama models ragvps knows (see models.KNOWN_MODELS).
COMMON_MODELS: tuple[tuple[str, int], ...] = (
    ("all-minilm", 384),
    ("nomic-embed-text", 768),
    ("mxbai-embed-large", 1024),
    ("hosted", 1536),  # e.g. OpenAI text-embedding-3-small
)

RAW_SIZE_NOTE = (
    "Raw vector size excludes the chunk text, metadata, row overhead, index structures (HNSW), replicas "
    "and update bloat; equal size does not mean equal retrieval quality."
)


# --- windows over a continuous stream -------------------------------------------------------------


@dataclass(frozen=True)
class WindowPlan:
    """A stream of `tokens` cut into windows of `size` starting every `size - overlap` tokens until
    the stream is covered; the last window may be shorter."""

    tokens: int
    size: int
    overlap: int = 0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise UsageError(f"tokens {self.tokens} must be zero or more", settings=("tokens",))
        if self.size < 1:
            raise UsageError(f"chunk_size {self.size} must be at least 1 token", settings=("chunk_size",))
        if self.overlap < 0:
            raise UsageError(f"overlap {self.overlap} must be zero or more", settings=("overlap",))
        if self.overlap >= self.size:
            raise UsageError(
                f"overlap {self.overlap} must be smaller than chunk_size {self.size}; "
                "a third of the size or less is usual", settings=("overlap", "chunk_size"),
            )

    @property
    def step(self) -> int:
        return self.size - self.overlap

    @property
    def chunks(self) -> int:
        if self.tokens == 0:
            return 0
        return 1 + max(0, math.ceil((self.tokens - self.size) / self.step))

    @property
    def last_length(self) -> int:
        """Length of the last window (the only one that can be shorter than `size`)."""
        return self.tokens - (self.chunks - 1) * self.step if self.chunks else 0

    @property
    def processed_tokens(self) -> int:
        """Tokens the embedder reads: the sum of the window lengths."""
        return (self.chunks - 1) * self.size + self.last_length if self.chunks else 0

    @property
    def repeated_tokens(self) -> int:
        return self.processed_tokens - self.tokens

    @property
    def overhead_pct(self) -> float:
        return 100 * self.repeated_tokens / self.tokens if self.tokens else 0.0

    def windows(self) -> Iterator[tuple[int, int]]:
        """The windows as [start, end) token offsets, lazily (a large stream has many)."""
        for i in range(self.chunks):
            start = i * self.step
            yield start, min(start + self.size, self.tokens)

    def lengths(self, limit: int = 20) -> list[int] | dict[str, list[int]]:
        """Every window length, or the first and last three when there are more than `limit`."""
        if self.chunks <= limit:
            return [end - start for start, end in self.windows()]
        return {"first": [self.size] * 3, "last": [self.size, self.size, self.last_length]}

    def warnings(self) -> list[str]:
        if 3 * self.overlap > self.size:
            return [
                f"overlap {self.overlap} is above a third of the chunk size {self.size}: that needs a reason "
                f"(it repeats {self.overhead_pct:.0f}% of the tokens); 10-20% is usual"
            ]
        return []


def parse_overlap(text: str, size: int) -> int:
    """An overlap as tokens ("200") or as a percentage of the chunk size ("12%", rounded half up)."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            pct = Decimal(raw[:-1].strip())
            if not 0 <= pct < 100:
                raise UsageError(f"overlap {text} must be a percentage from 0% to below 100%", settings=("overlap",))
            return int((pct * size / 100).to_integral_value(rounding=ROUND_HALF_UP))
        return int(raw)
    except (InvalidOperation, ValueError):
        hint = "a token count (200) or a percentage of the chunk size (12%)"
        raise UsageError(f"overlap {text!r} is not {hint}", settings=("overlap",)) from None


def check_input_limit(size: int, limit: int, model: str) -> None:
    """A window longer than the embedder reads would be cut off silently; refuse it."""
    if size > limit:
        raise UsageError(
            f"chunk_size {size} is above what {model} reads ({limit} tokens once [CLS]/[SEP] and its "
            f"document prefix are counted): use chunk_size {limit} or less", settings=("chunk_size",)
        )


def compare_overlaps(tokens: int, size: int, overlaps: Sequence[str] = COMPARE_OVERLAPS) -> list[WindowPlan]:
    """One plan per overlap (tokens or percentages of the size), in the order given, without repeats."""
    plans: list[WindowPlan] = []
    for text in overlaps:
        plan = WindowPlan(tokens, size, parse_overlap(text, size))
        if plan not in plans:
            plans.append(plan)
    return plans


# --- vector sizes ------------------------------------------------------------------------------------


def raw_vector_bytes(vectors: int, dims: int, bytes_per_dim: int = 4) -> int:
    """Vectors x dimensions x bytes per dimension (4 float32, 2 half, 1 int8), nothing else."""
    if bytes_per_dim not in BYTES_PER_DIM:
        raise UsageError(f"bytes_per_dim {bytes_per_dim} must be 4 (float32), 2 (half) or 1 (int8)",
                         settings=("bytes_per_dim",))
    return vectors * _dims(dims) * bytes_per_dim


def pgvector_bytes(dims: int, vector_type: VectorType = "vector") -> int:
    """Bytes one value of a pgvector column takes: 4*d+8 for vector, 2*d+8 for halfvec."""
    if vector_type not in VECTOR_TYPES:
        raise UsageError(f"vector type {vector_type!r} must be one of: {', '.join(VECTOR_TYPES)}")
    return (4 if vector_type == "vector" else 2) * _dims(dims) + 8


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


# --- token budget -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """Tokens a RAG deployment spends: the corpus embedded once, then three costs per question."""

    corpus_chunks: int
    tokens_per_chunk: int
    questions: int
    question_tokens: int = 20  # what the query embedding reads
    chunks_per_answer: int = 8
    prompt_tokens: int = 100  # prompt template plus the question, sent with the chunks
    answer_tokens: int = 400

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 0:
                raise UsageError(f"{name} {value} must be zero or more", settings=(name,))
        if self.questions < 1:
            raise UsageError(f"questions {self.questions} must be at least 1", settings=("questions",))

    @property
    def corpus_embed_tokens(self) -> int:
        return self.corpus_chunks * self.tokens_per_chunk

    @property
    def generation_input_per_question(self) -> int:
        return self.chunks_per_answer * self.tokens_per_chunk + self.prompt_tokens

    def totals(self) -> dict[str, int]:
        """Tokens over all the questions, by kind."""
        return {
            "embedding": self.questions * self.question_tokens,
            "generation_input": self.questions * self.generation_input_per_question,
            "generation_output": self.questions * self.answer_tokens,
        }

    def amortised(self, questions: int | None = None) -> float:
        """Corpus embedding tokens per question, spread over `questions` (default: the planned count)."""
        return self.corpus_embed_tokens / (questions or self.questions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": dict(vars(self)),
            "corpus_embed_tokens": self.corpus_embed_tokens,
            "per_question": {
                "embedding": self.question_tokens,
                "generation_input": self.generation_input_per_question,
                "generation_output": self.answer_tokens,
            },
            "totals": self.totals(),
            "amortised_embedding_per_question": {
                str(q): self.amortised(q) for q in (self.questions, 10 * self.questions)
            },
        }


# --- report pieces ------------------------------------------------------------------------------------


def summary(plan: WindowPlan, dims: int, bytes_per_dim: int = 4) -> dict[str, Any]:
    """The single-plan figures, as `ragvps plan --json` prints them."""
    return {
        "tokens": plan.tokens,
        "chunk_size": plan.size,
        "overlap": plan.overlap,
        "step": plan.step,
        "chunks": plan.chunks,
        "chunk_lengths": plan.lengths(),
        "last_chunk_length": plan.last_length,
        "processed_tokens": plan.processed_tokens,
        "repeated_tokens": plan.repeated_tokens,
        "overhead_pct": round(plan.overhead_pct, 2),
        "dims": dims,
        "bytes_per_dim": bytes_per_dim,
        "raw_vector_bytes": raw_vector_bytes(plan.chunks, dims, bytes_per_dim),
        "pgvector_bytes_per_vector": {t: pgvector_bytes(dims, t) for t in VECTOR_TYPES},
        "pgvector_column_bytes": {t: plan.chunks * pgvector_bytes(dims, t) for t in VECTOR_TYPES},
        "warnings": plan.warnings(),
        "note": RAW_SIZE_NOTE,
    }


def strip(plan: WindowPlan, rows: int = 4, width: int = 60) -> str:
    """A text diagram of the first windows: '=' tokens of one window only, 'x' shared with a neighbour."""
    wins = [w for _, w in zip(range(rows + 1), plan.windows(), strict=False)]
    if not wins:
        return "(no tokens, no windows)"
    shown = wins[:rows]
    span = shown[-1][1]

    def col(token: int) -> int:
        return round(token * width / span)

    labels = [f"#{i + 1} {a:,}-{b:,}" for i, (a, b) in enumerate(shown)]
    pad = max(map(len, labels)) + 2
    lines = [
        f"first {len(shown)} of {plan.chunks:,} windows, 1 char = {span / width:.4g} tokens; "
        "'=' in one window, 'x' shared with a neighbour"
    ]
    for i, (a, b) in enumerate(shown):
        cells = ["="] * max(1, col(b) - col(a))
        if i > 0 and wins[i - 1][1] > a:  # shared with the previous window
            for c in range(max(1, col(wins[i - 1][1]) - col(a))):
                cells[min(c, len(cells) - 1)] = "x"
        if i + 1 < len(wins) and wins[i + 1][0] < b:  # shared with the next window
            for c in range(max(1, col(b) - col(wins[i + 1][0]))):
                cells[max(len(cells) - 1 - c, 0)] = "x"
        lines.append(labels[i].ljust(pad) + " " * col(a) + "".join(cells))
    return "\n".join(lines)


def millions(n: float) -> str:
    """40000000 -> '40 M', 200000 -> '0.2 M'."""
    return f"{n / 1e6:,.4g} M"


def human_bytes(n: int) -> str:
    """6144 -> '6,144 bytes (6 KiB)'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n:,} bytes ({n / scale:,.4g} {unit})"
    return f"{n:,} bytes"


# --- measuring: real documents through the real chunker ----------------------------------------------


@dataclass(frozen=True)
class DocumentMeasure:
    doc_id: str
    windows: WindowPlan  # fixed-window arithmetic over this document alone
    chunks: int  # what the chunker produced
    chunk_tokens: int  # model tokens the chunker's output sends to the embedder (headings included)


@dataclass(frozen=True)
class Measurement:
    """The continuous-stream estimate next to per-document windows and the real chunker's output."""

    size: int
    overlap: int
    documents: tuple[DocumentMeasure, ...]

    @property
    def tokens(self) -> int:
        return sum(d.windows.tokens for d in self.documents)

    @property
    def stream(self) -> WindowPlan:
        return WindowPlan(self.tokens, self.size, self.overlap)

    @property
    def window_chunks(self) -> int:
        return sum(d.windows.chunks for d in self.documents)

    @property
    def window_processed(self) -> int:
        return sum(d.windows.processed_tokens for d in self.documents)

    @property
    def chunks(self) -> int:
        return sum(d.chunks for d in self.documents)

    @property
    def chunk_tokens(self) -> int:
        return sum(d.chunk_tokens for d in self.documents)

    def as_dict(self) -> dict[str, Any]:
        stream = self.stream
        return {
            "documents": len(self.documents),
            "tokens": self.tokens,
            "chunk_size": self.size,
            "overlap": self.overlap,
            "stream": {"chunks": stream.chunks, "processed_tokens": stream.processed_tokens},
            "per_document_windows": {"chunks": self.window_chunks, "processed_tokens": self.window_processed},
            "chunker": {"chunks": self.chunks, "chunk_tokens": self.chunk_tokens},
            "chunks_vs_stream": self.chunks - stream.chunks,
            "per_document": [
                {"doc_id": d.doc_id, "tokens": d.windows.tokens, "windows": d.windows.chunks,
                 "chunks": d.chunks, "chunk_tokens": d.chunk_tokens}
                for d in self.documents
            ],
        }


def measure(
    docs: Sequence[Document], config: ChunkerConfig, count: Callable[[str], int] | None = None
) -> Measurement:
    """Count each document's tokens and chunk it for real; boundaries make this differ from the stream."""
    from ragvps import tokens  # the tokenizer and chunker load only when something is measured
    from ragvps.ingest.chunk import chunk_document

    count = count or tokens.count
    WindowPlan(0, config.size, config.overlap)  # the same errors as the arithmetic modes
    measured = []
    for doc in docs:
        chunks = chunk_document(doc, config)
        measured.append(DocumentMeasure(
            doc.doc_id, WindowPlan(count(doc.text), config.size, config.overlap),
            len(chunks), sum(c.tokens for c in chunks),
        ))
    return Measurement(config.size, config.overlap, tuple(measured))
