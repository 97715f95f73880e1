"""The records an answer is made of: what a generation cost (`Usage`), a quoted sentence (`Quote`), a cited
source (`Citation`). Frozen, built by keyword; their JSON is `to_json()`, read back with `from_json()`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from ragvps.generate.prompt import Source
from ragvps.records import cite_label, fields_dict

Json = Mapping[str, object]


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float | str) else 0


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider read from its prompt cache
    cache_creation_tokens: int = 0  # prompt tokens written to it (Anthropic)
    # The provider reported no usage (llama.cpp's server in a stream): the tokens were counted here, with
    # tiktoken, from the prompt sent and the text received: an estimate, not the provider's own figure.
    counted: bool = False

    def __add__(self, other: Usage) -> Usage:
        summed = {f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self) if f.name != "counted"}
        return Usage(**summed, counted=self.counted or other.counted)

    def to_json(self) -> dict[str, object]:
        return fields_dict(self)

    @classmethod
    def from_json(cls, data: Json | None) -> Usage:
        data = data or {}
        counts = {f.name: _int(data.get(f.name, 0)) for f in fields(cls) if f.name != "counted"}
        return cls(**counts, counted=bool(data.get("counted", False)))

    def described(self) -> str:
        """In words, for a person: `1,234 prompt tokens (0 cached), 56 answer tokens`; counted ones say so."""
        how = " (counted by ragvps: the LLM server reported none)" if self.counted else ""
        return (
            f"{self.prompt_tokens:,} prompt tokens ({self.cached_tokens:,} cached), {self.completion_tokens:,} "
            f"answer tokens{how}"
        )


@dataclass(frozen=True)
class ToolCall:
    """A function call the LLM asked for (a chat client offered it tools): its id, name and JSON arguments."""

    id: str
    name: str
    arguments: str

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Quote:
    """An extractive answer's sentence: its source's number, its span in the source document, its score."""

    number: int
    chunk_id: str
    path: str
    start: int
    end: int
    text: str
    score: float
    command: bool = False  # a command line (answers "how do I run ...")

    def to_json(self) -> dict[str, object]:
        return fields_dict(self)

    @classmethod
    def from_json(cls, data: Json) -> Quote:
        return cls(
            number=_int(data["number"]),
            chunk_id=str(data["chunk_id"]),
            path=str(data["path"]),
            start=_int(data["start"]),
            end=_int(data["end"]),
            text=str(data["text"]),
            score=float(str(data["score"])),
            command=bool(data.get("command", False)),
        )


@dataclass(frozen=True)
class Citation:
    """A valid `[n]` marker: the number and the source it names (not a copy of its fields)."""

    source: Source

    @property
    def number(self) -> int:
        return self.source.number

    @property
    def chunk_id(self) -> str:
        return self.source.chunk_id

    @property
    def path(self) -> str:
        return self.source.path

    @property
    def heading_path(self) -> str:
        return self.source.heading_path

    @property
    def start(self) -> int:
        return self.source.start

    @property
    def end(self) -> int:
        return self.source.end

    @property
    def pages(self) -> tuple[int, ...]:
        return tuple(self.source.pages)

    @property
    def label(self) -> str:
        """Where the cited text is, as a person cites it: `report.pdf p. 12`."""
        return cite_label(self.path, self.pages)

    def to_json(self) -> dict[str, object]:
        pages = {"pages": list(self.pages)} if self.pages else {}  # only a PDF's chunks have pages
        return {
            "number": self.number,
            "chunk_id": self.chunk_id,
            "path": self.path,
            "heading_path": self.heading_path,
            "start": self.start,
            "end": self.end,
            **pages,
        }


def source_json(source: Source) -> dict[str, object]:
    data = fields_dict(source)
    if not source.pages:  # only a PDF's chunks have pages: other sources' JSON is as it was
        del data["pages"]
    return data


def source_from_json(data: Json) -> Source:
    return Source(
        number=_int(data["number"]),
        chunk_id=str(data["chunk_id"]),
        path=str(data["path"]),
        heading_path=str(data["heading_path"]),
        start=_int(data["start"]),
        end=_int(data["end"]),
        score=float(str(data["score"])),
        text=str(data["text"]),
        evidence=float(str(data.get("evidence", 0.0))),
        pages=tuple(_int(p) for p in data.get("pages") or ()),  # type: ignore[attr-defined]
    )
