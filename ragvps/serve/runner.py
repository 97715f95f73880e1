"""The server's own worker for upload jobs: a thread per knowledge base with open jobs, which takes them from
its queue (migration 008) as `ragvps worker --jobs` would, and ends when none is left. An upload wakes its
knowledge base's thread (starting it when needed); at start-up every knowledge base with open jobs gets one, so
jobs left by a server that stopped, or by a worker that died (once its lease ran out), are taken over."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ragvps.errors import RagvpsError

if TYPE_CHECKING:
    from ragvps.app import App
    from ragvps.serve.lifecycle import Ready

log = logging.getLogger(__name__)
POLL_S = 1.0  # how often a knowledge base's thread looks for a job it was not woken for (a lease run out)


class JobRunner:
    def __init__(self, ready: Ready, poll: float = POLL_S):
        self.ready, self.poll = ready, poll
        self.name = f"server:{socket.gethostname()}:{os.getpid()}"
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}  # kb name -> (thread, wake)
        self._kicked: set[str] = set()

    def kick(self, app: App) -> None:
        """A job was queued in this App's knowledge base: make sure a thread takes it."""
        name = app.settings.database.kb
        with self._lock:
            self._kicked.add(name)
            running = self._threads.get(name)
            if running is not None and running[0].is_alive():
                running[1].set()
                return
            wake = threading.Event()
            thread = threading.Thread(target=self._run, args=(app, wake), name=f"jobs {name}", daemon=True)
            self._threads[name] = (thread, wake)
        thread.start()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Take jobs while the server runs; at its end, give back the jobs in hand after their batch."""
        import asyncio

        self.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.close)

    def start(self) -> None:
        """Once the library is open: a thread for each knowledge base with jobs left open."""
        threading.Thread(target=self._resume, name="jobs resume", daemon=True).start()

    def _resume(self) -> None:
        from ragvps.app.documents import open_job_count

        while not self.stop.is_set() and self.ready.library is None:
            self.stop.wait(0.5)
        library = self.ready.library
        if library is None:
            return
        try:
            for name in sorted(library.catalog()):
                app = library.app(name)
                if open_job_count(app):
                    self.kick(app)
        except RagvpsError as exc:
            log.warning("could not look for upload jobs left open: %s", exc)

    def _run(self, app: App, wake: threading.Event) -> None:
        from ragvps.app.documents import run_jobs

        name = app.settings.database.kb
        while not self.stop.is_set():
            with self._lock:
                self._kicked.discard(name)
            try:
                run_jobs(app, self.name, self.stop, exit_when_empty=True, wake=wake, poll=self.poll)
            except Exception as exc:  # logged; the next upload (or a restart) starts the thread again
                log.error("upload jobs of knowledge base %s stopped: %s", name, exc,
                          exc_info=not isinstance(exc, RagvpsError))
                self.stop.wait(self.poll)
            with self._lock:
                if name not in self._kicked:
                    self._threads.pop(name, None)
                    return

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking jobs; a job in hand is given back after its batch (the next start goes on with it)."""
        self.stop.set()
        with self._lock:
            threads = [t for t, _ in self._threads.values()]
        for thread in threads:
            thread.join(timeout)
