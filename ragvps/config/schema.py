"""The Settings object (its groups from ragvps.config.groups), the tables of flat names built from the fields, and
the coercion of one raw value (TOML, environment, a flag, code) to its setting's type."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ragvps import backends
from ragvps.config.groups import (
    AuthSettings,
    ChunkSettings,
    DatabaseSettings,
    EmbedSettings,
    GenerateSettings,
    IndexSettings,
    RerankSettings,
    SearchSettings,
    ServeSettings,
    SourceSettings,
)
from ragvps.errors import ConfigError

log = logging.getLogger(__name__)


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
    auth: AuthSettings = AuthSettings()
    source: SourceSettings = SourceSettings()

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
    f.metadata["name"]: (g.name, f)
    for g in fields(Settings)
    for f in fields(g.default)  # type: ignore[arg-type]
}
# flat name -> (group, field) by walking the groups' fields; flat name -> (group, attribute). Keep names stable.
SETTINGS: dict[str, tuple[str, str]] = {name: (group, f.name) for name, (group, f) in _FIELDS.items()}
SECRETS = frozenset(name for name, (_, f) in _FIELDS.items() if f.metadata["secret"])
ALIASES: dict[str, str] = {old: name for name, (_, f) in _FIELDS.items() for old in f.metadata["aliases"]}
_CHOICES: dict[str, tuple[str, ...]] = {
    n: f.metadata["choices"] for n, (_, f) in _FIELDS.items() if f.metadata["choices"]
}
_RANGES: dict[str, tuple[float, float | str]] = {
    n: f.metadata["range"] for n, (_, f) in _FIELDS.items() if f.metadata["range"]
}


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
        raise ConfigError(
            f"setting {name}={shown} from {origin} is not valid: {name} must be {what}", settings=(name,)
        ) from None
    if name in _CHOICES and value not in _CHOICES[name]:
        allowed = " | ".join(c for c in _CHOICES[name] if c)
        raise ConfigError(f"setting {name}={value!r} from {origin} must be one of: {allowed}", settings=(name,))
    return value


def _whole(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(value)
