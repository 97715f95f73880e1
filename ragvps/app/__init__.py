"""The use-case layer: one App per process owns the settings, the embedder and the connections.

Every interface (the CLI, the HTTP API, MCP) opens one App and calls one method per use case; the request
and report types it builds and renders are in `requests`, the checks every request passes in `checks`.
`core` holds the App, `ask` the answer use case, `plan` and `evaluation` what `ragvps plan` and `eval` need.

    with App.open(settings) as app:                    # pooled=True in a long-running server
        result = app.search(SearchRequest("how do I rotate the keys?"))

Names load when first used, so `ragvps plan` (which needs no database) imports no database driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragvps.app.checks import MAX_QUERY_CHARS, MODES, Mode
    from ragvps.app.chunking import existing_path
    from ragvps.app.core import App
    from ragvps.app.rendering import json_object, jsonable
    from ragvps.app.requests import (
        Answer,
        AskRequest,
        ChatAnswer,
        ChatRequest,
        Health,
        Overrides,
        PromptPreview,
        SearchRequest,
        SearchResult,
    )
    from ragvps.ingest.chunking import IngestReport
    from ragvps.measure.inspect import StatsReport
    from ragvps.retrieve.filters import Filters

_WHERE = {
    "MAX_QUERY_CHARS": "ragvps.app.checks",
    "MODES": "ragvps.app.checks",
    "Mode": "ragvps.app.checks",
    "App": "ragvps.app.core",
    "existing_path": "ragvps.app.chunking",
    "json_object": "ragvps.app.rendering",
    "jsonable": "ragvps.app.rendering",
    "Filters": "ragvps.retrieve.filters",
    "IngestReport": "ragvps.ingest.chunking",
    "StatsReport": "ragvps.measure.inspect",
    **dict.fromkeys(
        (
            "Answer",
            "AskRequest",
            "ChatAnswer",
            "ChatRequest",
            "Health",
            "Overrides",
            "PromptPreview",
            "SearchRequest",
            "SearchResult",
        ),
        "ragvps.app.requests",
    ),
}
__all__ = [
    "MAX_QUERY_CHARS",
    "MODES",
    "Answer",
    "App",
    "AskRequest",
    "ChatAnswer",
    "ChatRequest",
    "Filters",
    "Health",
    "IngestReport",
    "Mode",
    "Overrides",
    "PromptPreview",
    "SearchRequest",
    "SearchResult",
    "StatsReport",
    "existing_path",
    "json_object",
    "jsonable",
]


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module 'ragvps.app' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
