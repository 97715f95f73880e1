"""The App's life in a server: opened in the background at start-up (retrying while the database is down),
shared by the HTTP routes and the MCP tools, closed at shutdown."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ragvps.app.kbs import not_found
from ragvps.app.library import Library
from ragvps.app.observe import QUIET, Observer
from ragvps.config import Settings
from ragvps.errors import ConfigError, NotFoundError, RagvpsError, UnavailableError, UsageError, redact

if TYPE_CHECKING:
    from ragvps.app import App
    from ragvps.app.keys import Principal, Role

log = logging.getLogger(__name__)
RETRY_OPEN_S = 5.0


class Ready:
    """The library of knowledge bases once it is open (or the reason it is not yet), with the App of the
    server's own knowledge base (`default`), shared by the HTTP routes and the MCP tools."""

    def __init__(
        self, settings: Settings, app: App | None = None, on_fatal: Callable[[RagvpsError], None] | None = None
    ):
        self.settings = settings
        self.app = app
        self.observer: Observer = QUIET if app is None else app.observer  # told of every search and answer
        self.library = None if app is None else Library.around(app)
        self.on_fatal = on_fatal
        self.error = "starting: loading the model and connecting to the database"
        self._stack = contextlib.ExitStack()
        self._stop = threading.Event()

    def observe(self, observer: Observer) -> None:
        """Every App of this server, made already or later, reports its searches and answers to `observer`."""
        self.observer = observer
        if self.library is not None:
            self.library.observer = observer
            for app in self.library.made():
                app.observer = observer

    def get(self) -> App:
        if self.app is None:
            raise UnavailableError(f"the server is not ready yet ({self.error}); retry in a few seconds")
        return self.app

    def kb(self, name: str, principal: Principal, role: Role = "read") -> App:
        """The App of knowledge base `name` if `principal` holds `role` on it; one it may not use gets the same
        404 as one that does not exist, naming only those it may use."""
        self.get()
        library = self.library
        assert library is not None
        if principal.can(name, role):
            try:
                return library.app(name)
            except NotFoundError:
                pass
        raise not_found(name, principal.visible(sorted(library.catalog()), role))

    def kb_known(self, name: str, principal: Principal, role: Role = "read") -> App | None:
        """`kb(...)` when it needs no database (Library.known), else None: ask `kb` off the event loop."""
        if self.library is None or not principal.can(name, role):
            return None
        return self.library.known(name)

    def visible(self, principal: Principal, role: Role = "read") -> list[str]:
        """The knowledge bases `principal` may use with `role`, by name."""
        self.get()
        assert self.library is not None
        return principal.visible(sorted(self.library.catalog()), role)

    def listed(self, principal: Principal) -> list[str]:
        """The knowledge bases a model list shows `principal`: those it may read that hold documents (an empty one
        answers nothing), or all it may read when none does (so that a fresh server still shows one)."""
        names = self.visible(principal)
        assert self.library is not None
        library = self.library
        full = [n for n in names if library.has_content(n)]
        return full or names

    def open_forever(self) -> None:
        """Open the App (pool, embedder, a warm-up query), retrying until it works or the server stops."""
        while not self._stop.is_set():
            stack = contextlib.ExitStack()
            try:
                library = stack.enter_context(Library.open(self.settings, pooled=True, observer=self.observer))
                app = library.app(self.settings.database.kb)
                app.embed_query("warm up the model")
            except (ConfigError, UsageError) as exc:  # a wrong setting does not heal by waiting: stop
                stack.close()
                self.error = redact(str(exc))
                log.error("cannot start: %s", self.error)
                if self.on_fatal is not None:
                    self.on_fatal(exc)
                return
            except Exception as exc:  # any other failure to start is reported by /health and retried
                stack.close()
                self.error = redact(str(exc) if isinstance(exc, RagvpsError) else f"{exc.__class__.__name__}: {exc}")
                log.warning("not ready, retrying in %.0f s: %s", RETRY_OPEN_S, self.error)
                self._stop.wait(RETRY_OPEN_S)
                continue
            self._stack.enter_context(stack)
            self.library, self.app = library, app
            log.info("ready: model %s", self.settings.embed.model_name)
            self._say_keys(library)
            return

    def _say_keys(self, library: Library) -> None:
        made = len(library.keys().listing())
        configured = bool(self.settings.serve.api_keys or self.settings.serve.api_key_file)
        if made or configured:
            log.warning(
                "API keys: %s%d made with `ragvps key create`: every request needs a key",
                "the configured ones and " if configured else "",
                made,
            )
        else:
            log.warning("no API key is set: anyone who reaches this address may read every knowledge base")

    def close(self) -> None:
        self._stop.set()
        self._stack.close()


def for_serving(settings: Settings) -> Settings:
    """A server embeds one short query per request, several requests at once: one onnxruntime thread each
    (unless the setting threads says otherwise). Its spinning pool threads would otherwise take the CPU
    PostgreSQL needs for the same requests (bench/RESULTS.md: 3x slower searches on a 2-core machine)."""
    return settings.replace(threads=1) if settings.embed.threads == 0 else settings
