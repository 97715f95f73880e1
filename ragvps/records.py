"""Plain records every stage may import: a document, a chunk of it, an embedding model's facts.

They hold data and derive from it; nothing here imports a stage, a driver or a model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, fields
from typing import Any

from ragvps import tokens

KB_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")  # a knowledge base's name (never read as a flag)
SPECIAL_TOKENS = 2  # [CLS] and [SEP], which every BERT-style embedder adds to each input


@dataclass(frozen=True)
class Document:
    doc_id: str  # what a person or a qrels file calls it: the relative path, or a JSONL line's _id
    source: str  # the file it came from, relative to the ingested folder (posix)
    title: str
    text: str
    kind: str
    metadata: dict[str, object] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(f"{self.title}\x00{self.text}".encode()).hexdigest()


@dataclass(frozen=True)
class Chunk:
    doc_id: str
    seq: int
    heading_path: str  # for display: "Title > Section > Subsection"
    text: str
    start: int  # character offsets of `text` in the document
    end: int
    tokens: int  # model tokens of embed_text (without prefix and special tokens)
    llm_tokens: int  # cl100k_base tokens of text
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def chunk_id(self) -> str:
        return f"{self.doc_id}#{self.seq}"

    @property
    def embed_text(self) -> str:
        """What the embedder sees: the heading path (shortened if it was too long), then the text."""
        path = self.metadata.get("embed_heading_path", self.heading_path)
        return f"{path}\n\n{self.text}" if path else self.text

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.embed_text.encode()).hexdigest()


@dataclass(frozen=True)
class ModelSpec:
    name: str
    dims: int
    max_tokens: int  # input limit in the model's own tokens, [CLS]/[SEP] included
    document_prefix: str = ""
    query_prefix: str = ""
    chunk_size: int = 400  # default chunk size in tokens
    chunk_overlap: int = 50
    known: bool = True  # False: not in KNOWN_MODELS, dimension and limit as the Ollama server reported them
    # the query-chunk cosines mapped onto evidence 0..1 (retrieve/evidence.py): unrelated text below, as close as
    # the model gets above; measured per model (MiniLM's by bench/answer_quality.py)
    cosine_range: tuple[float, float] = (0.15, 0.75)
    # the vector leg's weight in fusion against the keyword leg's 1, which the setting vector_weight multiplies:
    # a model whose vector leg is weaker than BM25 in every language measured weighs less (bench/fusion_bench.py)
    fusion_weight: float = 1.0
    # the extractive answer maps its sentence cosines from cosine_range onto MiniLM's raw 0.15..0.75, on which its
    # floor was chosen, for a model whose cosines sit elsewhere (e5's start near 0.77); False: used as they are
    # (MiniLM's; USE's, which quoted fewer answering sentences when mapped: bench/chat_bench.py)
    map_quote_cosines: bool = False

    @property
    def input_room(self) -> int:
        """Model tokens a document's text may take: the limit less [CLS]/[SEP] and the document prefix."""
        return input_room(self.max_tokens, self.document_prefix)

    @property
    def identity(self) -> str:
        """What a stored vector depends on: model, prefixes and dimension."""
        return f"{self.name}|{self.document_prefix}|{self.query_prefix}|{self.dims}"


def input_room(max_tokens: int, prefix: str) -> int:
    """The one input-room rule: the model's limit less [CLS]/[SEP] and the prefix's own tokens."""
    return max_tokens - SPECIAL_TOKENS - tokens.count(prefix)


def fields_dict(record: object) -> dict[str, object]:
    """A dataclass record's fields by name, shallow: what a record's `to_json()` starts from."""
    return {f.name: getattr(record, f.name) for f in fields(record)}  # type: ignore[arg-type]


def kb_name_problem(name: str) -> str:
    """Why `name` is not a knowledge base's name."""
    return (
        f"{name!r} is not a knowledge base name: use 1 to 63 lower-case letters, digits and '-', "
        "starting with a letter or digit (like faq or hr-policies)"
    )


def cite_label(path: str, pages: tuple[int, ...] | list[int] = ()) -> str:
    """Where a chunk is, as a person cites it: `report.pdf p. 12`, `report.pdf pp. 12-13`, or the path alone."""
    if not pages:
        return path
    lo, hi = min(pages), max(pages)
    return f"{path} p. {lo}" if lo == hi else f"{path} pp. {lo}-{hi}"
