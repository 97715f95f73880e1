"""What ragvps knows about embedding models: dimensions, input limits, task prefixes, chunk defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragvps.config import LOCAL_MODEL, Settings
from ragvps.errors import ConfigError, EmbedderError

if TYPE_CHECKING:
    from ragvps.embed.ollama import ModelInfo

SPECIAL_TOKENS = 2  # [CLS] and [SEP], which every BERT-style embedder adds to each input


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

    @property
    def input_room(self) -> int:
        """Model tokens a document's text may take: the limit less [CLS]/[SEP] and the document prefix."""
        return input_room(self.max_tokens, self.document_prefix)

    @property
    def identity(self) -> str:
        """What a stored vector depends on: model, prefixes and dimension."""
        return f"{self.name}|{self.document_prefix}|{self.query_prefix}|{self.dims}"


_MXBAI_QUERY = "Represent this sentence for searching relevant passages: "

KNOWN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(LOCAL_MODEL, 384, 256, chunk_size=200, chunk_overlap=30),
        ModelSpec("nomic-embed-text", 768, 2048, "search_document: ", "search_query: ", 400, 50),
        ModelSpec("all-minilm", 384, 256, chunk_size=200, chunk_overlap=30),
        ModelSpec("mxbai-embed-large", 1024, 512, "", _MXBAI_QUERY, 400, 50),
        ModelSpec("snowflake-arctic-embed", 1024, 512, "", _MXBAI_QUERY, 400, 50),
    )
}


def model_spec(name: str) -> ModelSpec | None:
    """The spec for an Ollama model name, ignoring a `:latest`-style tag."""
    return KNOWN_MODELS.get(name) or KNOWN_MODELS.get(name.split(":", 1)[0])


def spec_for(settings: Settings, info: ModelInfo | None = None) -> ModelSpec:
    """The configured embedder's model spec, without loading the model; a model ragvps has no entry for
    takes its dimension and input limit from `info` (what Ollama's /api/show said)."""
    e = settings.embed
    spec = model_spec(e.model_name)
    if spec is None and info is not None:
        spec = spec_from_server(info)
    if spec is None:
        known = ", ".join(name for name in KNOWN_MODELS if name != LOCAL_MODEL)
        raise ConfigError(
            f"ragvps has no entry for Ollama model {settings.embed.model_name!r} (setting embed_model) and did not "
            f"ask a server here; the commands that embed ask Ollama for it. Known without asking: {known}",
            settings=("embed_model",),
        )
    return dataclasses.replace(
        spec,
        name=settings.embed.model_name,
        document_prefix=spec.document_prefix if e.document_prefix is None else e.document_prefix,
        query_prefix=spec.query_prefix if e.query_prefix is None else e.query_prefix,
    )


def spec_from_server(info: ModelInfo) -> ModelSpec:
    """A spec from /api/show alone: its dimension and context length, no task prefixes, chunks that fit."""
    if not info.dims or not info.context_length:
        missing = "dimension" if not info.dims else "context length"
        raise EmbedderError(
            f"Ollama does not report the {missing} of model {info.name} (architecture "
            f"{info.architecture or 'unknown'}), and ragvps has no entry for it: upgrade Ollama, or use a model "
            f"ragvps knows ({', '.join(n for n in KNOWN_MODELS if n != LOCAL_MODEL)})"
        )
    size = max(8, min(400, (info.context_length - SPECIAL_TOKENS) * 3 // 4))
    return ModelSpec(info.name, info.dims, info.context_length, chunk_size=size,
                     chunk_overlap=min(50, size // 8), known=False)


def input_room(max_tokens: int, prefix: str) -> int:
    """The one input-room rule: the model's limit less [CLS]/[SEP] and the prefix's own tokens."""
    from ragvps import tokens

    return max_tokens - SPECIAL_TOKENS - tokens.count(prefix)
