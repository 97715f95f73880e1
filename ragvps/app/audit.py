"""The audit log: who searched, asked, chatted, uploaded or deleted in which knowledge base, and when; the question
only with the setting log_questions. Kept `audit_days` days (older rows go when new ones are written, at most once
an hour). `ragvps audit` reads it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ragvps.db import identity
from ragvps.db.database import driver_errors

if TYPE_CHECKING:
    from ragvps.config import Settings
    from ragvps.db.connections import Connections

PRUNE_EVERY_S = 3600.0


@dataclass(frozen=True)
class AuditEvent:
    who: str
    action: str
    kb: str | None
    status: int
    route: str
    request: str | None = None
    question: str | None = None


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    who: str
    action: str
    kb: str | None
    status: int
    route: str
    request: str | None
    question: str | None


class Audit:
    def __init__(self, connections: Connections, keep_days: int, settings: Settings):
        self.connections, self.keep_days, self.settings = connections, keep_days, settings
        self._pruned = 0.0
        self._lock = threading.Lock()

    def record(self, events: list[AuditEvent]) -> None:
        # a connection lost mid-write (PostgreSQL restarting) is a DatabaseError the writer keeps the rows through
        with driver_errors(self.settings), self.connections.connection() as conn, conn.transaction():
            identity.audit_insert(conn, [asdict(e) for e in events])
            with self._lock:
                due, self._pruned = time.monotonic() - self._pruned > PRUNE_EVERY_S, time.monotonic()
            if due:
                identity.audit_prune(conn, self.keep_days)

    def query(
        self,
        since: timedelta,
        who: str | None = None,
        kb: str | None = None,
        action: str | None = None,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        with driver_errors(self.settings), self.connections.connection() as conn:
            identity.audit_prune(conn, self.keep_days)
            rows = identity.audit_query(conn, datetime.now(UTC) - since, who, kb, action, limit)
        return [AuditEntry(*row) for row in rows]
