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


def model_lister(principal: Principal) -> Principal:
    """Whose bound a chat door's model list and model look-up follow: a forwarded user's key's (Open WebUI keeps one
    model list for all its users, so a per-user list would be overwritten by the next user's refresh), else the
    principal's own. Whether the user may read the model they picked is decided at chat time (`denial`)."""
    return principal.within if principal.within is not None else principal


def denial(principal: Principal, kb: str) -> str:
    """Why a forwarded user may not read knowledge base `kb`, said to them as the chat's answer; empty when they may."""
    if principal.within is None or principal.can(kb):
        return ""
    groups = "none of their groups" if not principal.holds_nothing else "they are in no group that"
    return (
        f"You cannot ask this knowledge base ({kb}): you are signed in as {principal.user or principal.name}, and "
        f"{groups} maps to it in ragvps's setting group_roles. Ask an administrator to add one of your groups "
        f"(GROUP={kb}:read) and, in Open WebUI, to give this model to that group; or pick another model."
    )
