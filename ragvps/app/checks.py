"""Request validation, once for every interface: the CLI, HTTP and MCP build requests, the app checks them
before any work (query as PostgreSQL can take it, a known mode, k up to the setting max_k, filter values
PostgreSQL can store). The HTTP schema takes its bounds from here too."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from ragvps.errors import UsageError
from ragvps.retrieve.modes import MODES, Mode
from ragvps.retrieve.search import MAX_QUERY_CHARS, check_query

if TYPE_CHECKING:
    from ragvps.app.requests import AskRequest, SearchRequest
    from ragvps.retrieve.filters import Filters

MAX_META_DEPTH = 8
__all__ = ["MAX_QUERY_CHARS", "MODES", "Mode", "check_ask", "check_k", "check_mode", "check_search", "check_strings"]


def check_search(request: SearchRequest, max_k: int) -> SearchRequest:
    """The request with its query cleaned, or a UsageError naming what to change."""
    _check(request.mode, request.k, request.filters, max_k)
    return dataclasses.replace(request, query=check_query(request.query))


def check_ask(request: AskRequest, max_k: int) -> AskRequest:
    o = request.overrides
    _check(o.mode, o.k, o.filters, max_k)
    return dataclasses.replace(request, question=check_query(request.question))


def _check(mode: str, k: int | None, filters: Filters | None, max_k: int) -> None:
    check_mode(mode)
    check_k(k, max_k)
    if filters:
        check_strings(filters.path_prefix, "path_prefix")
        check_strings(filters.metadata, "meta")


def check_mode(mode: str) -> Mode:
    if mode not in MODES:
        raise UsageError(f"mode {mode!r} is not one of: {', '.join(MODES)}", settings=("mode",))
    return mode


def check_k(k: int | None, max_k: int) -> int | None:
    """k (None: the default) within 1..max_k, the one limit the CLI, HTTP and MCP share."""
    if k is not None and not 1 <= k <= max_k:
        raise UsageError(f"k must be 1 to {max_k} (the setting max_k), not {k}", settings=("k", "max_k"))
    return k


def check_strings(value: object, what: str, depth: int = 0) -> object:
    """`value` (a filter from JSON) as PostgreSQL can store it: no NUL in text, finite numbers, bounded depth."""
    if depth > MAX_META_DEPTH:
        raise UsageError(f"{what} is nested more than {MAX_META_DEPTH} levels deep: filter on flatter metadata")
    if isinstance(value, str):
        if "\x00" in value:
            raise UsageError(f"{what} contains a NUL character, which no stored text can match: remove it")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(f"{what} has a number JSON cannot hold ({value}): use a finite number")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_strings(key, what, depth + 1)
            check_strings(item, what, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_strings(item, what, depth + 1)
    return value
