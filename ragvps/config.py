"""Settings: defaults < ragvps.toml < RAGVPS_* environment < CLI flags, in one frozen object."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from ragvps.errors import ConfigError

EmbedderKind = Literal["local", "ollama"]
VectorType = Literal["vector", "halfvec"]
ChunkMode = Literal["structure", "fixed", "sentences"]

CONFIG_FILE = "ragvps.toml"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
LOCAL_MODEL = "all-MiniLM-L6-v2-int8"
DEFAULT_OLLAMA_MODEL = "nomic-embed-text"


@dataclass(frozen=True)
class Settings:
    database_url: str = ""  # empty: the embedded PostgreSQL under data_dir
    data_dir: Path = Path(".ragvps")
    embedder: EmbedderKind = "local"
    ollama_url: str = DEFAULT_OLLAMA_URL
    embed_model: str = DEFAULT_OLLAMA_MODEL  # the Ollama model; the local model is fixed
    chunk_mode: ChunkMode = "structure"
    chunk_size: int | None = None  # None: the embedder's default
    chunk_overlap: int | None = None
    language: str = "english"
    batch_size: int = 32
    keep_alive: str = "30m"
    ollama_timeout: int = 120  # seconds for one /api/embed request
    ollama_retries: int = 4  # on connection errors, timeouts and 5xx, with exponential backoff
    document_prefix: str | None = None  # None: the model's own task prefix (nomic: "search_document: ")
    query_prefix: str | None = None
    threads: int = 0  # onnxruntime intra-op threads; 0: one per core
    sub_batch: int = 8  # local model: texts per onnxruntime call, which bounds peak memory
    vector_type: VectorType = "vector"
    hnsw_m: int = 16
    hnsw_ef_construction: int = 64
    index_min_rows: int = 5000  # below this, exact search; no HNSW index
    index_memory: str = "256MB"  # maintenance_work_mem for the index build's own session
    index_workers: int = 1  # max_parallel_maintenance_workers for the build (0: the leader alone)
    ef_search: int = 100
    candidates: int = 40
    keyword_budget: int = 300  # BM25 candidates come from the query's rarest words, up to this many chunks
    top_k: int = 8
    rrf_k: int = 60

    @property
    def pg_dir(self) -> Path:
        return self.data_dir / "pg"

    @property
    def model_name(self) -> str:
        return LOCAL_MODEL if self.embedder == "local" else self.embed_model


_CHOICES: dict[str, tuple[str, ...]] = {
    "embedder": ("local", "ollama"),
    "vector_type": ("vector", "halfvec"),
    "chunk_mode": ("structure", "fixed", "sentences"),
}


def _coerce(name: str, value: Any, origin: str) -> Any:
    """Turn a raw value (from TOML, environment or a flag) into the field's type."""
    default = getattr(Settings, name, None)
    try:
        if name in ("chunk_size", "chunk_overlap"):
            value = None if value in (None, "") else int(value)
        elif name == "data_dir":
            value = Path(value).expanduser()
        elif isinstance(default, bool):
            value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        elif isinstance(default, int):
            value = int(value)
        else:
            value = str(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"setting {name}={value!r} from {origin} is not a valid {type(default).__name__}"
        ) from None
    if name in _CHOICES and value not in _CHOICES[name]:
        allowed = " | ".join(_CHOICES[name])
        raise ConfigError(f"setting {name}={value!r} from {origin} must be one of: {allowed}")
    return value


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
    names = {f.name for f in fields(Settings)}
    values: dict[str, Any] = {}

    path = config_file or (Path(env["RAGVPS_CONFIG"]) if env.get("RAGVPS_CONFIG") else Path(CONFIG_FILE))
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        table = data.get("ragvps", data)
        for key, value in table.items():
            if key not in names:
                raise ConfigError(f"unknown setting {key!r} in {path}; known: {', '.join(sorted(names))}")
            values[key] = _coerce(key, value, str(path))
    elif config_file is not None:
        raise ConfigError(f"config file {config_file} does not exist")

    if "RAGVPS_OLLAMA_URL" not in env and env.get("OLLAMA_HOST"):
        values["ollama_url"] = _normalise_ollama_host(env["OLLAMA_HOST"])
    for name in names:
        key = "RAGVPS_" + name.upper()
        if env.get(key, "") != "" or (name == "database_url" and key in env):
            values[name] = _coerce(name, env[key], f"environment variable {key}")

    for name, value in flags.items():
        if value is not None:
            values[name] = _coerce(name, value, f"option --{name.replace('_', '-')}")

    settings = dataclasses.replace(Settings(), **values)
    _validate(settings)
    return settings


def _validate(s: Settings) -> None:
    if s.chunk_size is not None and s.chunk_size < 8:
        raise ConfigError(f"chunk_size={s.chunk_size} is too small: use at least 8 tokens")
    if s.chunk_overlap is not None and s.chunk_size is not None and s.chunk_overlap >= s.chunk_size:
        raise ConfigError(
            f"chunk_overlap={s.chunk_overlap} must be smaller than chunk_size={s.chunk_size}"
        )
    for name in ("batch_size", "sub_batch", "ollama_timeout", "candidates", "top_k", "hnsw_m",
                 "hnsw_ef_construction", "ef_search", "keyword_budget"):
        if getattr(s, name) < 1:
            raise ConfigError(f"setting {name} must be at least 1, not {getattr(s, name)}")
