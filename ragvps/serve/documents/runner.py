"""The server's workers for jobs (uploads, and syncs of connected sources): a `ragvps worker --jobs` child process per
knowledge base with open jobs, started when an upload or a sync queues one (or at start-up, for jobs left open),
below the server on the CPU once it has started (SCHED_BATCH at nice 5: it yields to searches and never starves;
`ragvps worker --below-server`), ending once its queue has been empty for LINGER_S. A child process rather
than a thread: parsing and embedding do not hold the server's GIL while it answers searches, a hostile file that
crashed a parser would take down the worker and not the server, and the worker takes its jobs under a lease, as a
`ragvps worker --jobs` on another machine would (a child that dies is replaced, and its job taken over once its
lease ran out)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ragvps.app.documents import open_job_count
from ragvps.config import SECRETS, SETTINGS, Settings
from ragvps.errors import RagvpsError

if TYPE_CHECKING:
    from ragvps.app import App
    from ragvps.serve.shared.lifecycle import Ready

log = logging.getLogger(__name__)
WATCH_S = 1.0  # how often the runner looks for a knowledge base whose worker ended with jobs left
LINGER_S = 30.0  # a worker waits this long for another upload before it ends
_SERVER_ONLY = ("serve", "generate", "rerank")  # setting groups a worker has no use for


def worker_env(settings: Settings) -> dict[str, str]:
    """The server's environment with every setting that differs from its default, for a worker that must use the
    same database, data directory and model as the server (settings from flags and files included); the worker
    embeds with all cores (the server's one onnxruntime thread per request does not apply to it)."""
    env = dict(os.environ)
    default = Settings()
    for name, (group, _) in SETTINGS.items():
        value = settings.get(name)
        if group in _SERVER_ONLY or (name in SECRETS and name != "database_url") or value == default.get(name):
            continue
        env["RAGVPS_" + name.upper()] = (
            ",".join(map(str, value))
            if isinstance(value, tuple)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
    env["RAGVPS_THREADS"] = "0"
    package = str(Path(__file__).resolve().parents[2])  # this ragvps, whatever the child's sys.path
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package, env.get("PYTHONPATH", "")) if p)
    return env


class JobRunner:
    def __init__(self, ready: Ready, watch: float = WATCH_S, linger: float = LINGER_S):
        self.ready, self.watch, self.linger = ready, watch, linger
        self.name = f"server:{socket.gethostname()}:{os.getpid()}"
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._wanted: dict[str, App] = {}  # knowledge bases that may have open jobs

    def kick(self, app: App) -> None:
        """A job was queued in this App's knowledge base: make sure a worker takes it."""
        name = app.settings.database.kb
        with self._lock:
            self._wanted[name] = app
            self._ensure(name)

    def _ensure(self, name: str) -> None:
        child = self._children.get(name)
        if (child is None or child.poll() is not None) and not self.stop.is_set():
            self._children[name] = self._spawn(name)

    def _spawn(self, name: str) -> subprocess.Popen[bytes]:
        args = [
            sys.executable,
            "-m",
            "ragvps",
            "worker",
            "--jobs",
            "--exit-when-empty",
            "--linger",
            str(self.linger),
            "--kb",
            name,
            "--name",
            f"{self.name}/{name}",
            "--below-server",
        ]
        child = subprocess.Popen(
            args, env=worker_env(self.ready.settings), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
        )
        log.info("started upload worker %d for knowledge base %s", child.pid, name)
        return child

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Workers while the server runs; at its end they give back the jobs in hand after their batch."""
        thread = threading.Thread(target=self._watch, name="upload workers", daemon=True)
        thread.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.close)

    def _watch(self) -> None:
        """At start-up, every knowledge base with open jobs; then, every WATCH_S, a worker again for a knowledge base
        whose worker ended (or died) with jobs left."""
        while not self.stop.is_set() and self.ready.library is None:
            self.stop.wait(0.5)
        library = self.ready.library
        if library is None:
            return
        try:
            with self._lock:
                self._wanted |= {name: library.app(name) for name in sorted(library.catalog())}
        except RagvpsError as exc:
            log.warning("could not look for upload jobs left open: %s", exc)
        while not self.stop.is_set():
            with self._lock:
                idle = {
                    n: a
                    for n, a in self._wanted.items()
                    if n not in self._children or self._children[n].poll() is not None
                }
            for name, app in idle.items():
                try:
                    left = open_job_count(app)
                except RagvpsError as exc:
                    log.warning("upload jobs of knowledge base %s: %s", name, exc)
                    continue
                with self._lock:
                    if left:
                        self._ensure(name)
                    elif name not in self._children or self._children[name].poll() is not None:
                        self._wanted.pop(name, None)
                        self._children.pop(name, None)
            self.stop.wait(self.watch)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the workers: each finishes its batch and gives its job back (the next start goes on with it)."""
        self.stop.set()
        with self._lock:
            children = list(self._children.values())
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)
