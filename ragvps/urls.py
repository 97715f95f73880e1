"""The checks of the settings that are addresses: an http(s) URL with a host, a PostgreSQL connection string."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ragvps.errors import ConfigError, redact


def check_url(url: str, setting: str) -> str:
    """An http(s) URL with a host (and a valid port), or a ConfigError naming the setting."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        raise ConfigError(
            f"setting {setting}={url!r} is not a valid URL ({exc}): write it like http://127.0.0.1:11434",
            settings=(setting,),
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"setting {setting}={url!r} is not an http(s) URL with a host: write it like "
            "http://127.0.0.1:11434 (scheme and host included)",
            settings=(setting,),
        )
    return url


def check_dsn(url: str, setting: str = "database_url") -> None:
    if not url:
        return
    if re.match(r"^postgres(ql)?://", url) or ("=" in url and "://" not in url):
        return
    raise ConfigError(
        f"setting {setting}={redact(url)!r} is not a PostgreSQL connection string: write "
        "postgresql://HOST:5432/DBNAME with USER:PASSWORD@ before HOST (or key=value form, host=... dbname=...)"
        + (", or leave it empty for the embedded server" if setting == "database_url" else ""),
        settings=(setting,),
    )
