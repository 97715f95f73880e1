"""What the server writes to the audit log (app/audit.py): one row for each search, question, chat, upload,
deletion, knowledge-base change and connected source's addition, sync and removal, naming who (the key's name or
the user), the knowledge base, the status and the request id; the question only with log_questions. The request
log hands each finished request here; rows are written by one thread in batches (every FLUSH_S), so a request
never waits on the audit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from ragvps.app.audit import AuditEvent
from ragvps.errors import RagvpsError

if TYPE_CHECKING:
    from starlette.types import Scope

    from ragvps.serve.gate.request_log import RequestRecord
    from ragvps.serve.shared.lifecycle import Ready

log = logging.getLogger(__name__)
FLUSH_S = 0.5
WARN_EVERY_S = 30.0  # rows kept for a database away: said once, then again at most this often
MAX_PENDING = 100_000  # beyond this (the database down for long under load) the oldest rows are dropped, and said

ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/search"): "search",
    ("POST", "/kb/{name}/search"): "search",
    ("POST", "/ask"): "ask",
    ("POST", "/kb/{name}/ask"): "ask",
    ("POST", "/v1/chat/completions"): "chat",
    ("POST", "/api/chat"): "chat",
    ("POST", "/api/generate"): "chat",
    ("POST", "/kb/{name}/documents"): "upload",
    ("DELETE", "/kb/{name}/documents/{doc}"): "delete",
    ("DELETE", "/jobs/{job}"): "cancel",
    ("POST", "/kb/{name}/sources"): "source_add",
    ("POST", "/kb/{name}/sources/{source}/sync"): "sync",
    ("DELETE", "/kb/{name}/sources/{source}"): "source_remove",
    ("POST", "/mcp"): "mcp",
}


def action_of(method: str, route: str) -> str | None:
    return ACTIONS.get((method, route))


class AuditLog:
    def __init__(self, ready: Ready, with_questions: bool, max_pending: int = MAX_PENDING):
        self.ready, self.with_questions, self.max_pending = ready, with_questions, max_pending
        self._pending: deque[AuditEvent] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._dropped = 0
        self._warned = 0.0

    def note(self, record: RequestRecord, scope: Scope) -> None:
        action = action_of(record.method, record.route)
        if action is None:
            return
        principal = scope.get("state", {}).get("principal")
        who = getattr(principal, "name", None) or "anonymous"
        question = record.question if self.with_questions else None
        event = AuditEvent(
            who, action, ",".join(record.kbs) or None, record.status or 500, record.route, record.id, question
        )
        with self._lock:
            self._pending.append(event)
            self._bound()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ragvps-audit", daemon=True)
                self._thread.start()

    def flush(self) -> None:
        """Write what is pending now (the writer's loop, and the server's shutdown)."""
        library = self.ready.library
        with self._lock:
            events, dropped = list(self._pending), self._dropped
            self._pending.clear()
            self._dropped = 0
        if dropped:
            log.warning("the audit log dropped %d rows: the database could not take them", dropped)
        if not events:
            return
        if library is None:  # the server is still opening its library
            self._put_back(events)
            return
        try:
            library.audit().record(events)
        except RagvpsError as exc:  # the database is away (or read-only while its primary is): said every WARN_EVERY_S
            now = time.monotonic()
            if now - self._warned >= WARN_EVERY_S:
                self._warned = now
                log.warning("cannot write %d audit rows yet (kept, written when it can): %s", len(events), exc)
            self._put_back(events)
            return
        self._warned = 0.0

    def _put_back(self, events: list[AuditEvent]) -> None:
        """Keep unwritten rows for the next round, ahead of newer ones, within max_pending (the oldest go first)."""
        with self._lock:
            self._pending.extendleft(reversed(events))
            self._bound()

    def _bound(self) -> None:
        """Drop the oldest rows past max_pending, counted for the next flush's warning (the lock is held)."""
        while len(self._pending) > self.max_pending:
            self._pending.popleft()
            self._dropped += 1

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_S)
            self.flush()
