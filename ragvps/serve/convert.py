"""Between HTTP/MCP values and the app's requests, checked by the app's own rules before any work starts
(a stream must fail as a 400 before its first event)."""

from __future__ import annotations

from typing import Any, cast

from ragvps.app import AskRequest, Filters, SearchRequest, jsonable
from ragvps.app.checks import Mode, check_ask, check_search


def search_request(query: str, k: int | None, mode: str, path_prefix: str, meta: dict[str, Any],
                   max_k: int) -> SearchRequest:
    return check_search(SearchRequest(query, k, cast(Mode, mode), Filters(path_prefix, meta)), max_k)


def ask_request(question: str, k: int | None, mode: str, path_prefix: str, meta: dict[str, Any], max_k: int,
                use_cache: bool = True) -> AskRequest:
    request = AskRequest(question, k=k, mode=cast(Mode, mode), filters=Filters(path_prefix, meta), use_cache=use_cache)
    return check_ask(request, max_k)


def hits_out(hits: Any) -> list[dict[str, Any]]:
    return [jsonable(h) for h in hits]
