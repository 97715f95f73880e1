"""Where API keys come from and the rule for binding beyond loopback: what `ragvps serve` checks before it loads
the server, so a refused address costs no FastAPI import."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from ragvps.config import Settings
from ragvps.errors import ConfigError

MIN_KEY_CHARS = 16


def load_keys(settings: Settings) -> tuple[str, ...]:
    """Every configured key: `api_keys` plus the lines of `api_key_file`."""
    keys = list(settings.serve.api_keys)
    if settings.serve.api_key_file:
        path = Path(settings.serve.api_key_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read api_key_file {path}: {exc.__class__.__name__}; point the setting "
                "api_key_file at a readable file with one key a line",
                settings=("api_key_file",),
            ) from None
        file_keys = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        if not file_keys:
            raise ConfigError(
                f"api_key_file {path} holds no key: write one key a line (make one with `openssl rand -hex 32`)",
                settings=("api_key_file",),
            )
        keys += file_keys
    for key in keys:
        if len(key) < MIN_KEY_CHARS or any(c.isspace() or not c.isprintable() for c in key):
            raise ConfigError(
                f"an API key is too short or has spaces: use at least {MIN_KEY_CHARS} printable "
                "characters (make one with `openssl rand -hex 32`)",
                settings=("api_keys", "api_key_file"),
            )
    return tuple(dict.fromkeys(keys))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`: addresses only this machine can reach."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: tuple[str, ...], people: bool = False) -> None:
    """Refuse to listen beyond loopback without a key or sign-in: anyone who can reach the port could read
    everything."""
    if not keys and not people and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without an API key: anyone who can reach it could read the knowledge "
            "base. Set RAGVPS_API_KEYS (setting api_keys; make one with `openssl rand -hex 32`) or api_key_file, "
            "or listen on 127.0.0.1 behind a reverse proxy",
            settings=("api_keys", "api_key_file", "host"),
        )


def check_serving(settings: Settings, host: str) -> None:
    """`check_bind` for a server with these settings on `host`: its keys, or sign-in (OIDC or a trusted proxy)."""
    auth = settings.auth
    check_bind(host, load_keys(settings), bool(auth.oidc or auth.trusted_proxies))
