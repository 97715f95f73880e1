"""Any exception as the `{error, kind}` body and the status of its kind; unexpected ones are logged, never
shown (driver errors became RagvpsErrors at the db/ boundary)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from starlette.exceptions import HTTPException

from ragvps.errors import HTTP_STATUS, Kind, RagvpsError, redact

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True)
class Failure:
    """What a client is told of an error: the HTTP status, the message (secrets redacted) and its kind."""

    status: int
    error: str
    kind: Kind

    def body(self) -> dict[str, str]:
        return {"error": self.error, "kind": self.kind}


def failure(exc: BaseException) -> Failure:
    if isinstance(exc, RagvpsError):
        return Failure(HTTP_STATUS[exc.kind], redact(str(exc)), exc.kind)
    log.error("unexpected error", exc_info=exc)
    return Failure(500, "unexpected server error; the server log has the details", "failed")


def error_body(exc: BaseException) -> tuple[int, dict[str, str]]:
    """The status and `{error, kind}` for any exception."""
    f = failure(exc)
    return f.status, f.body()


def guarded(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """A route whose unexpected errors become RagvpsErrors (kind failed/unavailable), answered as JSON by the
    RagvpsError handler; Starlette's catch-all 500 handler would re-raise them and drop the connection."""

    @functools.wraps(fn)
    async def route(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except (RagvpsError, HTTPException):
            raise
        except Exception as exc:
            f = failure(exc)
            raise RagvpsError(f.error, kind=f.kind) from None

    return route
