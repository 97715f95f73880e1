"""What the use cases need of the App (ragvps.app.core.App), so that they never import it, and the callbacks
an interface passes to stream an answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import psycopg
    from numpy.typing import NDArray

    from ragvps.app.observe import Observer
    from ragvps.app.requests import Answer, AskRequest, SearchRequest, SearchResult
    from ragvps.config import Settings
    from ragvps.db.catalog import KnowledgeBase
    from ragvps.db.connections import Connections
    from ragvps.db.replicated import Reader
    from ragvps.db.store import EmbeddingSet
    from ragvps.generate.prompt import Source
    from ragvps.generate.registry import Generator

Spare = Callable[[], "AbstractContextManager[psycopg.Connection | None]"]  # a second connection, when one is idle
OnSources = Callable[["Sequence[Source]"], None]  # the sources sent, before the first token
OnToken = Callable[[str], None]  # each piece of the answer's text as it comes


T = TypeVar("T")


def ignore(_: object) -> None:
    """The callback of a caller that does not listen."""


class App(Protocol):
    settings: Settings
    observer: Observer
    set_matched: bool

    @property
    def kb_name(self) -> str: ...

    @property
    def kb(self) -> KnowledgeBase | None: ...

    @property
    def connections(self) -> Connections: ...

    def embed_query(self, text: str) -> NDArray[np.float32]: ...

    def embed_queries(self, texts: Sequence[str]) -> NDArray[np.float32]: ...

    def active_set(self, conn: psycopg.Connection, action: str) -> EmbeddingSet: ...

    @property
    def generator(self) -> Generator: ...

    def search(self, request: SearchRequest) -> SearchResult: ...

    def connection(self) -> AbstractContextManager[psycopg.Connection]: ...

    def read(self, work: Callable[[Reader], T]) -> T: ...

    def ask(
        self, request: AskRequest, on_sources: OnSources | None = None, on_token: OnToken | None = None
    ) -> Answer: ...
