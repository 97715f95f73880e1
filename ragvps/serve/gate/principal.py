"""The principal a route acts for: what RequireKey put in the request's state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragvps.app.keys import Principal
from ragvps.errors import UnauthorizedError

if TYPE_CHECKING:
    from starlette.requests import Request


def principal_of(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    if not isinstance(principal, Principal):  # only paths open to anyone lack one, and they never ask
        raise UnauthorizedError("this path needs an API key")
    return principal
