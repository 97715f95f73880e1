"""Settings: defaults < ragvps.toml < RAGVPS_* environment < CLI flags, in one frozen object, grouped by concern.

Every setting has one flat name (`chunk_size`), which is its key in `ragvps.toml`, its environment variable
(`RAGVPS_CHUNK_SIZE`) and the name errors use; in code it lives in its group (`settings.chunk.size`). The flat
name is the attribute, or the attribute after a word naming its group (`index_min_rows`, `ollama_timeout`); a
group's `kind` is named for what it chooses (`embedder`). Each field declares its facts beside it (`setting(...)`:
flat name, range, secret, choices, old names); the tables of flat names are built from them.

The package: `groups` (each group's fields and their facts), `schema` (the Settings object, the tables of flat names,
the coercion of one value), `load` (the layers and the checks across settings). Import from `ragvps.config`.
"""

from ragvps.config.groups import (
    CONFIG_FILE,
    DEFAULT_OLLAMA_MODEL,
    DEFAULT_OLLAMA_URL,
    FUSIONS,
    AuthSettings,
    ChunkMode,
    ChunkSettings,
    DatabaseSettings,
    EmbedSettings,
    GenerateSettings,
    IndexSettings,
    RerankSettings,
    SearchSettings,
    ServeSettings,
    SourceSettings,
    VectorType,
    setting,
)
from ragvps.config.load import load_settings
from ragvps.config.schema import ALIASES, SECRETS, SETTINGS, Settings, reranker_on

__all__ = [
    "ALIASES",
    "CONFIG_FILE",
    "DEFAULT_OLLAMA_MODEL",
    "DEFAULT_OLLAMA_URL",
    "FUSIONS",
    "SECRETS",
    "SETTINGS",
    "AuthSettings",
    "ChunkMode",
    "ChunkSettings",
    "DatabaseSettings",
    "EmbedSettings",
    "GenerateSettings",
    "IndexSettings",
    "RerankSettings",
    "SearchSettings",
    "ServeSettings",
    "Settings",
    "SourceSettings",
    "VectorType",
    "load_settings",
    "reranker_on",
    "setting",
]
