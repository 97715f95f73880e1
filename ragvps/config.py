"""Settings: defaults < ragvps.toml < RAGVPS_* environment < CLI flags, in one frozen object, grouped by concern.

Every setting has one flat name (`chunk_size`), which is its key in `ragvps.toml`, its environment variable
(`RAGVPS_CHUNK_SIZE`) and the name errors use; in code it lives in its group (`settings.chunk.size`). The flat
name is the attribute, or the attribute after a word naming its group (`index_min_rows`, `ollama_timeout`); a
group's `kind` is named for what it chooses (`embedder`). Each field declares its facts beside it (`setting(...)`:
flat name, range, secret, choices, old names), the tables below are built from them; backends from ragvps.backends.
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
from typing import Any, Literal, NoReturn, get_args

from ragvps import backends
from ragvps.errors import ConfigError
from ragvps.records import KB_NAME, kb_name_problem
from ragvps.urls import check_dsn, check_url

log = logging.getLogger(__name__)

VectorType = Literal["vector", "halfvec", "bit"]
ChunkMode = Literal["structure", "fixed", "sentences"]

CONFIG_FILE = "ragvps.toml"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
DEFAULT_OLLAMA_MODEL = "nomic-embed-text"


def setting(default: Any, name: str, *, lo: float | None = None, hi: float | str | None = None, secret: bool = False,
            choices: tuple[str, ...] = (), aliases: tuple[str, ...] = ()) -> Any:
    """A field and its facts: its flat name, its range (`hi` may name the setting that bounds it), whether it
    is a secret (never shown), its choices, and old flat names still accepted (with a warning)."""
    return field(default=default, repr=not secret, metadata={"name": name, "range": None if lo is None else (lo, hi),
                                                             "secret": secret, "choices": choices, "aliases": aliases})


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = setting("", "database_url", secret=True)  # empty: the embedded PostgreSQL under data_dir
    data_dir: Path = setting(Path(".ragvps"), "data_dir")
    pool_size: int = setting(4, "pool_size", lo=1, hi=1000)  # connections a long-running server keeps
    kb: str = setting("default", "kb")  # the knowledge base a command reads or writes (`--kb`, RAGVPS_KB)

    @property
    def pg_dir(self) -> Path:
        return self.data_dir / "pg"

    @property
    def kb_dir(self) -> Path:
        """The knowledge base's stage files (chunks, the vector cache): its own folder, removed with it."""
        return self.data_dir / "kb" / self.kb


@dataclass(frozen=True)
class EmbedSettings:
    kind: str = setting("local", "embedder", choices=tuple(backends.EMBEDDERS))
    ollama_urls: tuple[str, ...] = setting((DEFAULT_OLLAMA_URL,), "ollama_url")  # several hosts, one model
    model: str = setting(DEFAULT_OLLAMA_MODEL, "embed_model")  # the Ollama model; the local model is fixed
    batch_size: int = setting(32, "batch_size", lo=1, hi=10_000)
    keep_alive: str = setting("30m", "keep_alive")
    timeout: int = setting(120, "ollama_timeout", lo=1, hi=86_400)  # seconds for one /api/embed request
    retries: int = setting(4, "ollama_retries", lo=0, hi=20)  # on connection errors, timeouts, 5xx; with backoff
    document_prefix: str | None = setting(None, "document_prefix")  # None: the model's own (nomic: "search_document: ")
    query_prefix: str | None = setting(None, "query_prefix")
    threads: int = setting(0, "threads", lo=0, hi=1024)  # onnxruntime intra-op threads; 0: one per core
    sub_batch: int = setting(8, "sub_batch", lo=1, hi=1024)  # local model: texts per onnxruntime call (peak memory)
    defer_embedding: bool = setting(False, "defer_embedding")  # ingest queues chunks for `ragvps worker`
    worker_lease: int = setting(600, "worker_lease", lo=1, hi=86_400)  # seconds a worker holds a claimed batch
    worker_max_attempts: int = setting(3, "worker_max_attempts", lo=1, hi=1000)  # dead workers' tries of a file
    # uploaded files a worker reads, embeds and stores together (16 MB at most); see docs/documents-api.md
    upload_batch_files: int = setting(256, "upload_batch_files", lo=1, hi=100_000)

    @property
    def backend(self) -> backends.Backend:
        return backends.EMBEDDERS[self.kind]

    @property
    def model_name(self) -> str:
        return self.backend.model or self.model

    @property
    def ollama_url(self) -> str:
        return self.ollama_urls[0]


@dataclass(frozen=True)
class ChunkSettings:
    mode: ChunkMode = setting("structure", "chunk_mode", choices=get_args(ChunkMode))
    size: int | None = setting(None, "chunk_size")  # None: the embedder's default
    overlap: int | None = setting(None, "chunk_overlap")
    ocr_languages: str = setting("eng", "ocr_languages")  # Tesseract's, for scans and images: `eng+deu`


@dataclass(frozen=True)
class IndexSettings:
    vector_type: VectorType = setting("vector", "vector_type", choices=get_args(VectorType))
    hnsw_m: int = setting(16, "hnsw_m", lo=2, hi=100)
    hnsw_ef_construction: int = setting(64, "hnsw_ef_construction", lo=4, hi=1000)
    min_rows: int = setting(5000, "index_min_rows", lo=0, hi=10**12)  # below this, exact search; no HNSW index
    memory: str = setting("256MB", "index_memory")  # maintenance_work_mem for the index build's own session
    workers: int = setting(1, "index_workers", lo=0, hi=64)  # max_parallel_maintenance_workers (0: the leader)


FUSIONS = ("rrf", "convex")  # how the two legs are fused (retrieve/fusion.py)


@dataclass(frozen=True)
class SearchSettings:
    language: str = setting("english", "language")  # the PostgreSQL text search configuration
    ef_search: int = setting(100, "ef_search", lo=1, hi=1000)
    candidates: int = setting(40, "candidates", lo=1, hi=10_000)
    keyword_budget: int = setting(300, "keyword_budget", lo=1, hi=10_000_000)  # BM25 from the rarest words' chunks
    bit_rerank_depth: int = setting(200, "bit_rerank_depth", lo=1, hi=1000)  # vector_type bit: re-ranked candidates
    top_k: int = setting(8, "top_k", lo=1, hi="max_k")
    rrf_k: int = setting(60, "rrf_k", lo=0, hi=10_000)
    fusion: str = setting("rrf", "fusion", choices=FUSIONS)  # rrf: by rank; convex: by normalised score
    vector_weight: float = setting(1.0, "vector_weight", lo=0, hi=100,  # the keyword leg's weight is 1
                                   aliases=("rrf_vector_weight",))


@dataclass(frozen=True)
class RerankSettings:
    kind: str = setting("none", "reranker", choices=tuple(backends.RERANKERS))
    url: str = setting("", "reranker_url")
    model: str = setting("", "reranker_model")
    api_key: str = setting("", "reranker_api_key", secret=True)
    candidates: int = setting(40, "rerank_candidates", lo=1, hi=1000)
    timeout: int = setting(30, "reranker_timeout", lo=1, hi=3600)

    @property
    def backend(self) -> backends.Backend:
        return backends.RERANKERS[self.kind]


@dataclass(frozen=True)
class GenerateSettings:
    kind: str = setting("extractive", "generator", choices=tuple(backends.GENERATORS))
    url: str = setting("", "generator_url")
    model: str = setting("", "generator_model")
    api_key: str = setting("", "generator_api_key", secret=True)
    temperature: float = setting(0.0, "temperature", lo=0, hi=2)
    timeout: int = setting(120, "generator_timeout", lo=1, hi=3600)
    retries: int = setting(3, "generator_retries", lo=0, hi=20)
    answer_reserve: int = setting(512, "answer_reserve", lo=16, hi=1_000_000)  # kept free of the context window
    context_window: int = setting(0, "context_window", lo=0, hi=10_000_000)  # 0: the model's (8,192 when unknown)
    token_encoding: str = setting("", "token_encoding", choices=("", "cl100k_base", "o200k_base"))  # "": by model
    answer_chunks: int = setting(8, "answer_chunks", lo=1, hi=1000)
    min_evidence: float = setting(0.40, "answer_min_evidence", lo=0, hi=1, aliases=("answer_min_score",))
    cache: bool = setting(True, "answer_cache")

    @property
    def backend(self) -> backends.Backend:
        return backends.GENERATORS[self.kind]


@dataclass(frozen=True)
class ServeSettings:
    host: str = setting("127.0.0.1", "host")
    port: int = setting(8765, "port", lo=0, hi=65535)
    api_keys: tuple[str, ...] = setting((), "api_keys", secret=True)
    api_key_file: str = setting("", "api_key_file")
    cors_origins: tuple[str, ...] = setting((), "cors_origins")
    allowed_hosts: tuple[str, ...] = setting((), "allowed_hosts")  # Host names beyond loopback's (a proxy's)
    max_body_bytes: int = setting(65536, "max_body_bytes", lo=1024, hi=1 << 30)
    request_timeout: int = setting(120, "request_timeout", lo=1, hi=86_400)
    header_timeout: int = setting(5, "header_timeout", lo=1, hi=3600)  # seconds a request's headers may take
    max_k: int = setting(100, "max_k", lo=1, hi=10_000)  # the most chunks one search or question may ask for
    # POST /kb/{name}/documents: one upload's bytes (all its files), one file's bytes, files in one upload
    upload_max_bytes: int = setting(1 << 30, "upload_max_bytes", lo=1024, hi=1 << 40)
    upload_max_file_bytes: int = setting(256 << 20, "upload_max_file_bytes", lo=1024, hi=1 << 40)
    upload_max_files: int = setting(1000, "upload_max_files", lo=1, hi=100_000)
    log_format: str = setting("text", "log_format", choices=("text", "json", "off"))  # the request log's lines
    metrics: bool = setting(True, "metrics")  # GET /metrics, and the use cases observed for it
    log_questions: bool = setting(False, "log_questions")  # the question's text in the request log (off: never)


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
            name = _current(name, "code")
            group, attr = _where(name)
            groups.setdefault(group, {})[attr] = _coerce(name, value, "code")
        changed = {g: dataclasses.replace(getattr(self, g), **v) for g, v in groups.items()}
        return dataclasses.replace(self, **changed)

    def get(self, name: str) -> Any:
        group, attr = _where(name)
        return getattr(getattr(self, group), attr)


_FIELDS: dict[str, tuple[str, dataclasses.Field[Any]]] = {
    f.metadata["name"]: (g.name, f) for g in fields(Settings) for f in fields(g.default)}  # type: ignore[arg-type]
# flat name -> (group, field) by walking the groups' fields; flat name -> (group, attribute). Keep names stable.
SETTINGS: dict[str, tuple[str, str]] = {name: (group, f.name) for name, (group, f) in _FIELDS.items()}
SECRETS = frozenset(name for name, (_, f) in _FIELDS.items() if f.metadata["secret"])
ALIASES: dict[str, str] = {old: name for name, (_, f) in _FIELDS.items() for old in f.metadata["aliases"]}
_CHOICES: dict[str, tuple[str, ...]] = {n: f.metadata["choices"] for n, (_, f) in _FIELDS.items()
                                        if f.metadata["choices"]}
_RANGES: dict[str, tuple[float, float | str]] = {n: f.metadata["range"] for n, (_, f) in _FIELDS.items()
                                                 if f.metadata["range"]}
_MEMORY = re.compile(r"^\s*\d+\s*(kB|MB|GB|TB)?\s*$")
# A provider's own key variable (OPENAI_API_KEY ...) is read when RAGVPS_GENERATOR_API_KEY is unset.
_ENV_ALIASES = {"generator_api_key": tuple(b.key_env for b in backends.GENERATORS.values() if b.key_env)}


def reranker_on() -> str:  # the reranker a `--rerank` flag turns on: the first that reorders
    return next(b.name for b in backends.RERANKERS.values() if b.reorders)


def _where(name: str) -> tuple[str, str]:
    try:
        return SETTINGS[name]
    except KeyError:
        raise ConfigError(f"unknown setting {name!r}; known: {', '.join(sorted(SETTINGS))}") from None


def _current(name: str, origin: str) -> str:
    """The setting's name today; an old name still works, with a warning that says the new one."""
    if name not in ALIASES:
        return name
    log.warning("setting %s (from %s) is now called %s: rename it", name, origin, ALIASES[name])
    return ALIASES[name]


def _coerce(name: str, value: Any, origin: str) -> Any:
    """Turn a raw value (from TOML, environment, a flag or code) into the setting's type."""
    default, typ = _FIELDS[name][1].default, str(_FIELDS[name][1].type)
    shown = "***" if name in SECRETS else repr(value)
    try:
        if typ.startswith("tuple"):
            items = value if isinstance(value, list | tuple) else str(value).split(",")
            value = tuple(str(v).strip() for v in items if str(v).strip())
        elif typ == "int | None":
            value = None if value in (None, "") else _whole(value)
        elif typ == "str | None":
            value = None if value is None else str(value)
        elif typ == "Path":
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
    origins: dict[str, str] = {}  # where each value that is not a default came from, for its errors

    named = config_file or (Path(env["RAGVPS_CONFIG"]) if env.get("RAGVPS_CONFIG") else None)
    path = named or Path(CONFIG_FILE)
    if path.is_file() or named is not None:
        origin = "--config" if config_file is not None else "RAGVPS_CONFIG" if named is not None else "the default"
        from_file = _read_file(path, origin)
        values |= from_file
        origins |= dict.fromkeys(from_file, f"config file {path}")

    if "RAGVPS_OLLAMA_URL" not in env and env.get("OLLAMA_HOST"):
        values["ollama_url"] = _coerce("ollama_url", _normalise_ollama_host(env["OLLAMA_HOST"]),
                                       "environment variable OLLAMA_HOST")
        origins["ollama_url"] = "environment variable OLLAMA_HOST"
    for name, aliases in _ENV_ALIASES.items():
        for alias in aliases:
            if env.get(alias) and f"RAGVPS_{name.upper()}" not in env and name not in values:
                values[name] = env[alias]
                origins[name] = f"environment variable {alias}"
    for name in [*ALIASES, *SETTINGS]:  # the old names first, so the current one wins
        key = "RAGVPS_" + name.upper()
        if env.get(key, "") != "" or (name == "database_url" and key in env):
            origin = f"environment variable {key}"
            current = _current(name, origin)
            values[current], origins[current] = _coerce(current, env[key], origin), origin

    for name, value in flags.items():
        if value is not None:
            origin = f"option --{name.replace('_', '-')}"
            current = _current(name, origin)
            values[current], origins[current] = _coerce(current, value, origin), origin

    settings = Settings().replace(**values)
    _validate(settings, origins)
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
        if key not in SETTINGS and key not in ALIASES:
            raise ConfigError(f"unknown setting {key!r} in {path}; known: {', '.join(sorted(SETTINGS))}")
        name = _current(key, str(path))
        values[name] = _coerce(name, value, str(path))
    return values


def _validate(s: Settings, origins: Mapping[str, str] | None = None) -> None:
    """Check the values together; each error names where its values came from."""
    def fail(message: str, *names: str) -> NoReturn:
        where = [f"{n} from {origins[n]}" if len(names) > 1 else f"from {origins[n]}"
                 for n in names if origins and n in origins]
        raise ConfigError(message + (f" ({'; '.join(where)})" if where else ""), settings=names)

    c = s.chunk
    if c.size is not None and c.size < 8:
        fail(f"chunk_size={c.size} is too small: use at least 8 tokens", "chunk_size")
    if c.overlap is not None and c.overlap < 0:
        fail(f"chunk_overlap={c.overlap} must be zero or more", "chunk_overlap")
    if c.overlap is not None and c.size is not None and c.overlap >= c.size:
        fail(f"chunk_overlap={c.overlap} must be smaller than chunk_size={c.size}", "chunk_overlap", "chunk_size")
    for name, (lo, hi) in _RANGES.items():
        value, top = s.get(name), s.get(hi) if isinstance(hi, str) else hi
        if not lo <= value <= top:
            bound = f", the setting {hi}" if isinstance(hi, str) else ""
            fail(f"setting {name}={value} is out of range: use {lo:g} to {top:g}{bound}",
                 *((name, hi) if isinstance(hi, str) else (name,)))
    if not _MEMORY.match(s.index.memory):
        fail(f"setting index_memory={s.index.memory!r} is not a PostgreSQL memory size: write it like 256MB or 1GB",
             "index_memory")
    for url in s.embed.ollama_urls or ("",):
        check_url(url, "ollama_url")
    for name in ("generator_url", "reranker_url"):
        if s.get(name):
            check_url(s.get(name), name)
    check_dsn(s.database.url)
    if not KB_NAME.fullmatch(s.database.kb):
        fail(kb_name_problem(s.database.kb), "kb")
    if s.database.data_dir.exists() and not s.database.data_dir.is_dir():
        raise ConfigError(f"data_dir {s.database.data_dir} is a file, not a folder: point RAGVPS_DATA_DIR "
                          "(setting data_dir) at a folder, or move the file away", settings=("data_dir",))
