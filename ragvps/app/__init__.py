"""The use-case layer: one App per process owns the settings, the embedder and the connections.

Every interface (the CLI, the HTTP API, MCP) opens one App and calls one method per use case; the request
and report types it builds and renders are in `requests`. `core` holds the App, `ask` the answer use case.

    with App.open(settings) as app:                    # pooled=True in a long-running server
        result = app.search(SearchRequest("how do I rotate the keys?"))
"""

from ragvps.app.core import App, existing_path
from ragvps.app.requests import (
                                 Answer,
                                 AskRequest,
                                 ChatAnswer,
                                 ChatRequest,
                                 Health,
                                 PromptPreview,
                                 SearchRequest,
                                 SearchResult,
)

__all__ = ["Answer", "App", "AskRequest", "ChatAnswer", "ChatRequest", "Health", "PromptPreview", "SearchRequest",
           "SearchResult", "existing_path"]
