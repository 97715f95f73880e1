"""Loading the settings: defaults < ragvps.toml < RAGVPS_* environment < flags, then the checks across settings."""

from __future__ import annotations

import logging
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ragvps import backends
from ragvps.config.groups import CONFIG_FILE
from ragvps.config.schema import _RANGES, ALIASES, SETTINGS, Settings, _coerce, _current
from ragvps.errors import ConfigError
from ragvps.urls import check_dsn, check_url

log = logging.getLogger(__name__)
_MEMORY = re.compile(r"^\s*\d+\s*(kB|MB|GB|TB)?\s*$")
# A provider's own key variable (OPENAI_API_KEY ...) is read when RAGVPS_GENERATOR_API_KEY is unset.
_ENV_ALIASES = {"generator_api_key": tuple(b.key_env for b in backends.GENERATORS.values() if b.key_env)}


def _normalise_ollama_host(host: str) -> str:
    """OLLAMA_HOST may be `0.0.0.0`, `host:port` or a URL; make it a URL a client can use."""
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = "http://" + host
    scheme, rest = host.split("://", 1)
    hostname = rest.split(":", 1)[0]
    if hostname in ("0.0.0.0", ""):
        rest = "127.0.0.1" + rest[len(hostname) :]
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
        values["ollama_url"] = _coerce(
            "ollama_url", _normalise_ollama_host(env["OLLAMA_HOST"]), "environment variable OLLAMA_HOST"
        )
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
        raise ConfigError(
            f"config file {path}: `ragvps` must be a table of settings ([ragvps] then "
            f"`name = value` lines), not {type(table).__name__} {table!r}"
        )
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
        where = [
            f"{n} from {origins[n]}" if len(names) > 1 else f"from {origins[n]}"
            for n in names
            if origins and n in origins
        ]
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
            fail(
                f"setting {name}={value} is out of range: use {lo:g} to {top:g}{bound}",
                *((name, hi) if isinstance(hi, str) else (name,)),
            )
    if not _MEMORY.match(s.index.memory):
        fail(
            f"setting index_memory={s.index.memory!r} is not a PostgreSQL memory size: write it like 256MB or 1GB",
            "index_memory",
        )
    for url in s.embed.ollama_urls or ("",):
        check_url(url, "ollama_url")
    for name in ("generator_url", "reranker_url"):
        if s.get(name):
            check_url(s.get(name), name)
    check_dsn(s.database.url)
    for url in s.database.replica_urls:
        check_dsn(url, "database_replica_urls")
    if s.database.replica_urls and not s.database.url:
        fail(
            "setting database_replica_urls names hot standbys of a PostgreSQL server: set database_url to that "
            "primary too (the embedded server has no standbys)",
            "database_replica_urls",
        )
    from ragvps.records import KB_NAME, kb_name_problem  # lazy: records load hashlib and tokens (`--help` start-up)

    if not KB_NAME.fullmatch(s.database.kb):
        fail(kb_name_problem(s.database.kb), "kb")
    if s.database.data_dir.exists() and not s.database.data_dir.is_dir():
        raise ConfigError(
            f"data_dir {s.database.data_dir} is a file, not a folder: point RAGVPS_DATA_DIR "
            "(setting data_dir) at a folder, or move the file away",
            settings=("data_dir",),
        )
