"""What ragvps knows about embedding models: dimensions, input limits, task prefixes, chunk defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ragvps.config import LOCAL_MODEL, Settings
from ragvps.errors import ConfigError

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


def spec_for(settings: Settings) -> ModelSpec:
    """The configured embedder's model spec, without loading the model."""
    e = settings.embed
    spec = model_spec(e.model_name)
    if spec is None:
        known = ", ".join(name for name in KNOWN_MODELS if name != LOCAL_MODEL)
        raise ConfigError(
            f"ragvps does not know the dimension and input limit of Ollama model {settings.embed.model_name!r} "
            f"(setting embed_model); use one of: {known}", settings=("embed_model",)
        )
    return dataclasses.replace(
        spec,
        name=settings.embed.model_name,
        document_prefix=spec.document_prefix if e.document_prefix is None else e.document_prefix,
        query_prefix=spec.query_prefix if e.query_prefix is None else e.query_prefix,
    )


def input_room(max_tokens: int, prefix: str) -> int:
    """The one input-room rule: the model's limit less [CLS]/[SEP] and the prefix's own tokens."""
    from ragvps import tokens

    return max_tokens - SPECIAL_TOKENS - tokens.count(prefix)
