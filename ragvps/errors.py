"""One error family whose messages say what to do next."""

from __future__ import annotations

import re


class RagvpsError(Exception):
    """An error the CLI reports as one line on stderr, with a non-zero exit."""

    exit_code = 1


class ConfigError(RagvpsError):
    exit_code = 2


class UsageError(RagvpsError):
    exit_code = 2


class DatabaseError(RagvpsError):
    pass


class EmbedderError(RagvpsError):
    pass


class ModelMismatchError(RagvpsError):
    pass


_DSN_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)(\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """Hide passwords in DSNs (URL and key=value forms) inside any message."""
    text = _DSN_PASSWORD.sub(lambda m: m.group(1) + ("***" if m.group(2) else "") + m.group(3), text)
    return _KV_PASSWORD.sub(r"\1***", text)
