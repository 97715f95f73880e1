"""Between HTTP/MCP values and the app's requests, checked by the app's own rules before any work starts
(a stream must fail as a 400 before its first event)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from ragvps.app import AskRequest, Filters, Overrides, SearchRequest, json_object
from ragvps.app.checks import Mode, check_ask, check_search

if TYPE_CHECKING:
    from ragvps.app.requests import Hit


def search_request(
    query: str, k: int | None, mode: str, path_prefix: str, meta: Mapping[str, object], max_k: int
) -> SearchRequest:
    return check_search(SearchRequest(query, k, cast(Mode, mode), Filters(path_prefix, dict(meta))), max_k)


def ask_request(
    question: str,
    k: int | None,
    mode: str,
    path_prefix: str,
    meta: Mapping[str, object],
    max_k: int,
    use_cache: bool = True,
) -> AskRequest:
    overrides = Overrides(k=k, mode=cast(Mode, mode), filters=Filters(path_prefix, dict(meta)))
    return check_ask(AskRequest(question, overrides, use_cache=use_cache), max_k)


def hits_out(hits: Sequence[Hit]) -> list[dict[str, object]]:
    return [json_object(h) for h in hits]
