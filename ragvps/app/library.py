"""The library: every knowledge base of one database, over one set of connections. A server keeps one for all
the knowledge bases it serves (one pool, one App each, the embedding model loaded once for those that share
it); `ragvps kb` and `ragvps key` manage the catalog through it.

    with Library.open(settings, pooled=True) as library:
        faq = library.app("faq")          # the App bound to faq, made on first use
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ragvps.app import kbs
from ragvps.app.audit import Audit
from ragvps.app.core import App
from ragvps.app.identity import Identities
from ragvps.app.kbs import catalog_of
from ragvps.app.keys import Keys
from ragvps.app.observe import QUIET, Observer
from ragvps.app.requests import SearchRequest, SearchResult
from ragvps.config import Settings
from ragvps.db import store
from ragvps.db.catalog import not_found
from ragvps.db.connections import PooledConnections, SingleConnection
from ragvps.db.database import driver_errors
from ragvps.db.embedded import stop_embedded as stop

if TYPE_CHECKING:
    from ragvps.app.kbs import KbInfo
    from ragvps.db.catalog import KnowledgeBase
    from ragvps.db.connections import Connections
    from ragvps.retrieve.search import Hit

CATALOG_TTL_S = 2.0  # a knowledge base dropped or renamed elsewhere is seen within this


class Library:
    def __init__(self, settings: Settings, connections: Connections, observer: Observer = QUIET):
        self.settings = settings
        self.connections = connections
        self.observer = observer  # given to every App made here
        self._apps: dict[str, tuple[int, App]] = {}  # name -> (catalog id, App)
        self._names: tuple[float, dict[str, int]] = (0.0, {})
        self._lock = threading.Lock()

    @classmethod
    @contextmanager
    def open(cls, settings: Settings, *, pooled: bool = False, observer: Observer = QUIET) -> Iterator[Library]:
        connections: Connections = PooledConnections(settings) if pooled else SingleConnection(settings)
        library = cls(settings, connections, observer)
        try:
            yield library
        finally:
            for _, app in library._apps.values():
                app.close_generator()
            connections.close()

    @classmethod
    def around(cls, app: App) -> Library:
        """The library of an App opened by the caller (its connections; the App kept as its knowledge base's)."""
        library = cls(app.settings, app.connections, app.observer)
        if app.kb is not None:
            library._apps[app.kb.name] = (app.kb.id, app)
        return library

    def catalog(self, fresh: bool = False) -> dict[str, int]:
        """Knowledge base name -> id, as the catalog said at most CATALOG_TTL_S ago (or now, `fresh`)."""
        with self._lock:
            at, names = self._names
            if fresh or time.monotonic() - at > CATALOG_TTL_S:
                with driver_errors(self.settings):
                    names = {kb.name: kb.id for kb in catalog_of(self.connections)}
                self._names = (time.monotonic(), names)
            return names

    def app(self, name: str) -> App:
        """The App bound to knowledge base `name`; a NotFoundError listing the others when there is none."""
        names = self.catalog()
        if name not in names:
            names = self.catalog(fresh=True)
            if name not in names:
                raise not_found(name, sorted(names))
        with self._lock:
            cached = self._apps.get(name)
            if cached is not None and cached[0] == names[name]:
                return cached[1]

        with driver_errors(self.settings):
            app = App.bound(self.settings.replace(kb=name), self.connections)
        app.observer = self.observer
        with self._lock:
            self._apps[name] = (names[name], app)
        return app

    def known(self, name: str) -> App | None:
        """The App of `name` when finding it needs no database (the catalog read less than CATALOG_TTL_S ago
        and the App made): a server then resolves a request's knowledge base on its event loop, without a
        thread of its own. None: ask `app(name)`."""
        with self._lock:
            at, names = self._names
            cached = self._apps.get(name)
            if time.monotonic() - at > CATALOG_TTL_S or cached is None or names.get(name) != cached[0]:
                return None
            return cached[1]

    def made(self) -> list[App]:
        """The Apps made so far."""
        with self._lock:
            return [app for _, app in self._apps.values()]

    def forget(self, name: str) -> None:
        with self._lock:
            self._apps.pop(name, None)
            self._names = (0.0, {})

    def create(self, name: str, kept: dict[str, object]) -> KnowledgeBase:
        kb = kbs.create(self.settings, self.connections, name, kept)
        self.forget(name)
        return kb

    def listing(self) -> list[KbInfo]:
        return kbs.listing(self.connections)

    def drop(self, name: str) -> KnowledgeBase:
        kb = kbs.drop(self.settings, self.connections, name)
        self.forget(name)
        return kb

    def rename(self, old: str, new: str) -> None:
        kbs.rename(self.settings, self.connections, old, new)
        self.forget(old)
        self.forget(new)

    def has_content(self, name: str) -> bool:
        """Is anything ingested into knowledge base `name` (it has an embedding set)?"""
        return self.app(name).read(lambda r: store.active_set(r.conn) is not None)

    def keys(self) -> Keys:
        """API keys with roles on knowledge bases, kept (hashed) in the catalog."""
        return Keys(self.connections)

    def identities(self) -> Identities:
        """The users who signed in (their groups at their last sign-in), in the catalog."""
        return Identities(self.connections)

    def audit(self) -> Audit:
        """Who did what in which knowledge base, kept audit_days days."""
        return Audit(self.connections, self.settings.auth.audit_days, self.settings)


def stop_embedded(settings: Settings) -> bool:
    """`ragvps server stop`: stop the embedded PostgreSQL if it runs; True if one was stopped."""
    return stop(settings)


def search_many(apps: Sequence[App], request: SearchRequest) -> SearchResult:
    """One search over several knowledge bases: each searched with its own model and index, the lists fused
    by rank (RRF: a hit's score is 1 / (rrf_k + its rank in its own list)), each hit naming its knowledge base.
    Fusing by rank works whatever the models; knowledge bases that share a model could fuse vector scores, but
    one rule for every pair keeps a hit's place independent of which other knowledge bases were asked."""
    k = request.k or apps[0].settings.search.top_k
    scored: list[tuple[float, int, Hit, str]] = []
    timings: dict[str, float] = {}
    for order, app in enumerate(apps):
        name = app.kb_name
        result = app.search(dataclasses.replace(request, k=k))
        timings |= {f"{name}.{stage}": ms for stage, ms in result.timings.items()}
        rrf_k = app.settings.search.rrf_k
        scored.extend((1.0 / (rrf_k + hit.rank), order, hit, name) for hit in result.hits)
    scored.sort(key=lambda t: (-t[0], t[1], t[2].rank))
    hits = [
        dataclasses.replace(hit, rank=i, score=round(score, 6), kb=name)
        for i, (score, _, hit, name) in enumerate(scored[:k], 1)
    ]
    return SearchResult(request.query, request.mode, hits, ",".join(dict.fromkeys(a.spec.name for a in apps)), timings)
