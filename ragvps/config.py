"""Settings: defaults < ragvps.toml < RAGVPS_* environment < CLI flags, in one frozen object, grouped by concern.

Every setting has one flat name (`chunk_size`), which is its key in `ragvps.toml`, its environment variable
(`RAGVPS_CHUNK_SIZE`) and the name errors use; in code it lives in its group (`settings.chunk.size`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from ragvps.errors import ConfigError, redact

EmbedderKind = Literal["local", "ollama"]
VectorType = Literal["vector", "halfvec", "bit"]
ChunkMode = Literal["structure", "fixed", "sentences"]
GeneratorKind = Literal["extractive", "openai", "anthropic", "ollama"]
RerankerKind = Literal["none", "api"]

CONFIG_FILE = "ragvps.toml"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
LOCAL_MODEL = "all-MiniLM-L6-v2-int8"
DEFAULT_OLLAMA_MODEL = "nomic-embed-text"


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = field(default="", repr=False)  # empty: the embedded PostgreSQL under data_dir
    data_dir: Path = Path(".ragvps")
    pool_size: int = 4  # connections a long-running server keeps

    @property
    def pg_dir(self) -> Path:
        return self.data_dir / "pg"


@dataclass(frozen=True)
class EmbedSettings:
    kind: EmbedderKind = "local"
    ollama_urls: tuple[str, ...] = (DEFAULT_OLLAMA_URL,)  # several hosts serving the same model
    model: str = DEFAULT_OLLAMA_MODEL  # the Ollama model; the local model is fixed
    batch_size: int = 32
    keep_alive: str = "30m"
    timeout: int = 120  # seconds for one /api/embed request
    retries: int = 4  # on connection errors, timeouts and 5xx, with exponential backoff
    document_prefix: str | None = None  # None: the model's own task prefix (nomic: "search_document: ")
    query_prefix: str | None = None
    threads: int = 0  # onnxruntime intra-op threads; 0: one per core
    sub_batch: int = 8  # local model: texts per onnxruntime call, which bounds peak memory
    defer: bool = False  # ingest queues chunks for `ragvps worker` instead of embedding them
    lease: int = 600  # seconds a worker holds a claimed batch before another worker may take it

    @property
    def model_name(self) -> str:
        return LOCAL_MODEL if self.kind == "local" else self.model

    @property
    def ollama_url(self) -> str:
        return self.ollama_urls[0]


@dataclass(frozen=True)
class ChunkSettings:
    mode: ChunkMode = "structure"
    size: int | None = None  # None: the embedder's default
    overlap: int | None = None


@dataclass(frozen=True)
class IndexSettings:
    vector_type: VectorType = "vector"
    hnsw_m: int = 16
    hnsw_ef_construction: int = 64
    min_rows: int = 5000  # below this, exact search; no HNSW index
    memory: str = "256MB"  # maintenance_work_mem for the index build's own session
    workers: int = 1  # max_parallel_maintenance_workers for the build (0: the leader alone)


@dataclass(frozen=True)
class SearchSettings:
    language: str = "english"  # the PostgreSQL text search configuration
    ef_search: int = 100
    candidates: int = 40
    keyword_budget: int = 300  # BM25 candidates come from the query's rarest words, up to this many chunks
    bit_rerank_depth: int = 200  # vector_type bit: Hamming candidates re-ranked by exact cosine (and its ef_search)
    top_k: int = 8
    rrf_k: int = 60


@dataclass(frozen=True)
class RerankSettings:
    kind: RerankerKind = "none"
    url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)
    candidates: int = 40
    timeout: int = 30


@dataclass(frozen=True)
class GenerateSettings:
    kind: GeneratorKind = "extractive"
    url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)
    temperature: float = 0.0
    timeout: int = 120
    retries: int = 3
    max_answer_tokens: int = 512  # the answer reserve, kept free of the context window
    context_window: int = 0  # 0: the model's known window (8,192 when unknown)
    encoding: str = ""  # tiktoken encoding; empty: o200k_base or cl100k_base by model
    answer_chunks: int = 8
    min_evidence: float = 0.35  # hits below this evidence are not sent; none left: the refusal (docs/answers.md)
    cache: bool = True


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    api_key_file: str = ""
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # Host names beyond loopback's the server answers to (a proxy's)
    max_body_bytes: int = 65536
    request_timeout: int = 120
    max_k: int = 100


@dataclass(frozen=True)
class Settings:
    database: DatabaseSettings = DatabaseSettings()
    embed: EmbedSettings = EmbedSettings()
    chunk: ChunkSettings = ChunkSettings()
    index: IndexSettings = IndexSettings()
    search: SearchSettings = SearchSettings()
    rerank: RerankSettings = RerankSettings()
    generate: GenerateSettings = GenerateSettings()
    serve: ServeSettings = ServeSettings()

    @classmethod
    def of(cls, **flat: Any) -> Settings:
        """Settings from flat names (`Settings.of(chunk_size=300)`), each checked as a flag would be."""
        return Settings().replace(**flat)

    def replace(self, **flat: Any) -> Settings:
        """A copy with some settings changed, by their flat names."""
        groups: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            group, attr = _where(name)
            groups.setdefault(group, {})[attr] = _coerce(name, value, "code")
        changed = {g: dataclasses.replace(getattr(self, g), **v) for g, v in groups.items()}
        return dataclasses.replace(self, **changed)

    def get(self, name: str) -> Any:
        group, attr = _where(name)
        return getattr(getattr(self, group), attr)


# The flat name of every setting -> (group, attribute). Names are what users write; keep them stable.
SETTINGS: dict[str, tuple[str, str]] = {
    "database_url": ("database", "url"), "data_dir": ("database", "data_dir"),
    "pool_size": ("database", "pool_size"),
    "embedder": ("embed", "kind"), "ollama_url": ("embed", "ollama_urls"), "embed_model": ("embed", "model"),
    "batch_size": ("embed", "batch_size"), "keep_alive": ("embed", "keep_alive"),
    "ollama_timeout": ("embed", "timeout"), "ollama_retries": ("embed", "retries"),
    "document_prefix": ("embed", "document_prefix"), "query_prefix": ("embed", "query_prefix"),
    "threads": ("embed", "threads"), "sub_batch": ("embed", "sub_batch"), "defer_embedding": ("embed", "defer"),
    "worker_lease": ("embed", "lease"),
    "chunk_mode": ("chunk", "mode"), "chunk_size": ("chunk", "size"), "chunk_overlap": ("chunk", "overlap"),
    "vector_type": ("index", "vector_type"), "hnsw_m": ("index", "hnsw_m"),
    "hnsw_ef_construction": ("index", "hnsw_ef_construction"), "index_min_rows": ("index", "min_rows"),
    "index_memory": ("index", "memory"), "index_workers": ("index", "workers"),
    "language": ("search", "language"), "ef_search": ("search", "ef_search"),
    "candidates": ("search", "candidates"), "keyword_budget": ("search", "keyword_budget"),
    "bit_rerank_depth": ("search", "bit_rerank_depth"),
    "top_k": ("search", "top_k"), "rrf_k": ("search", "rrf_k"),
    "reranker": ("rerank", "kind"), "reranker_url": ("rerank", "url"), "reranker_model": ("rerank", "model"),
    "reranker_api_key": ("rerank", "api_key"), "rerank_candidates": ("rerank", "candidates"),
    "reranker_timeout": ("rerank", "timeout"),
    "generator": ("generate", "kind"), "generator_url": ("generate", "url"),
    "generator_model": ("generate", "model"), "generator_api_key": ("generate", "api_key"),
    "temperature": ("generate", "temperature"), "generator_timeout": ("generate", "timeout"),
    "generator_retries": ("generate", "retries"), "answer_reserve": ("generate", "max_answer_tokens"),
    "context_window": ("generate", "context_window"), "token_encoding": ("generate", "encoding"),
    "answer_chunks": ("generate", "answer_chunks"), "answer_min_evidence": ("generate", "min_evidence"),
    "answer_cache": ("generate", "cache"),
    "host": ("serve", "host"), "port": ("serve", "port"), "api_keys": ("serve", "api_keys"),
    "api_key_file": ("serve", "api_key_file"), "cors_origins": ("serve", "cors_origins"),
    "allowed_hosts": ("serve", "allowed_hosts"),
    "max_body_bytes": ("serve", "max_body_bytes"), "request_timeout": ("serve", "request_timeout"),
    "max_k": ("serve", "max_k"),
}
# Old flat names still accepted, each with a warning naming its replacement.
RENAMED = {"answer_min_score": "answer_min_evidence"}
SECRETS = frozenset({"database_url", "reranker_api_key", "generator_api_key", "api_keys"})

_CHOICES: dict[str, tuple[str, ...]] = {
    "embedder": ("local", "ollama"),
    "vector_type": ("vector", "halfvec", "bit"),
    "chunk_mode": ("structure", "fixed", "sentences"),
    "generator": ("extractive", "openai", "anthropic", "ollama"),
    "reranker": ("none", "api"),
    "token_encoding": ("", "cl100k_base", "o200k_base"),
}
# Ranges PostgreSQL and pgvector enforce, checked before anything is built.
_RANGES: dict[str, tuple[float, float]] = {
    "hnsw_m": (2, 100), "hnsw_ef_construction": (4, 1000), "ef_search": (1, 1000), "batch_size": (1, 10_000),
    "sub_batch": (1, 1024), "ollama_timeout": (1, 86_400), "ollama_retries": (0, 20), "candidates": (1, 10_000),
    "keyword_budget": (1, 10_000_000), "top_k": (1, 10_000), "rrf_k": (0, 10_000), "threads": (0, 1024),
    "worker_lease": (1, 86_400), "index_min_rows": (0, 10**12), "index_workers": (0, 64), "pool_size": (1, 1000),
    "rerank_candidates": (1, 1000), "reranker_timeout": (1, 3600), "temperature": (0, 2),
    "generator_timeout": (1, 3600), "generator_retries": (0, 20), "answer_reserve": (16, 1_000_000),
    "context_window": (0, 10_000_000), "answer_chunks": (1, 1000), "port": (0, 65535),
    "max_body_bytes": (1024, 1 << 30), "request_timeout": (1, 86_400), "max_k": (1, 10_000),
    "bit_rerank_depth": (1, 1000),
    "answer_min_evidence": (0, 1),
}
_MEMORY = re.compile(r"^\s*\d+\s*(kB|MB|GB|TB)?\s*$")
_ENV_ALIASES = {"generator_api_key": ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}


def _renamed(name: str, origin: str = "code") -> str:
    if name in RENAMED:
        logging.getLogger(__name__).warning("setting %s (from %s) is now %s: it compares evidence, not the rank-only "
                                            "fused score; rename it", name, origin, RENAMED[name])
        return RENAMED[name]
    return name


def _where(name: str) -> tuple[str, str]:
    name = _renamed(name)
    try:
        return SETTINGS[name]
    except KeyError:
        raise ConfigError(f"unknown setting {name!r}; known: {', '.join(sorted(SETTINGS))}") from None


def _default(name: str) -> Any:
    group, attr = SETTINGS[name]
    return getattr(getattr(Settings(), group), attr)


def _field_type(name: str) -> str:
    group, attr = SETTINGS[name]
    cls = type(getattr(Settings(), group))
    return str(next(f.type for f in fields(cls) if f.name == attr))


def _coerce(name: str, value: Any, origin: str) -> Any:
    """Turn a raw value (from TOML, environment, a flag or code) into the setting's type."""
    default, typ = _default(name), _field_type(name)
    shown = "***" if name in SECRETS else repr(value)
    try:
        if typ.startswith("tuple"):
            items = value if isinstance(value, list | tuple) else str(value).split(",")
            value = tuple(str(v).strip() for v in items if str(v).strip())
        elif typ == "int | None":
            value = None if value in (None, "") else _whole(value)
        elif typ == "str | None":
            value = None if value is None else str(value)
        elif name == "data_dir":
            value = Path(value).expanduser()
        elif isinstance(default, bool):
            value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        elif isinstance(default, int):
            value = _whole(value)
        elif isinstance(default, float):
            value = float(value)
        else:
            value = str(value)
    except (TypeError, ValueError):
        what = "a whole number" if "int" in typ else "a number" if "float" in typ else f"a {typ}"
        raise ConfigError(f"setting {name}={shown} from {origin} is not valid: {name} must be {what}",
                          settings=(name,)) from None
    if name in _CHOICES and value not in _CHOICES[name]:
        allowed = " | ".join(c for c in _CHOICES[name] if c)
        raise ConfigError(f"setting {name}={value!r} from {origin} must be one of: {allowed}", settings=(name,))
    return value


def _whole(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)


def _normalise_ollama_host(host: str) -> str:
    """OLLAMA_HOST may be `0.0.0.0`, `host:port` or a URL; make it a URL a client can use."""
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = "http://" + host
    scheme, rest = host.split("://", 1)
    hostname = rest.split(":", 1)[0]
    if hostname in ("0.0.0.0", ""):
        rest = "127.0.0.1" + rest[len(hostname):]
    if ":" not in rest.split("/", 1)[0]:
        rest = rest + ":11434"
    return f"{scheme}://{rest}"


def load_settings(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    **flags: Any,
) -> Settings:
    """Build the settings from every layer; flags that are None are not given."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}

    named = config_file or (Path(env["RAGVPS_CONFIG"]) if env.get("RAGVPS_CONFIG") else None)
    path = named or Path(CONFIG_FILE)
    if path.is_file() or named is not None:
        origin = "--config" if config_file is not None else "RAGVPS_CONFIG" if named is not None else "the default"
        values |= _read_file(path, origin)

    if "RAGVPS_OLLAMA_URL" not in env and env.get("OLLAMA_HOST"):
        values["ollama_url"] = _coerce("ollama_url", _normalise_ollama_host(env["OLLAMA_HOST"]),
                                       "environment variable OLLAMA_HOST")
    for name, aliases in _ENV_ALIASES.items():
        for alias in aliases:
            if env.get(alias) and f"RAGVPS_{name.upper()}" not in env and name not in values:
                values[name] = env[alias]
    for old, new in RENAMED.items():
        key = "RAGVPS_" + old.upper()
        if env.get(key) and not env.get("RAGVPS_" + new.upper()):
            values[_renamed(old, f"environment variable {key}")] = _coerce(new, env[key], f"environment variable {key}")
    for name in SETTINGS:
        key = "RAGVPS_" + name.upper()
        if env.get(key, "") != "" or (name == "database_url" and key in env):
            values[name] = _coerce(name, env[key], f"environment variable {key}")

    for name, value in flags.items():
        if value is not None:
            values[name] = _coerce(name, value, f"option --{name.replace('_', '-')}")

    settings = Settings().replace(**values)
    _validate(settings)
    return settings


def _read_file(path: Path, origin: str) -> dict[str, Any]:
    if not path.exists():
        raise ConfigError(f"config file {path} (from {origin}) does not exist: create it, or leave {origin} out")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    table = data.get("ragvps", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: `ragvps` must be a table of settings ([ragvps] then "
                          f"`name = value` lines), not {type(table).__name__} {table!r}")
    values = {}
    for key, value in table.items():
        key = _renamed(key, str(path))
        if key not in SETTINGS:
            raise ConfigError(f"unknown setting {key!r} in {path}; known: {', '.join(sorted(SETTINGS))}")
        values[key] = _coerce(key, value, str(path))
    return values


def _validate(s: Settings) -> None:
    c = s.chunk
    if c.size is not None and c.size < 8:
        raise ConfigError(f"chunk_size={c.size} is too small: use at least 8 tokens", settings=("chunk_size",))
    if c.overlap is not None and c.overlap < 0:
        raise ConfigError(f"chunk_overlap={c.overlap} must be zero or more", settings=("chunk_overlap",))
    if c.overlap is not None and c.size is not None and c.overlap >= c.size:
        raise ConfigError(f"chunk_overlap={c.overlap} must be smaller than chunk_size={c.size}",
                          settings=("chunk_overlap", "chunk_size"))
    for name, (lo, hi) in _RANGES.items():
        value = s.get(name)
        if not lo <= value <= hi:
            raise ConfigError(f"setting {name}={value} is out of range: use {lo:g} to {hi:g}", settings=(name,))
    if not _MEMORY.match(s.index.memory):
        raise ConfigError(f"setting index_memory={s.index.memory!r} is not a PostgreSQL memory size: "
                          "write it like 256MB or 1GB", settings=("index_memory",))
    for url in s.embed.ollama_urls or ("",):
        check_url(url, "ollama_url")
    for name in ("generator_url", "reranker_url"):
        if s.get(name):
            check_url(s.get(name), name)
    _check_dsn(s.database.url)
    if s.database.data_dir.exists() and not s.database.data_dir.is_dir():
        raise ConfigError(f"data_dir {s.database.data_dir} is a file, not a folder: point RAGVPS_DATA_DIR "
                          "(setting data_dir) at a folder, or move the file away", settings=("data_dir",))


def check_url(url: str, setting: str) -> str:
    """An http(s) URL with a host (and a valid port), or a ConfigError naming the setting."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        raise ConfigError(f"setting {setting}={url!r} is not a valid URL ({exc}): write it like "
                          "http://127.0.0.1:11434", settings=(setting,)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"setting {setting}={url!r} is not an http(s) URL with a host: write it like "
                          "http://127.0.0.1:11434 (scheme and host included)", settings=(setting,))
    return url


def _check_dsn(url: str) -> None:
    if not url:
        return
    if re.match(r"^postgres(ql)?://", url) or ("=" in url and "://" not in url):
        return
    raise ConfigError(
        f"setting database_url={redact(url)!r} is not a PostgreSQL connection string: write "
        "postgresql://HOST:5432/DBNAME with USER:PASSWORD@ before HOST (or key=value form, host=... dbname=...), "
        "or leave it empty for the embedded server", settings=("database_url",))
