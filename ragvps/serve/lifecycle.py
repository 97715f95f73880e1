"""The App's life in a server: opened in the background at start-up (retrying while the database is down),
shared by the HTTP routes and the MCP tools, closed at shutdown."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ragvps.config import Settings
from ragvps.errors import ConfigError, RagvpsError, UnavailableError, UsageError, redact

if TYPE_CHECKING:
    from ragvps.app import App

log = logging.getLogger(__name__)
RETRY_OPEN_S = 5.0


class Ready:
    """The App once it is open (or the reason it is not yet), shared by the HTTP routes and the MCP tools."""

    def __init__(self, settings: Settings, app: App | None = None,
                 on_fatal: Callable[[RagvpsError], None] | None = None):
        self.settings = settings
        self.app = app
        self.on_fatal = on_fatal
        self.error = "starting: loading the model and connecting to the database"
        self._stack = contextlib.ExitStack()
        self._stop = threading.Event()

    def get(self) -> App:
        if self.app is None:
            raise UnavailableError(f"the server is not ready yet ({self.error}); retry in a few seconds")
        return self.app

    def open_forever(self) -> None:
        """Open the App (pool, embedder, a warm-up query), retrying until it works or the server stops."""
        from ragvps.app import App

        while not self._stop.is_set():
            stack = contextlib.ExitStack()
            try:
                app = stack.enter_context(App.open(self.settings, pooled=True))
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
            self.app = app
            log.info("ready: model %s", self.settings.embed.model_name)
            return

    def close(self) -> None:
        self._stop.set()
        self._stack.close()


def for_serving(settings: Settings) -> Settings:
    """A server embeds one short query per request, several requests at once: one onnxruntime thread each
    (unless the setting threads says otherwise). Its spinning pool threads would otherwise take the CPU
    PostgreSQL needs for the same requests (bench/RESULTS.md: 3x slower searches on a 2-core machine)."""
    return settings.replace(threads=1) if settings.embed.threads == 0 else settings
