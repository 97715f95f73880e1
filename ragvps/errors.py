"""One error family whose messages say what to do next, each error with a kind.

The kind is what an interface needs to answer: the CLI maps it to an exit code, the HTTP API to a
status (`EXIT_CODES`, `HTTP_STATUS`, in one place each). Library code names settings (`chunk_size`),
never CLI flags; an error lists the settings it is about in `settings`, so an interface can say how to
set them (`--chunk-size`, `RAGVPS_CHUNK_SIZE`). Driver errors (psycopg, httpx) are translated where
they occur (db/, embed/, generate/llm/), so nothing above those packages sees them.

    RagvpsError (failed)
    ├── UsageError (usage)             the request is wrong
    ├── UnauthorizedError (unauthorized) no API key, or a wrong one
    ├── ForbiddenError (forbidden)     a browser request the server refuses (foreign Host or Origin)
    ├── ConfigError (config)           a setting is wrong
    ├── NotFoundError (not_found)
    ├── InputTooLongError (too_long)   an input is longer than the model takes
    ├── BadBundleError (corrupt)       a bundle that is truncated, altered or of an unknown version
    ├── ConflictError (conflict)       the request contradicts what is stored
    │   ├── ModelMismatchError         the index holds another model's vectors
    │   ├── DimensionError             the embedder returns another dimension
    │   └── ActiveSetChangedError      a model switch replaced the table under a query
    └── UnavailableError (unavailable) something ragvps depends on is down or busy
        ├── DatabaseError
        ├── EmbedderError
        │   ├── HostDownError          one Ollama host failed after its retries
        │   └── MissingModelError      Ollama has no such model
        ├── GeneratorError             the LLM API refused or failed (its kind may be config/too_long)
        └── RerankerError
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal[
    "usage",
    "unauthorized",
    "forbidden",
    "config",
    "not_found",
    "conflict",
    "unavailable",
    "too_long",
    "corrupt",
    "failed",
]

EXIT_CODES: dict[str, int] = {
    "usage": 2,
    "unauthorized": 2,
    "forbidden": 2,
    "config": 2,
    "not_found": 1,
    "conflict": 1,
    "unavailable": 1,
    "too_long": 1,
    "corrupt": 1,
    "failed": 1,
}
HTTP_STATUS: dict[str, int] = {
    "usage": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "config": 500,
    "not_found": 404,
    "conflict": 409,
    "unavailable": 503,
    "too_long": 413,
    "corrupt": 422,
    "failed": 500,
}


def kind_of_status(status: int) -> Kind:
    """The kind an HTTP status stands for (a framework's own 404/405/413), the inverse of HTTP_STATUS."""
    for kind, code in HTTP_STATUS.items():
        if code == status and kind not in ("config", "failed"):
            return kind  # type: ignore[return-value]
    return "usage" if status < 500 else "failed"


class RagvpsError(Exception):
    """An error an interface reports as one line (CLI) or one JSON object (HTTP), never a traceback."""

    kind: Kind = "failed"

    def __init__(self, message: str, *, kind: Kind | None = None, settings: tuple[str, ...] = ()):
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        self.settings = settings

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.kind]


class UsageError(RagvpsError):
    """The request itself is wrong: a bad argument, a missing input, an empty query."""

    kind: Kind = "usage"


class UnauthorizedError(RagvpsError):
    """No API key was sent, or one that is not configured."""

    kind: Kind = "unauthorized"


class ForbiddenError(RagvpsError):
    """A request the server refuses whoever sends it: a Host it does not answer to, a foreign page's POST."""

    kind: Kind = "forbidden"


class ConfigError(RagvpsError):
    """A setting is wrong (its name and origin are in the message)."""

    kind: Kind = "config"


class NotFoundError(RagvpsError):
    kind: Kind = "not_found"


class ConflictError(RagvpsError):
    kind: Kind = "conflict"


class UnavailableError(RagvpsError):
    """Something ragvps depends on (the database, Ollama, an LLM API) cannot be reached or refused."""

    kind: Kind = "unavailable"


class DatabaseError(UnavailableError):
    pass


class EmbedderError(UnavailableError):
    pass


class HostDownError(EmbedderError):
    """The server failed (not reachable, timed out, 5xx) after its retries: another host may do the work."""

    def __init__(self, message: str, short: str):
        super().__init__(message)
        self.short = short  # what failed, without the advice: for a line naming several hosts


class MissingModelError(EmbedderError):
    """The server does not have the model (Ollama's 404)."""


class ModelMismatchError(ConflictError):
    pass


class DimensionError(ConflictError):
    """The embedder returned vectors of another size than the model's (or the index's)."""


class ActiveSetChangedError(ConflictError):
    """A model switch committed between reading the active embedding set and searching its table."""


class InputTooLongError(RagvpsError):
    """An input is longer than the model takes (Ollama: HTTP 400 with truncate=false)."""

    kind: Kind = "too_long"


class BadBundleError(RagvpsError):
    """A bundle (ragvps export) that is truncated, altered, incomplete or of a format version this ragvps
    does not read: found before anything is written."""

    kind: Kind = "corrupt"


class GeneratorError(UnavailableError):
    """The LLM API refused or failed a request; its kind says whose move it is (config, too_long, unavailable)."""


class RerankerError(UnavailableError):
    pass


_DSN_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)(\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """Hide passwords in DSNs (URL and key=value forms) inside any message."""
    text = _DSN_PASSWORD.sub(lambda m: m.group(1) + ("***" if m.group(2) else "") + m.group(3), text)
    return _KV_PASSWORD.sub(r"\1***", text)


class Blocked(Exception):
    """A connection refused by the reach rule (ragvps/reach.py): the message names the host, its address and the
    setting source_allow_hosts. Not a RagvpsError: whoever connects turns it into one of theirs."""
